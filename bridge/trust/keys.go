package trust

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// Keys over their whole life (SPEC §11): a party rotates by publishing a
// statement signed by its old and its new key; peers follow the chain from
// the key they trust, never backwards, and accept the old key until the
// overlap ends. Revocation is local and out of band.

// DefaultOverlap is how long a rotated-out key stays valid by default.
const DefaultOverlap = 7 * 24 * time.Hour

// PeerKey is one key generation of a trusted peer.
type PeerKey struct {
	Seq        uint64 `json:"seq"`
	SignPub    []byte `json:"sign_pub"`
	BoxPub     []byte `json:"box_pub"`
	ValidUntil int64  `json:"valid_until,omitempty"` // 0: current; else accepted until this unix time
}

// SignKid and BoxKid name the key generation's keys.
func (k PeerKey) SignKid() string { return bcrypto.Kid(bcrypto.AlgEd25519, k.SignPub) }
func (k PeerKey) BoxKid() string  { return bcrypto.Kid(bcrypto.AlgX25519, k.BoxPub) }

// KeyState is a key's standing at a given time.
type KeyState int

// Key standings.
const (
	KeyValid   KeyState = iota // current, or within its overlap
	KeyExpired                 // rotated out and past its overlap
	KeyRevoked                 // revoked here
)

// State reports a key generation's standing for p at now.
func (p *Peer) State(k PeerKey, now time.Time) KeyState {
	switch {
	case slices.Contains(p.Revoked, k.SignKid()) || slices.Contains(p.Revoked, k.BoxKid()):
		return KeyRevoked
	case k.ValidUntil != 0 && !now.Before(time.Unix(k.ValidUntil, 0)):
		return KeyExpired
	}
	return KeyValid
}

// Current is the newest key generation, unless it is revoked.
func (p *Peer) Current() (PeerKey, bool) {
	if len(p.Keys) == 0 {
		return PeerKey{}, false
	}
	k := p.Keys[len(p.Keys)-1]
	return k, p.State(k, time.Now()) != KeyRevoked
}

// keysIn returns the peer's keys whose standing at now is st.
func (p *Peer) KeysIn(st KeyState, now time.Time) []PeerKey {
	var out []PeerKey
	for _, k := range p.Keys {
		if p.State(k, now) == st {
			out = append(out, k)
		}
	}
	return out
}

// ownKeysDir holds retired private keys, kept while something may still need
// them: requests sealed to an old box key, results for requests sent under it.
const OwnKeysDir = "keys"

// retiredKey is the metadata beside a retired private key.
type RetiredKey struct {
	V         int    `json:"v"`
	Seq       uint64 `json:"seq"`
	SignKid   string `json:"sign_kid"`
	BoxKid    string `json:"box_kid"`
	Retired   int64  `json:"retired"`
	ValidTill int64  `json:"valid_until"` // end of the overlap peers were told
	KeepUntil int64  `json:"keep_until"`  // destroyed after this
}

// OwnKey is one of this party's key generations.
type OwnKey struct {
	Seq        uint64
	Identity   *bcrypto.Identity
	ValidUntil int64 // 0: current
	KeepUntil  int64 // 0: current
}

// OwnKeys returns the current identity and the retired ones still kept,
// newest first. Retired keys past their keep time are destroyed here.
func (h *Home) OwnKeys() ([]OwnKey, error) {
	keys := []OwnKey{{Seq: h.bundle.Seq, Identity: h.id}}
	metas, _ := filepath.Glob(h.Path(OwnKeysDir, "*.json"))
	now := time.Now().Unix()
	for _, m := range metas {
		data, err := os.ReadFile(m)
		if err != nil {
			return nil, err
		}
		var r RetiredKey
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("read %s: %w", m, err)
		}
		secret := strings.TrimSuffix(m, ".json") + ".secret"
		if now > r.KeepUntil {
			// Nothing can need it any more: destroy it.
			os.Remove(secret)
			os.Remove(m)
			continue
		}
		text, err := os.ReadFile(secret)
		if err != nil {
			return nil, fmt.Errorf("read retired key: %w", err)
		}
		id, err := bcrypto.ParseIdentity(text)
		if err != nil {
			return nil, fmt.Errorf("read retired key %s: %w", secret, err)
		}
		keys = append(keys, OwnKey{Seq: r.Seq, Identity: id, ValidUntil: r.ValidTill, KeepUntil: r.KeepUntil})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Seq > keys[j].Seq })
	return keys, nil
}

