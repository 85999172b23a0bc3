package bridge

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

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

// ExportAgentSecret returns the agent secret of an agent home: its current
// keys, its idempotency secret, and the current key of every host it trusts
// that it has not revoked.
func (h *Home) ExportAgentSecret() (string, error) {
	if h.Config.Role != "agent" {
		return "", WithHint(errors.New("export-secret: this home belongs to a host"), "a host's keys never leave its home; run it with an agent's --home")
	}
	idem, err := h.idempotencySecret()
	if err != nil {
		return "", err
	}
	s := AgentSecret{ID: h.Config.ID, Seq: h.bundle.Seq, Name: h.bundle.Name, Identity: h.id, Idempotency: idem}
	peers, err := h.Peers()
	if err != nil {
		return "", err
	}
	for _, p := range peers {
		if p.Role != "host" {
			continue
		}
		if p.bad != nil {
			return "", p.bad
		}
		k, ok := p.Current()
		if !ok {
			continue // every key revoked: the restored home does not trust it either
		}
		s.Hosts = append(s.Hosts, SecretHost{ID: p.ID, Name: p.Name, Seq: k.Seq, SignPub: k.SignPub, BoxPub: k.BoxPub})
	}
	return s.MarshalText()
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

// RestoreAgentHome builds an agent home in dir from an agent secret and the
// folder: the same party, trusting the same hosts, with no pairing. Each
// host's trust is rebuilt from the host's bundle and rotation statements in
// the folder, accepted only if they continue the chain from the key the
// secret pins. What the agent sent is found again in the folder when asked
// for (agent.Client reads its own signed manifests).
func RestoreAgentHome(dir, folder, secret string) (*Home, error) {
	s, err := ParseAgentSecret(secret)
	if err != nil {
		return nil, WithHint(err, "pass the whole line `bridge keys export-secret` printed")
	}
	absDir, absFolder, err := newHomePaths("restore", dir, folder)
	if err != nil {
		return nil, err
	}
	f, err := syncsafe.OpenFolder(absFolder)
	if err != nil {
		return nil, WithHint(err, "is the synced folder %s mounted and shared?", absFolder)
	}
	defer f.Close()
	if err := syncsafe.CheckMarker(f); err != nil {
		return nil, WithHint(fmt.Errorf("restore agent: %w", err), "wait until the sync client has copied the folder (%s)", syncsafe.MarkerName)
	}
	// Trust first, in memory: nothing is written unless every host checks.
	var peers []*Peer
	for _, hs := range s.Hosts {
		p, err := restoreHost(f, hs)
		if err != nil {
			return nil, err
		}
		peers = append(peers, p)
	}
	if err := os.MkdirAll(absDir, 0o700); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if err := checkOwnHome("restore", absDir); err != nil {
		return nil, err
	}
	os.Chmod(absDir, 0o700)
	h := &Home{Dir: absDir, id: s.Identity, peers: &peerCache{}}
	signed := ownBundleInFolder(f, s)
	if signed == nil {
		// Not in the folder (no host trusted yet, or not synced): the same
		// keys, signed again. Only its created time differs.
		if signed, err = s.Identity.SignBundle(bcrypto.Bundle{Role: "agent", Name: s.Name, ID: s.ID, Seq: s.Seq, Created: time.Now().Unix()}); err != nil {
			return nil, err
		}
	}
	if h.bundle, err = bcrypto.ParseBundle(signed); err != nil {
		return nil, err
	}
	h.Config = Config{V: 1, Role: "agent", Name: s.Name, ID: s.ID, Folder: absFolder, Created: h.bundle.Created}
	text, _ := s.Identity.MarshalText()
	writes := []struct {
		name string
		data []byte
	}{{IdentityName, text}, {IdempotencySecretName, marshalIdempotencySecret(s.Idempotency)}, {BundleName, signed}}
	for _, w := range writes {
		if err := syncsafe.WriteFileAtomic(filepath.Join(absDir, w.name), w.data); err != nil {
			return nil, err
		}
	}
	for _, p := range peers {
		if err := h.savePeer(p); err != nil {
			return nil, err
		}
	}
	cfg, _ := json.MarshalIndent(h.Config, "", "  ")
	if err := syncsafe.WriteFileAtomic(filepath.Join(absDir, configName), append(cfg, '\n')); err != nil {
		return nil, err
	}
	for _, p := range peers {
		if err := h.trustDirs(p.ID); err != nil {
			return h, err
		}
	}
	return h, nil
}

// restoreHost rebuilds the trust record of one pinned host from its tree:
// the rotation statements from the pinned key on, then its bundle, which
// must be one of the generations of that chain.
func restoreHost(f *syncsafe.Folder, hs SecretHost) (*Peer, error) {
	p := &Peer{V: 1, Name: hs.Name, Role: "host", ID: hs.ID, Trusted: time.Now().Unix(),
		Keys: []PeerKey{{Seq: hs.Seq, SignPub: hs.SignPub, BoxPub: hs.BoxPub}}}
	entries, err := f.ListFunc(HostDir(hs.ID), func(name string) bool { _, ok := ParseRotationName(name); return ok })
	if errors.Is(err, fs.ErrNotExist) {
		return nil, WithHint(fmt.Errorf("restore: host %s (%s) is not in the folder", hs.Name, hs.ID), "wait until the sync client has copied the folder, or check it is the right folder")
	} else if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range entries {
		if seq, ok := ParseRotationName(e.Name); ok && e.Type == 0 && seq > hs.Seq {
			seqs = append(seqs, seq)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, seq := range seqs {
		cur := p.Keys[len(p.Keys)-1]
		data, err := f.ReadFile(HostDir(hs.ID)+"/"+RotationName(seq), bcrypto.KindRotation.MaxSize())
		if err != nil {
			break
		}
		r, err := bcrypto.ParseRotation(data, cur.SignPub)
		if err != nil || r.ID != hs.ID || r.Role != "host" || r.Seq != seq || seq <= cur.Seq {
			continue // not a continuation of the chain: ignored, as FollowRotations does
		}
		p.Keys[len(p.Keys)-1].ValidUntil = r.OldValidUntil
		p.Keys = append(p.Keys, PeerKey{Seq: r.Seq, SignPub: r.NewSignPub, BoxPub: r.NewBoxPub})
	}
	data, err := f.ReadFile(HostBundlePath(hs.ID), bcrypto.KindBundle.MaxSize())
	if err != nil {
		return nil, WithHint(fmt.Errorf("restore: read the bundle of host %s: %w", hs.Name, err), "wait until the sync client has copied the folder")
	}
	b, err := bcrypto.ParseBundle(data)
	if err != nil {
		return nil, fmt.Errorf("restore: the bundle of host %s: %w", hs.Name, err)
	}
	p.Bundle = bcrypto.BundleText(data)
	if err := p.Check(); err != nil || b.Role != "host" {
		return nil, WithHint(fmt.Errorf("restore: the bundle of host %s in the folder is not one of the keys the secret pins (fingerprint %s)", hs.Name, b.Fingerprint()),
			"someone may have replaced it, or the host rotated and its statements have not synced yet; compare the fingerprint with `bridge keys export` on the host")
	}
	return p, nil
}

// ownBundleInFolder finds the agent's own bundle, as it published it for a
// host, if it carries exactly the secret's keys.
func ownBundleInFolder(f *syncsafe.Folder, s *AgentSecret) []byte {
	for _, hs := range s.Hosts {
		data, err := f.ReadFile(AgentBundlePath(hs.ID, s.ID), bcrypto.KindBundle.MaxSize())
		if err != nil {
			continue
		}
		b, err := bcrypto.ParseBundle(data)
		if err == nil && b.Role == "agent" && b.ID == s.ID && b.Seq == s.Seq &&
			bytes.Equal(b.SignPub, s.Identity.SignPublic()) && bytes.Equal(b.BoxPub, s.Identity.BoxPublic()) {
			return data
		}
	}
	return nil
}
