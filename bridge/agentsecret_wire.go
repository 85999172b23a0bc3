package bridge

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// The agent secret (SPEC §2.8, KEYS.md "Ephemeral sandboxes"): everything an
// agent needs that the folder cannot give back, in one line a sandbox takes
// from an environment variable or a mounted file. The rest of a home is
// rebuilt from the folder: the agent's bundle from its own tree, each host's
// bundle and rotations from the host's tree, checked against the host keys
// pinned in the secret; what the agent sent from its own signed manifests.
const (
	agentSecretPrefix = "bridge-agent-v1:"
	maxSecretHosts    = 16
)

// AgentSecret is the parsed form of an agent secret.
type AgentSecret struct {
	ID          string // the agent's party id
	Seq         uint64 // the key generation of Identity
	Name        string // the name the agent gives itself
	Identity    *bcrypto.Identity
	Idempotency []byte // the idempotency secret (§2.7)
	Hosts       []SecretHost
}

// SecretHost is a trusted host as the secret pins it: its id, the local name
// the agent gave it, and its key generation current when the secret was made.
type SecretHost struct {
	ID      string
	Name    string
	Seq     uint64
	SignPub []byte
	BoxPub  []byte
}

// MarshalText is the one text form of the secret, without a line break.
func (s *AgentSecret) MarshalText() (string, error) {
	if len(s.Hosts) > maxSecretHosts {
		return "", fmt.Errorf("agent secret: %d trusted hosts, at most %d fit", len(s.Hosts), maxSecretHosts)
	}
	hosts := append([]SecretHost(nil), s.Hosts...)
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].ID < hosts[j].ID })
	var b bytes.Buffer
	id, _ := hex.DecodeString(s.ID)
	b.Write(id)
	b.Write(binary.BigEndian.AppendUint64(nil, s.Seq))
	b.Write(identityRaw(s.Identity))
	b.Write(s.Idempotency)
	b.WriteByte(byte(len(s.Name)))
	b.WriteString(s.Name)
	b.WriteByte(byte(len(hosts)))
	for _, hst := range hosts {
		hid, _ := hex.DecodeString(hst.ID)
		b.Write(hid)
		b.WriteByte(byte(len(hst.Name)))
		b.WriteString(hst.Name)
		b.Write(binary.BigEndian.AppendUint64(nil, hst.Seq))
		b.Write(hst.SignPub)
		b.Write(hst.BoxPub)
	}
	return agentSecretPrefix + base64.RawURLEncoding.EncodeToString(b.Bytes()), nil
}

// identityRaw is the 64 private bytes of an identity (SPEC §2.5).
func identityRaw(id *bcrypto.Identity) []byte {
	text, _ := id.MarshalText()
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimSuffix(strings.TrimPrefix(string(text), "bridge-secret-v1:"), "\n"))
	if err != nil || len(raw) != 64 {
		panic("bridge: internal error: identity text form")
	}
	return raw
}

// ParseAgentSecret reads the text form strictly: white space around it is
// ignored (a variable or a file may end in a line break), anything else that
// differs from the one encoding is refused.
func ParseAgentSecret(text string) (*AgentSecret, error) {
	bad := func(why string) error { return fmt.Errorf("parse agent secret: %w: %s", bcrypto.ErrMalformed, why) }
	text = strings.TrimSpace(text)
	enc, ok := strings.CutPrefix(text, agentSecretPrefix)
	if !ok {
		return nil, bad("not a bridge-agent-v1 line")
	}
	if strings.ContainsAny(enc, "\r\n") {
		return nil, bad("line break inside the secret")
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(enc)
	if err != nil {
		return nil, bad("bad encoding")
	}
	r := bytes.NewReader(raw)
	take := func(n int) []byte {
		p := make([]byte, n)
		if m, _ := r.Read(p); m != n {
			return nil
		}
		return p
	}
	name := func() (string, bool) {
		n, err := r.ReadByte()
		if err != nil {
			return "", false
		}
		p := take(int(n))
		return string(p), p != nil && syncsafe.ValidName(string(p))
	}
	s := &AgentSecret{}
	id, seq, keys, idem := take(16), take(8), take(64), take(32)
	if idem == nil {
		return nil, bad("too short")
	}
	s.ID, s.Seq, s.Idempotency = hex.EncodeToString(id), binary.BigEndian.Uint64(seq), idem
	if s.Identity, err = bcrypto.ParseIdentity([]byte("bridge-secret-v1:" + base64.RawURLEncoding.EncodeToString(keys) + "\n")); err != nil {
		return nil, bad("bad keys")
	}
	if s.Seq == 0 && s.Identity.SignKid() != s.ID {
		return nil, bad("the id is not that of the first key")
	}
	if s.Name, ok = name(); !ok {
		return nil, bad("bad name")
	}
	n, err := r.ReadByte()
	if err != nil || n > maxSecretHosts {
		return nil, bad("bad host count")
	}
	for i := 0; i < int(n); i++ {
		var hst SecretHost
		hid := take(16)
		if hid == nil {
			return nil, bad("too short")
		}
		hst.ID = hex.EncodeToString(hid)
		if hst.Name, ok = name(); !ok || looksLikeID(hst.Name) {
			return nil, bad("bad host name")
		}
		hseq, sign, box := take(8), take(32), take(32)
		if box == nil {
			return nil, bad("too short")
		}
		hst.Seq, hst.SignPub, hst.BoxPub = binary.BigEndian.Uint64(hseq), sign, box
		if bcrypto.CheckSignKey(sign) != nil || bcrypto.CheckBoxKey(box) != nil || (hst.Seq == 0 && bcrypto.Kid(bcrypto.AlgEd25519, sign) != hst.ID) {
			return nil, bad("bad host key")
		}
		if i > 0 && hst.ID <= s.Hosts[i-1].ID {
			return nil, bad("hosts out of order")
		}
		s.Hosts = append(s.Hosts, hst)
	}
	if r.Len() != 0 {
		return nil, bad("trailing bytes")
	}
	return s, nil
}