// Rotation is what Rotate did.
type RotationInfo struct {
	Seq           uint64 `json:"seq"`
	OldSignKid    string `json:"old_sign_kid"`
	NewSignKid    string `json:"new_sign_kid"`
	Fingerprint   string `json:"fingerprint"`
	OldValidUntil int64  `json:"old_valid_until"`
	Published     int    `json:"published"` // trees the statement was published in
}

// Rotate replaces this party's keys: a new identity, a rotation statement
// signed by the old and the new key, the old key kept (for decrypting what
// was sealed to it) and still valid for peers until the overlap ends. The
// statement and the new bundle are published in this side's own tree(s);
// peers pick them up by themselves.
func (h *Home) Rotate(overlap time.Duration) (*RotationInfo, error) {
	if overlap < 0 {
		return nil, errors.New("rotate: negative overlap")
	}
	next, err := bcrypto.GenerateIdentity(nil)
	if err != nil {
		return nil, err
	}
	old, oldBundle := h.id, h.bundle
	now := time.Now()
	validUntil := now.Add(overlap)
	seq := oldBundle.Seq + 1
	statement, err := bcrypto.SignRotation(old, next, bcrypto.Rotation{Role: h.Config.Role, ID: h.Config.ID, Seq: seq,
		Created: now.Unix(), OldValidUntil: validUntil.Unix()})
	if err != nil {
		return nil, err
	}
	signed, err := next.SignBundle(bcrypto.Bundle{Role: h.Config.Role, Name: h.Config.Name, ID: h.Config.ID, Seq: seq, Created: now.Unix()})
	if err != nil {
		return nil, err
	}
	// Order for crashes: keep the old key first, then the statement, then
	// switch to the new key. Each step is an atomic file write.
	if err := os.MkdirAll(h.Path(OwnKeysDir), 0o700); err != nil {
		return nil, err
	}
	oldText, _ := old.MarshalText()
	name := strconv.FormatUint(oldBundle.Seq, 10)
	if err := syncsafe.WriteFileAtomic(h.Path(OwnKeysDir, name+".secret"), oldText); err != nil {
		return nil, err
	}
	meta, _ := json.Marshal(RetiredKey{V: 1, Seq: oldBundle.Seq, SignKid: old.SignKid(), BoxKid: old.BoxKid(), Retired: now.Unix(),
		ValidTill: validUntil.Unix(), KeepUntil: validUntil.Add(bridge.MaxValidity + bridge.DefaultSkew).Unix()})
	if err := syncsafe.WriteFileAtomic(h.Path(OwnKeysDir, name+".json"), meta); err != nil {
		return nil, err
	}
	if err := syncsafe.WriteFileAtomic(h.Path(OwnKeysDir, bridge.RotationName(seq)), statement); err != nil {
		return nil, err
	}
	nextText, _ := next.MarshalText()
	if err := syncsafe.WriteFileAtomic(h.Path(IdentityName), nextText); err != nil {
		return nil, err
	}
	if err := syncsafe.WriteFileAtomic(h.Path(BundleName), signed); err != nil {
		return nil, err
	}
	h.id = next
	if h.bundle, err = bcrypto.ParseBundle(signed); err != nil {
		return nil, err
	}
	n, err := h.publishKeys()
	info := &RotationInfo{Seq: seq, OldSignKid: old.SignKid(), NewSignKid: next.SignKid(), Fingerprint: h.bundle.Fingerprint(),
		OldValidUntil: validUntil.Unix(), Published: n}
	return info, err
}

