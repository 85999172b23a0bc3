package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// The inbox (SPEC §10b): host → agent messages, signed by the host and
// sealed to the agent, as write-once files `<id>.message` in the agent's
// to-agent directory. The agent acks a message with `<id>.ack` so the host
// can collect it; ordering is by the per-agent sequence number inside.

// Message is the signed body of a `.message` file.
type Message struct {
	V           int    `json:"v"`
	ID          string `json:"id"`
	Host        string `json:"host"`
	HostKid     string `json:"host_kid"`
	Agent       string `json:"agent"`
	AgentBoxKid string `json:"agent_box_kid"`
	Seq         uint64 `json:"seq"`
	Created     int64  `json:"created"`
	Key         []byte `json:"key"`  // the payload key, wrapped for the agent
	Data        []byte `json:"data"` // the sealed Note
}

// Note is the sealed content of a message.
type Note struct {
	V       int    `json:"v"`
	Kind    string `json:"kind"`    // "text" (from `bridge send`) or "notice" (from the daemon)
	Event   string `json:"event"`   // notices: started, stopping, approval-pending, key-rotated, policy-changed
	Request string `json:"request"` // the request a notice is about, if any
	Text    string `json:"text"`
}

// MaxMessageText caps a message's text.
const MaxMessageText = 32 << 10

// postMessage seals and publishes a message from the host in home h to the
// agent; the per-agent sequence number is kept in the home under a lock, so
// the daemon and `bridge send` can post at once.
func postMessage(h *Home, f *syncsafe.Folder, host *bcrypto.Identity, agent string, agentBox []byte, n Note) (*Message, error) {
	if len(n.Text) > MaxMessageText {
		return nil, fmt.Errorf("message: %w: %d bytes of text, cap %d", ErrTooLarge, len(n.Text), MaxMessageText)
	}
	n.V = 1
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
	if err := writeFileAtomic(seqFile, []byte(strconv.FormatUint(seq, 10)+"\n")); err != nil {
		return nil, err
	}
	var ct bytes.Buffer
	s, wrapped, err := bcrypto.NewSealer(&ct, agentBox, nil)
	if err != nil {
		return nil, err
	}
	body, _ := bcrypto.EncodeBody(n)
	s.Write(body)
	if err := s.Close(); err != nil {
		return nil, err
	}
	m := &Message{V: 1, ID: NewRequestID(), Host: h.Config.ID, HostKid: host.SignKid(), Agent: agent,
		AgentBoxKid: bcrypto.Kid(bcrypto.AlgX25519, agentBox), Seq: seq, Created: time.Now().Unix(), Key: wrapped, Data: ct.Bytes()}
	enc, err := bcrypto.EncodeBody(m)
	if err != nil {
		return nil, err
	}
	signed, err := bcrypto.Sign(bcrypto.KindMessage, enc, host)
	if err != nil {
		return nil, err
	}
	return m, f.Publish(ResultPath(h.Config.ID, agent, m.ID, ExtMessage), writeBytes(signed), syncsafe.WithMode(0o644))
}

// Send posts a text message from a host to a trusted agent (by name or id).
func Send(h *Home, agent, text string) (*Message, error) {
	if h.Config.Role != "host" {
		return nil, withHint(errors.New("send: this home belongs to an agent"), "agents write requests; hosts send messages")
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
	return postMessage(h, f, h.Identity(), p.ID, b.BoxPub, Note{Kind: "text", Text: text})
}

// notify posts a daemon notice to one agent, or to every trusted agent when
// agent is "". Failures are logged, never fatal.
func (d *Daemon) notify(agent string, n Note) {
	n.Kind = "notice"
	for id, keys := range d.agents() {
		if agent != "" && id != agent {
			continue
		}
		cur, ok := keys.peer.Current()
		if !ok {
			continue
		}
		if _, err := postMessage(d.home, d.folder, d.own().current, id, cur.BoxPub, n); err != nil {
			d.log.Warn("post notice", "agent", keys.name, "event", n.Event, "err", err)
		}
	}
}

// InboxItem is one verified message as the agent reads it.
type InboxItem struct {
	ID       string    `json:"id"`
	Host     string    `json:"host"`
	HostName string    `json:"host_name"`
	Seq      uint64    `json:"seq"`
	Created  time.Time `json:"created"`
	Note     Note      `json:"note"`
	New      bool      `json:"new"`
	sha      string
}

// inboxState is what the agent has seen, in its home.
type inboxState struct {
	Seen []string `json:"seen"`
}

// maxInboxSeen bounds the seen ids the agent keeps, newest last: a message
// is acked when seen and collected by its host after a grace, so an id
// older than this many seen since is long gone from the folder. (A
// variable for tests.)
var maxInboxSeen = 10_000

func (c *Client) inboxState() inboxState {
	var st inboxState
	if b, err := os.ReadFile(c.home.Path("inbox.json")); err == nil {
		json.Unmarshal(b, &st)
	}
	return st
}

// Inbox reads the messages of every trusted host, verified and decrypted,
// in order (host, then sequence). New reports the ones not shown before. It
// reads the folder only; see MarkSeen.
func (c *Client) Inbox() ([]InboxItem, error) {
	peers, err := c.home.Peers()
	if err != nil {
		return nil, err
	}
	own, err := c.home.OwnKeys()
	if err != nil {
		return nil, err
	}
	st := c.inboxState()
	var items []InboxItem
	for _, p := range peers {
		if p.Role != "host" {
			continue
		}
		dir := ToAgentDir(p.ID, c.home.Config.ID)
		entries, err := c.folder.List(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		var hostKeys [][]byte
		for _, k := range p.keysIn(KeyValid, time.Now()) {
			hostKeys = append(hostKeys, k.SignPub)
		}
		for _, e := range entries {
			id, ext, ok := ParseToAgentName(e.Name)
			if !ok || ext != ExtMessage || e.Type != 0 {
				continue
			}
			data, err := c.folder.ReadFile(dir+"/"+e.Name, bcrypto.KindMessage.MaxSize())
			if err != nil {
				continue
			}
			it, err := c.openMessage(data, id, p, hostKeys, own)
			if err != nil {
				continue // not (yet) a valid message from this host: ignore it
			}
			it.New = !slices.Contains(st.Seen, it.ID)
			items = append(items, *it)
		}
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].Host != items[j].Host {
			return items[i].HostName < items[j].HostName
		}
		return items[i].Seq < items[j].Seq
	})
	return items, nil
}

