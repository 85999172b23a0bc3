package agent

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// InboxItem is one verified message as the agent reads it.
type InboxItem struct {
	ID       string      `json:"id"`
	Host     string      `json:"host"`
	HostName string      `json:"host_name"`
	Seq      uint64      `json:"seq"`
	Created  time.Time   `json:"created"`
	Note     bridge.Note `json:"note"`
	New      bool        `json:"new"`
	// Answered: a notice about a request whose answer is in already
	// (approval-pending, approved): old news, never shown as new.
	Answered bool `json:"answered,omitempty"`
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
		dir := bridge.ToAgentDir(p.ID, c.home.Config.ID)
		entries, err := c.folder.List(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		var hostKeys [][]byte
		for _, k := range p.KeysIn(trust.KeyValid, time.Now()) {
			hostKeys = append(hostKeys, k.SignPub)
		}
		for _, e := range entries {
			id, ext, ok := bridge.ParseToAgentName(e.Name)
			if !ok || ext != bridge.ExtMessage || e.Type != 0 {
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
			if it.Note.Kind == bridge.NoteNotice && it.Note.Request != "" && (it.Note.Event == bridge.EventApprovalPending || it.Note.Event == bridge.EventApproved) && c.answered(p.ID, it.Note.Request) {
				it.New, it.Answered = false, true
			}
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

func (c *Client) openMessage(data []byte, stem string, p trust.Peer, hostKeys [][]byte, own []trust.OwnKey) (*InboxItem, error) {
	m, err := bridge.OpenMessage(data, stem, p.ID, c.home.Config.ID, hostKeys)
	if err != nil {
		return nil, err
	}
	for _, k := range own {
		if k.Identity.BoxKid() == m.AgentBoxKid {
			n, err := bridge.OpenNote(m, k.Identity)
			if err != nil {
				return nil, err
			}
			return &InboxItem{ID: m.ID, Host: p.ID, HostName: p.Name, Seq: m.Seq, Created: time.Unix(m.Created, 0), Note: *n, sha: bridge.SHA256Hex(data)}, nil
		}
	}
	return nil, bcrypto.ErrUnknownKey
}

// MarkSeen records items as seen in the agent's home and, with ack, acks
// them in the agent's own tree so the host can collect them.
func (c *Client) MarkSeen(items []InboxItem, ack bool) error {
	st := c.inboxState()
	var failed []error
	for _, it := range items {
		if !slices.Contains(st.Seen, it.ID) {
			st.Seen = append(st.Seen, it.ID)
		}
		if ack {
			// With its fsyncs (a message's ack is rare, and off any
			// wait); one there that does not open or names another
			// message is replaced, as a result's is.
			// One that fails (a directory at its name) stops neither
			// the others nor the record of what was seen.
			if err := c.placeAck(it.Host, it.ID, it.sha); err != nil {
				failed = append(failed, err)
			}
		}
	}
	if n := len(st.Seen); n > maxInboxSeen {
		st.Seen = st.Seen[n-maxInboxSeen:]
	}
	data, _ := json.Marshal(st)
	return errors.Join(syncsafe.WriteFileAtomic(c.home.Path("inbox.json"), data), errors.Join(failed...))
}

// answered reports whether request id to host has an answer in: a result
// in the folder or kept in the home (a look at names, not a verification:
// it only decides whether a notice about it is news).
func (c *Client) answered(host, id string) bool {
	if _, err := c.folder.Lstat(bridge.ResultPath(host, c.home.Config.ID, id, bridge.ExtResult)); err == nil {
		return true
	}
	return c.keptStatus(id) != ""
}

// Approval is the host's notice that a human approved request id sent to
// host ("" if there is none): when, and as which account, made one line,
// escaped and cut as any host text (bridge.HostText). Only that host's
// notice counts: another host this agent trusts cannot speak for it.
func (c *Client) Approval(host, id string) string {
	items, err := c.Inbox()
	if err != nil {
		return ""
	}
	for _, it := range items {
		if it.Host == host && it.Note.Kind == bridge.NoteNotice && it.Note.Event == bridge.EventApproved && it.Note.Request == id {
			return bridge.HostText(it.Note.Text)
		}
	}
	return ""
}