// publishKeys publishes this party's bundle and every rotation statement it
// made into its own tree(s): the host's tree, or the agent's request
// directory of each trusted host. It is idempotent.
func (h *Home) publishKeys() (int, error) {
	f, err := h.OpenFolder()
	if err != nil {
		return 0, err
	}
	defer f.Close()
	signed, err := os.ReadFile(h.Path(BundleName))
	if err != nil {
		return 0, err
	}
	statements, _ := filepath.Glob(h.Path(OwnKeysDir, "rotate-*.rotation"))
	var dirs []string
	var bundlePath func(dir string) string
	if h.Config.Role == "host" {
		dirs = []string{bridge.HostDir(h.Config.ID)}
		bundlePath = func(string) string { return bridge.HostBundlePath(h.Config.ID) }
	} else {
		peers, err := h.Peers()
		if err != nil {
			return 0, err
		}
		for _, p := range peers {
			if p.Role == "host" {
				dirs = append(dirs, bridge.ToHostDir(p.ID, h.Config.ID))
			}
		}
		bundlePath = func(dir string) string { return dir + "/" + bridge.AgentBundleName }
	}
	var errs []error
	for _, dir := range dirs {
		for _, s := range statements {
			data, err := os.ReadFile(s)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if err := f.Publish(dir+"/"+filepath.Base(s), bridge.WriteBytes(data), syncsafe.WithMode(0o644)); err != nil && !errors.Is(err, syncsafe.ErrExists) {
				errs = append(errs, err)
			}
		}
		errs = append(errs, f.PublishReplace(bundlePath(dir), bridge.WriteBytes(signed), syncsafe.WithMode(0o644)))
	}
	return len(dirs), errors.Join(errs...)
}

// RotationEvent reports one rotation statement a peer published.
type RotationEvent struct {
	Peer   string
	Seq    uint64
	Result string // "accepted", or why it was refused or ignored
}

// FollowRotations reads the rotation statements a peer published in dir
// (relative to the folder) and applies, in order, each that continues the
// chain from the key this home trusts: signed by the current key (not
// revoked) and the new one, with a higher sequence. Older or replayed
// statements are ignored; anything else is refused. Only the home is
// written, never the folder.
func (h *Home) FollowRotations(f *syncsafe.Folder, peerID, dir string) ([]RotationEvent, error) {
	entries, err := f.ListFunc(dir, func(name string) bool { _, ok := bridge.ParseRotationName(name); return ok })
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	type stmt struct {
		seq  uint64
		name string
	}
	var stmts []stmt
	for _, e := range entries {
		if seq, ok := bridge.ParseRotationName(e.Name); ok && e.Type == 0 {
			stmts = append(stmts, stmt{seq, e.Name})
		}
	}
	sort.Slice(stmts, func(i, j int) bool { return stmts[i].seq < stmts[j].seq })
	var events []RotationEvent
	for _, s := range stmts {
		p, err := h.PeerRecord(peerID)
		if err != nil {
			return events, err
		}
		cur := p.Keys[len(p.Keys)-1]
		if s.seq <= cur.Seq {
			continue // followed already, or an old statement replayed
		}
		ev := RotationEvent{Peer: p.Name, Seq: s.seq}
		data, err := f.ReadFile(dir+"/"+s.name, bcrypto.KindRotation.MaxSize())
		if err != nil {
			ev.Result = "unreadable: " + err.Error()
			events = append(events, ev)
			continue
		}
		r, err := bcrypto.ParseRotation(data, cur.SignPub)
		switch {
		case err != nil:
			ev.Result = "refused: " + string(bridge.Reason(err))
		case p.State(cur, time.Now()) == KeyRevoked:
			ev.Result = "refused: signed by a revoked key"
		case r.ID != p.ID || r.Role != p.Role || r.Seq != s.seq:
			ev.Result = "refused: " + string(bridge.Reason(bridge.ErrNameMismatch))
		case h.keptRevoked(r.NewSignPub, r.NewBoxPub):
			ev.Result = "refused: its new key was revoked here with a removed peer"
		default:
			p.Keys[len(p.Keys)-1].ValidUntil = r.OldValidUntil
			p.Keys = append(p.Keys, PeerKey{Seq: r.Seq, SignPub: r.NewSignPub, BoxPub: r.NewBoxPub})
			if err := h.savePeer(p); err != nil {
				return events, err
			}
			ev.Result = "accepted"
		}
		events = append(events, ev)
	}
	return events, nil
}