func (c *Client) openMessage(data []byte, stem string, p Peer, hostKeys [][]byte, own []OwnKey) (*InboxItem, error) {
	var m Message
	if err := openBody(bcrypto.KindMessage, data, hostKeys, &m); err != nil {
		return nil, err
	}
	if m.V != 1 || m.ID != stem || m.Host != p.ID || m.Agent != c.home.Config.ID {
		return nil, ErrWrongRecipient
	}
	var me *bcrypto.Identity
	for _, k := range own {
		if k.Identity.BoxKid() == m.AgentBoxKid {
			me = k.Identity
		}
	}
	if me == nil {
		return nil, bcrypto.ErrUnknownKey
	}
	o, err := bcrypto.NewOpener(bytes.NewReader(m.Data), m.Key, me)
	if err != nil {
		return nil, err
	}
	plain, err := io.ReadAll(io.LimitReader(o, 2*MaxMessageText))
	if err != nil {
		return nil, err
	}
	var n Note
	if err := bcrypto.DecodeBody(plain, &n); err != nil {
		return nil, err
	}
	return &InboxItem{ID: m.ID, Host: p.ID, HostName: p.Name, Seq: m.Seq, Created: time.Unix(m.Created, 0), Note: n, sha: SHA256Hex(data)}, nil
}

// MarkSeen records items as seen in the agent's home and, with ack, acks
// them in the agent's own tree so the host can collect them.
func (c *Client) MarkSeen(items []InboxItem, ack bool) error {
	st := c.inboxState()
	for _, it := range items {
		if !slices.Contains(st.Seen, it.ID) {
			st.Seen = append(st.Seen, it.ID)
		}
		if ack {
			a, err := SignAck(c.home.Identity(), Ack{ID: it.ID, Agent: c.home.Config.ID, Host: it.Host, ResultSHA256: it.sha, Created: time.Now().Unix()})
			if err != nil {
				return err
			}
			if err := c.folder.Publish(RequestPath(it.Host, c.home.Config.ID, it.ID, ExtAck), writeBytes(a)); err != nil && !errors.Is(err, syncsafe.ErrExists) {
				return err
			}
		}
	}
	if n := len(st.Seen); n > maxInboxSeen {
		st.Seen = st.Seen[n-maxInboxSeen:]
	}
	data, _ := json.Marshal(st)
	return writeFileAtomic(c.home.Path("inbox.json"), data)
}

// collectMessages removes messages the agent acked, after the grace period
// (or any message past the retention), as results are collected.
func (d *Daemon) collectMessages(o GCOptions, rep *GCReport) {
	now := d.opt.Now()
	for agent, keys := range d.agents() {
		dir := ToAgentDir(d.me, agent)
		// The directory holds two files per result kept: only the
		// messages are kept from the listing, unsorted until then.
		entries, err := d.folder.ListFunc(dir, func(name string) bool {
			_, ext, ok := ParseToAgentName(name)
			return ok && ext == ExtMessage
		})
		if err != nil {
			continue
		}
		for _, e := range entries {
			id, _, _ := ParseToAgentName(e.Name)
			fi, err := d.folder.Lstat(dir + "/" + e.Name)
			if err != nil {
				continue
			}
			age := now.Sub(fi.ModTime())
			why := ""
			if age > o.Grace {
				if data, err := d.folder.ReadFile(RequestPath(d.me, agent, id, ExtAck), bcrypto.KindAck.MaxSize()); err == nil {
					msg, _ := d.folder.ReadFile(dir+"/"+e.Name, bcrypto.KindMessage.MaxSize())
					if a, err := OpenAck(data, id, d.me, agent, keys.sign(now)); err == nil && a.ResultSHA256 == SHA256Hex(msg) {
						why = "acked"
					}
				}
			}
			if why == "" && age > o.Retention {
				why = "retention"
			}
			if why == "" {
				continue
			}
			rep.Items = append(rep.Items, GCItem{Agent: agent, ID: id, What: "message", Why: why})
			if !o.DryRun {
				d.folder.Remove(dir + "/" + e.Name)
			}
		}
	}
}

// inboxStamp names the home file that records the policy a daemon last
// served, to notice a change across restarts.
func (d *Daemon) policyChanged() bool {
	p := d.home.Path("inbox", "policy.sha256")
	old, _ := os.ReadFile(p)
	os.MkdirAll(filepath.Dir(p), 0o700)
	writeFileAtomic(p, []byte(d.policy.SHA256))
	return len(old) > 0 && string(old) != d.policy.SHA256
}
