package bridge

import (
	"bytes"
	"fmt"
	"io"
	"time"

	bcrypto "github.com/syncbridge/bridge/crypto"
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
	V       int       `json:"v"`
	Kind    string    `json:"kind"`    // NoteText (from `bridge send`) or NoteNotice (from the daemon)
	Event   NoteEvent `json:"event"`   // a notice's: one of NoteEvents
	Request string    `json:"request"` // the request a notice is about, if any
	Text    string    `json:"text"`
	// Supersedes, for rerun-ordered: the SHA-256 of the result manifest
	// (an uncertain one) that the rerun's answer will replace; for
	// rerun-lost: of that same manifest, which stands after all.
	Supersedes string `json:"supersedes,omitempty"`
}

// The kinds of note (SPEC §10b).
const (
	NoteText   = "text"   // a human's, from `bridge send`
	NoteNotice = "notice" // the host daemon's own, with an Event
)

// NoteEvent is what a notice says happened (SPEC §10b), typed so that the
// host that posts one and the agent that reads it use the same words.
type NoteEvent string

// The notices the host daemon posts by itself.
const (
	EventStarted         NoteEvent = "started"          // the daemon serves
	EventStopping        NoteEvent = "stopping"         // the daemon stopped; requests wait
	EventPolicyChanged   NoteEvent = "policy-changed"   // the catalog changed
	EventKeyRotated      NoteEvent = "key-rotated"      // the host rotated its keys
	EventApprovalPending NoteEvent = "approval-pending" // a request waits for a human (with request)
	EventApproved        NoteEvent = "approved"         // a human approved it (with request)
	EventRerunOrdered    NoteEvent = "rerun-ordered"    // a human ordered a rerun (with request, supersedes)
	EventRerunLost       NoteEvent = "rerun-lost"       // the rerun's answer was lost; the uncertain one stands
)

// NoteEvents are the notices of SPEC §10b, in its order.
var NoteEvents = []NoteEvent{EventStarted, EventStopping, EventPolicyChanged, EventKeyRotated,
	EventApprovalPending, EventApproved, EventRerunOrdered, EventRerunLost}

// MaxMessageText caps a message's text.
const MaxMessageText = 32 << 10

// NewMessage describes a message a host is about to publish.
type NewMessage struct {
	Host        *bcrypto.Identity
	HostID      string
	Agent       string
	AgentBoxPub []byte
	Seq         uint64
	Note        Note
	Created     time.Time
}

// SealMessage seals a note to the agent and returns the signed message file
// and its body; the message id is fresh.
func SealMessage(n NewMessage) ([]byte, *Message, error) {
	if len(n.Note.Text) > MaxMessageText {
		return nil, nil, fmt.Errorf("message: %w: %d bytes of text, cap %d", ErrTooLarge, len(n.Note.Text), MaxMessageText)
	}
	n.Note.V = 1
	var ct bytes.Buffer
	s, wrapped, err := bcrypto.NewSealer(&ct, n.AgentBoxPub, nil)
	if err != nil {
		return nil, nil, err
	}
	body, err := bcrypto.EncodeBody(n.Note)
	if err != nil {
		return nil, nil, err
	}
	s.Write(body)
	if err := s.Close(); err != nil {
		return nil, nil, err
	}
	m := &Message{V: 1, ID: NewRequestID(), Host: n.HostID, HostKid: n.Host.SignKid(), Agent: n.Agent,
		AgentBoxKid: bcrypto.Kid(bcrypto.AlgX25519, n.AgentBoxPub), Seq: n.Seq, Created: n.Created.Unix(), Key: wrapped, Data: ct.Bytes()}
	enc, err := bcrypto.EncodeBody(m)
	if err != nil {
		return nil, nil, err
	}
	signed, err := bcrypto.Sign(bcrypto.KindMessage, enc, n.Host)
	return signed, m, err
}

// OpenMessage verifies a message file found as <stem>.message from host to
// agent under any of hostKeys; it does not decrypt (see OpenNote).
func OpenMessage(data []byte, stem, host, agent string, hostKeys [][]byte) (*Message, error) {
	var m Message
	if err := OpenBody(bcrypto.KindMessage, data, hostKeys, &m); err != nil {
		return nil, err
	}
	if m.V != 1 || m.ID != stem || m.Host != host || m.Agent != agent {
		return nil, ErrWrongRecipient
	}
	return &m, nil
}

// OpenNote decrypts a verified message with the agent's key.
func OpenNote(m *Message, me *bcrypto.Identity) (*Note, error) {
	if me.BoxKid() != m.AgentBoxKid {
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
	// The fields a host fills by rule hold what the rule writes; a
	// human's text may span lines, each made safe (no escape sequence or
	// bidi override reaches the agent's terminal or model), its spacing
	// kept.
	switch {
	case n.Kind != NoteText && n.Kind != NoteNotice,
		n.Event != "" && !bcrypto.ValidName(string(n.Event)),
		n.Request != "" && !ValidID(n.Request),
		n.Supersedes != "" && !validSHA256Hex(n.Supersedes):
		return nil, fmt.Errorf("host message: %w: a kind, event, request or superseded hash no host writes", bcrypto.ErrMalformed)
	}
	n.Text = hostLines(n.Text)
	return &n, nil
}