// peerRecord reads and checks a peer's record by id, whatever the state of
// its keys.
func (h *Home) PeerRecord(id string) (*Peer, error) {
	peers, err := h.Peers()
	if err != nil {
		return nil, err
	}
	for _, p := range peers {
		if p.ID == id {
			if err := p.Check(); err != nil {
				return nil, err
			}
			return &p, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownPeer, id)
}

// Revoke marks a key id (signing or box) of a trusted peer as revoked: from
// now on nothing signed by it is accepted, and no rotation it signs.
func (h *Home) Revoke(kid string) (*Peer, error) {
	if !bcrypto.ValidKid(kid) {
		return nil, bridge.WithHint(fmt.Errorf("revoke: %q is not a key id", kid), "`bridge keys show` lists the key ids of every peer")
	}
	peers, err := h.Peers()
	if err != nil {
		return nil, err
	}
	for _, p := range peers {
		for _, k := range p.Keys {
			if k.SignKid() == kid || k.BoxKid() == kid {
				if !slices.Contains(p.Revoked, k.SignKid()) {
					p.Revoked = append(p.Revoked, k.SignKid())
				}
				if !slices.Contains(p.Revoked, k.BoxKid()) {
					p.Revoked = append(p.Revoked, k.BoxKid())
				}
				return &p, h.savePeer(&p)
			}
		}
	}
	return nil, bridge.WithHint(fmt.Errorf("revoke: no trusted peer has key %s", kid), "`bridge keys show` lists the key ids of every peer")
}

// Candidate is a peer bundle found in the folder, for `bridge pair`.
type Candidate struct {
	Role        string `json:"role"`
	Name        string `json:"name"`
	ID          string `json:"id"`
	Seq         uint64 `json:"seq"`
	Fingerprint string `json:"fingerprint"`
	Trusted     bool   `json:"trusted"`
	Revoked     bool   `json:"revoked"` // trusted, with every key revoked: pairing it again needs its new keys
	Bundle      string `json:"bundle"`
}

// Candidates lists the peer bundles published in the folder that this home
// could pair with: an agent sees the hosts, a host the agents that wrote
// into its tree.
func (h *Home) Candidates() ([]Candidate, error) {
	f, err := h.OpenFolder()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var paths []string
	if h.Config.Role == "agent" {
		hosts, err := f.List(bridge.HostsRoot)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range hosts {
			if bcrypto.ValidKid(e.Name) && e.Type.IsDir() {
				paths = append(paths, bridge.HostBundlePath(e.Name))
			}
		}
	} else {
		agents, err := f.List(bridge.ToHostRoot(h.Config.ID))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range agents {
			if bcrypto.ValidKid(e.Name) && e.Type.IsDir() {
				paths = append(paths, bridge.AgentBundlePath(h.Config.ID, e.Name))
			}
		}
	}
	peers, _ := h.Peers()
	var out []Candidate
	for _, p := range paths {
		data, err := f.ReadFile(p, bcrypto.KindBundle.MaxSize())
		if err != nil {
			continue
		}
		b, err := bcrypto.ParseBundle(data)
		if err != nil || b.Role == h.Config.Role || !strings.Contains(p, b.ID) {
			continue
		}
		c := Candidate{Role: b.Role, Name: b.Name, ID: b.ID, Seq: b.Seq, Fingerprint: b.Fingerprint(), Bundle: bcrypto.BundleText(data)}
		for _, pr := range peers {
			if pr.ID == b.ID {
				_, ok := pr.Current()
				c.Trusted, c.Revoked = true, !ok
			}
		}
		out = append(out, c)
	}
	return out, nil
}
