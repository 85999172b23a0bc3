package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// postMessage seals and publishes a message from the host in home h to the
// agent; the per-agent sequence number is kept in the home under a lock, so
// the daemon and `bridge send` can post at once.
func postMessage(h *trust.Home, f *syncsafe.Folder, host *bcrypto.Identity, agent string, agentBox []byte, n bridge.Note) (*bridge.Message, error) {
	if len(n.Text) > bridge.MaxMessageText {
		return nil, fmt.Errorf("message: %w: %d bytes of text, cap %d", bridge.ErrTooLarge, len(n.Text), bridge.MaxMessageText)
	}
	if err := os.MkdirAll(h.Path("inbox"), 0o700); err != nil {
		return nil, err
	}
	lk, err := syncsafe.Lock(h.Path("inbox", agent+".lock"))
	if err != nil {
		// Another poster holds it only for a moment.
		time.Sleep(50 * time.Millisecond)
		if lk, err = syncsafe.Lock(h.Path("inbox", agent+".lock")); err != nil {
			return nil, err
		}
	}
	defer lk.Unlock()
	seqFile := h.Path("inbox", agent+".seq")
	var seq uint64
	if b, err := os.ReadFile(seqFile); err == nil {
		seq, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	}
	seq++
	if err := syncsafe.WriteFileAtomic(seqFile, []byte(strconv.FormatUint(seq, 10)+"\n")); err != nil {
		return nil, err
	}
	signed, m, err := bridge.SealMessage(bridge.NewMessage{Host: host, HostID: h.Config.ID, Agent: agent, AgentBoxPub: agentBox, Seq: seq, Note: n, Created: time.Now()})
	if err != nil {
		return nil, err
	}
	return m, f.Publish(bridge.ResultPath(h.Config.ID, agent, m.ID, bridge.ExtMessage), bridge.WriteBytes(signed), syncsafe.WithMode(0o644))
}

// Send posts a text message from a host to a trusted agent (by name or id).
func Send(h *trust.Home, agent, text string) (*bridge.Message, error) {
	if h.Config.Role != "host" {
		return nil, bridge.WithHint(errors.New("send: this home belongs to an agent"), "agents write requests; hosts send messages")
	}
	p, b, err := h.Peer(agent)
	if err != nil {
		return nil, err
	}
	if p.Role != "agent" {
		return nil, fmt.Errorf("send: %s is a %s", agent, p.Role)
	}
	f, err := h.OpenFolder()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return postMessage(h, f, h.Identity(), p.ID, b.BoxPub, bridge.Note{Kind: bridge.NoteText, Text: text})
}

// notify posts a daemon notice to one agent, or to every trusted agent when
// agent is "". Failures are logged, never fatal.
func (o *outbox) notify(agent string, n bridge.Note) {
	n.Kind = "notice"
	for id, keys := range o.agents() {
		if agent != "" && id != agent {
			continue
		}
		cur, ok := keys.peer.Current()
		if !ok {
			continue
		}
		if _, err := postMessage(o.home, o.folder, o.own().current, id, cur.BoxPub, n); err != nil {
			o.log.Warn("post notice", "agent", keys.name, "event", n.Event, "err", err)
		}
	}
}

// collectMessages removes messages the agent acked, after the grace period
// (or any message past the retention), as results are collected.
func (c *collector) collectMessages(o GCOptions, rep *GCReport, now time.Time) {
	// now is the order's time for an ordered collection: a message
	// published since is younger than any grace.
	for agent, keys := range c.agents() {
		dir := bridge.ToAgentDir(c.me, agent)
		// The directory holds two files per result kept: only the
		// messages are kept from the listing, unsorted until then.
		entries, err := c.folder.ListFunc(dir, func(name string) bool {
			_, ext, ok := bridge.ParseToAgentName(name)
			return ok && ext == bridge.ExtMessage
		})
		if err != nil {
			continue
		}
		for _, e := range entries {
			id, _, _ := bridge.ParseToAgentName(e.Name)
			fi, err := c.folder.Lstat(dir + "/" + e.Name)
			if err != nil {
				continue
			}
			age := now.Sub(fi.ModTime())
			why := ""
			if age > o.Grace {
				if data, err := c.folder.ReadFile(bridge.RequestPath(c.me, agent, id, bridge.ExtAck), bcrypto.KindAck.MaxSize()); err == nil {
					msg, _ := c.folder.ReadFile(dir+"/"+e.Name, bcrypto.KindMessage.MaxSize())
					if a, err := bridge.OpenAck(data, id, c.me, agent, keys.sign(c.opt.Now())); err == nil && a.ResultSHA256 == bridge.SHA256Hex(msg) {
						why = "acked"
					}
				}
			}
			if why == "" && age > o.Retention {
				why = "retention"
			}
			if why == "" {
				if o.Explain {
					// The earliest it may go: at its grace if acked by
					// then; past its grace unacked, at its retention.
					until := fi.ModTime().Add(o.Retention)
					if age <= o.Grace {
						until = fi.ModTime().Add(o.Grace)
					}
					rep.keep(keptMessage, until)
				}
				continue
			}
			rep.Items = append(rep.Items, GCItem{Agent: agent, ID: id, What: "message", Why: why})
			if !o.DryRun {
				c.folder.Remove(dir + "/" + e.Name)
			}
		}
	}
}

// inboxStamp names the home file that records the policy a daemon last
// served, to notice a change across restarts.
func (o *outbox) policyChanged() (first, changed bool) {
	p := o.home.Path("inbox", "policy.sha256")
	old, _ := os.ReadFile(p)
	os.MkdirAll(filepath.Dir(p), 0o700)
	sha := o.pol().SHA256
	syncsafe.WriteFileAtomic(p, []byte(sha))
	return len(old) == 0, len(old) > 0 && string(old) != sha
}
