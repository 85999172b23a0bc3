package trust

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// A home is a party's private state directory (SPEC §5, DESIGN "state"):
//
//	config.json        role, name, id, folder
//	identity.secret    private keys, 0600
//	idempotency.secret agent: keys its keyed request ids (ids.go), 0600;
//	                   kept across rotations
//	bundle             own signed bundle
//	peers/<id>.json    trusted peers
//	policy.toml        host: the policy
//	ledger/            host: the ledger
//	spool/, staging/   private copies and temp files
//	results/           host: copies of published results, for re-publishing
//	finished           host: cache of finished requests (finished.go)
//	requests/          agent: what it sent
//	catalogs/          agent: the newest catalog seen of each host
//	audit.log          host: one JSON line per event
//
// It never lives inside the synced folder.
const (
	configName   = "config.json"
	IdentityName = "identity.secret"
	BundleName   = "bundle"
	PeersDir     = "peers"
	PolicyName   = "policy.toml"
)

// Errors about homes that callers branch on.
var (
	ErrNoHome      = errors.New("not initialised")
	ErrHomeExists  = errors.New("already initialised")
	ErrUnknownPeer = errors.New("no such trusted peer")
	// ErrEveryKeyRevoked: the peer is known, and every key of it revoked.
	ErrEveryKeyRevoked = errors.New("every key of it is revoked")
)

// Config is a home's config.json.
type Config struct {
	V       int    `json:"v"`
	Role    string `json:"role"`
	Name    string `json:"name"`
	ID      string `json:"id"`
	Folder  string `json:"folder"`
	Created int64  `json:"created"`
}

// Peer is a trusted party, recorded by `bridge keys trust` and updated by
// the rotation statements it publishes.
type Peer struct {
	V       int       `json:"v"`
	Name    string    `json:"name"` // local name; a host's policy refers to agents by it
	Role    string    `json:"role"`
	ID      string    `json:"id"`
	Bundle  string    `json:"bundle"` // text form of the bundle that was trusted
	Trusted int64     `json:"trusted"`
	Keys    []PeerKey `json:"keys"`              // key generations, oldest first; the last is current
	Revoked []string  `json:"revoked,omitempty"` // signing and box kids revoked here (`bridge keys revoke`)

	// bad is the result of check, done once per version of the file (see
	// peerCache); it is not part of the record.
	bad error
}

// Home is an opened state directory.
type Home struct {
	Dir    string
	Config Config
	id     *bcrypto.Identity
	bundle *bcrypto.Bundle
	peers  *peerCache // nil: no cache (a Home built by hand)

	// Nudger, if set, is asked to have the sync client send each file a
	// folder opened by OpenFolder publishes or removes (requests, results,
	// acks, cancels, rotation statements, progress, the catalog). Set it
	// before OpenFolder.
	Nudger Nudger
}

// Nudger asks the sync client to send the files at rels (slash-separated,
// relative to the folder) at once (syncthing.Nudger). It must return at
// once.
type Nudger interface{ Nudge(rels ...string) }

// InitHome creates a new home for role ("host" or "agent") bound to folder.
// A host also writes the folder marker and its tree; an agent requires the
// marker (it arrives from the host through the sync).
func InitHome(dir, role, name, folder string) (*Home, error) {
	if role != "host" && role != "agent" {
		return nil, fmt.Errorf("init: unknown role %q", role)
	}
	if name == "" {
		name, _ = os.Hostname()
		name = SanitizeName(name, role)
	}
	if !syncsafe.ValidName(name) {
		return nil, bridge.WithHint(fmt.Errorf("init: name %q is not a valid name", name), "use lower-case letters, digits, '.', '_' or '-', at most 64")
	}
	absDir, absFolder, err := newHomePaths("init", dir, folder)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(absFolder); err != nil || !fi.IsDir() {
		return nil, bridge.WithHint(fmt.Errorf("init: folder %s is not a directory", absFolder), "create it and share it with your sync client first")
	}
	if err := os.MkdirAll(absDir, 0o700); err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	// Again: someone may have made it between the check and MkdirAll.
	if err := checkOwnHome("init", absDir); err != nil {
		return nil, err
	}
	os.Chmod(absDir, 0o700)
	f, err := syncsafe.OpenFolder(absFolder)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if role == "host" {
		if err := syncsafe.CheckMarker(f); errors.Is(err, syncsafe.ErrNoMarker) {
			if err := syncsafe.WriteMarker(f); err != nil {
				return nil, err
			}
		} else if err != nil {
			return nil, err
		}
	} else if err := syncsafe.CheckMarker(f); err != nil {
		return nil, bridge.WithHint(fmt.Errorf("init agent: %w", err), "run `bridge init host --folder ...` on the host first and wait until the sync client has copied %s", syncsafe.MarkerName)
	}
	id, err := bcrypto.GenerateIdentity(nil)
	if err != nil {
		return nil, err
	}
	h := &Home{Dir: absDir, id: id, peers: &peerCache{}, Config: Config{V: 1, Role: role, Name: name, ID: id.SignKid(), Folder: absFolder, Created: time.Now().Unix()}}
	secret, _ := id.MarshalText()
	if err := syncsafe.WriteFileAtomic(filepath.Join(absDir, IdentityName), secret); err != nil {
		return nil, err
	}
	if role == "agent" {
		// Made now, so that a backup of a fresh home already holds it.
		if _, err := h.idempotencySecret(); err != nil {
			return nil, err
		}
	}
	signed, err := id.SignBundle(bcrypto.Bundle{Role: role, Name: name, ID: h.Config.ID, Created: h.Config.Created})
	if err != nil {
		return nil, err
	}
	if err := syncsafe.WriteFileAtomic(filepath.Join(absDir, BundleName), signed); err != nil {
		return nil, err
	}
	if h.bundle, err = bcrypto.ParseBundle(signed); err != nil {
		return nil, err
	}
	if role == "host" {
		for _, d := range []string{bridge.HostDir(h.Config.ID), bridge.ToHostRoot(h.Config.ID), bridge.ToAgentRoot(h.Config.ID)} {
			if err := f.MkdirAll(d); err != nil {
				return nil, err
			}
		}
		if err := f.PublishReplace(bridge.HostBundlePath(h.Config.ID), bridge.WriteBytes(signed), syncsafe.WithMode(0o644)); err != nil {
			return nil, err
		}
	}
	cfg, _ := json.MarshalIndent(h.Config, "", "  ")
	if err := syncsafe.WriteFileAtomic(filepath.Join(absDir, configName), append(cfg, '\n')); err != nil {
		return nil, err
	}
	return h, nil
}

func SanitizeName(s, fallback string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		}
	}
	out := strings.TrimLeft(b.String(), "._-")
	if len(out) > 64 {
		out = out[:64]
	}
	out = strings.TrimRight(out, ".")
	if !syncsafe.ValidName(out) {
		return fallback
	}
	return out
}

// insideDir reports whether p is dir or inside it, after resolving symlinks
// of the parts that exist.
func InsideDir(p, dir string) bool {
	real := func(x string) string {
		if r, err := filepath.EvalSymlinks(x); err == nil {
			return r
		}
		return filepath.Clean(x)
	}
	a, b := real(p), real(dir)
	return a == b || strings.HasPrefix(a, b+string(filepath.Separator))
}

// CheckOutside refuses a state directory inside the synced folder: keys,
// ledger and policy would then be synced, conflicted and resurrected.
func CheckOutside(home, folder string) error {
	real := func(p string) string {
		// Resolve the longest existing prefix, so a home that does not exist
		// yet is still judged by where it will be.
		rest := ""
		for {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				return filepath.Join(r, rest)
			}
			parent := filepath.Dir(p)
			if parent == p {
				return filepath.Join(p, rest)
			}
			rest = filepath.Join(filepath.Base(p), rest)
			p = parent
		}
	}
	h, f := real(home), real(folder)
	if h == f || strings.HasPrefix(h, f+string(filepath.Separator)) {
		return bridge.WithHint(fmt.Errorf("state directory %s is inside the synced folder %s", home, folder),
			"keys, ledger and policy must never be synced: use a --home outside the folder (the default is fine)")
	}
	return nil
}

// OpenHome opens an initialised home.
func OpenHome(dir string) (*Home, error) {
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// Every command, both roles: a home that another user owns, may write,
	// or can swap through a directory or link on its way is not this
	// user's keys and trust, whatever it holds (the red team of 8612227:
	// an agent home re-pointed by another user's link was used as it was).
	if why := foreignHome(absDir); why != "" {
		return nil, bridge.WithHint(fmt.Errorf("open %s: not a directory of this user's own: %s", absDir, why),
			"a home holds this user's keys: keep it in a directory only you can write (`chmod 700` it if it is yours), reached without another user's links")
	}
	data, err := os.ReadFile(filepath.Join(absDir, configName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, bridge.WithHint(fmt.Errorf("open %s: %w", absDir, ErrNoHome), "if this party has a home elsewhere, pass --home DIR or set BRIDGE_HOME; else `bridge init host --folder DIR` or `bridge init agent --folder DIR` (a new home is a new identity, to be paired)")
	} else if err != nil {
		return nil, err
	}
	h := &Home{Dir: absDir, peers: &peerCache{}}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h.Config); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(absDir, configName), err)
	}
	if h.Config.V != 1 || (h.Config.Role != "host" && h.Config.Role != "agent") {
		return nil, fmt.Errorf("read %s: unsupported config", filepath.Join(absDir, configName))
	}
	if err := CheckOutside(absDir, h.Config.Folder); err != nil {
		return nil, err
	}
	secret, err := os.ReadFile(filepath.Join(absDir, IdentityName))
	if err != nil {
		return nil, fmt.Errorf("read identity: %w", err)
	}
	if h.id, err = bcrypto.ParseIdentity(secret); err != nil {
		return nil, fmt.Errorf("read identity %s: %w", filepath.Join(absDir, IdentityName), err)
	}
	signed, err := os.ReadFile(filepath.Join(absDir, BundleName))
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	if h.bundle, err = bcrypto.ParseBundle(signed); err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	return h, nil
}

// Identity is the home's private identity.
func (h *Home) Identity() *bcrypto.Identity { return h.id }

// Bundle is the home's own verified bundle.
func (h *Home) Bundle() *bcrypto.Bundle { return h.bundle }

// BundleText is the one-line form of the home's own bundle.
func (h *Home) BundleText() string {
	signed, _ := os.ReadFile(filepath.Join(h.Dir, BundleName))
	return bcrypto.BundleText(signed)
}

// Path names a file or directory inside the home.
func (h *Home) Path(elem ...string) string { return filepath.Join(append([]string{h.Dir}, elem...)...) }

// OpenFolder opens the home's synced folder, staging publishes in the home.
func (h *Home) OpenFolder() (*syncsafe.Folder, error) {
	staging := h.Path("staging")
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return nil, err
	}
	return h.openFolder(syncsafe.WithStaging(staging), syncsafe.WithOnChange(func(rels ...string) {
		if h.Nudger != nil {
			h.Nudger.Nudge(rels...)
		}
	}))
}

// ReadFolder opens the synced folder for reading only: unlike OpenFolder
// it makes no staging directory in the home (a dry run changes nothing).
func (h *Home) ReadFolder() (*syncsafe.Folder, error) { return h.openFolder() }

func (h *Home) openFolder(opts ...syncsafe.FolderOption) (*syncsafe.Folder, error) {
	f, err := syncsafe.OpenFolder(h.Config.Folder, opts...)
	if err != nil {
		return nil, bridge.WithHint(err, "is the synced folder %s mounted and shared?", h.Config.Folder)
	}
	if err := syncsafe.CheckMarker(f); err != nil {
		f.Close()
		if !errors.Is(err, syncsafe.ErrNoMarker) {
			return nil, bridge.WithHint(err, "refusing to act on %s: check --folder (and `bridge doctor`): its %s is not this release's", h.Config.Folder, syncsafe.MarkerName)
		}
		return nil, bridge.WithHint(err, "refusing to act on %s: without %s it may be unmounted or not synced yet", h.Config.Folder, syncsafe.MarkerName)
	}
	return f, nil
}

// Trust records a peer's bundle under a local name. The peer must have the
// other role. On the host it creates the agent's result directory; on the
// agent its request directory for that host, and publishes its bundle there.
func (h *Home) Trust(text, name string) (*Peer, error) {
	b, _, err := bcrypto.ParseBundleText(text)
	if err != nil {
		return nil, bridge.WithHint(fmt.Errorf("trust: %w", err), "paste the whole line printed by `bridge keys export` on the other side")
	}
	if b.Role == h.Config.Role {
		return nil, fmt.Errorf("trust: that is a %s bundle; a %s trusts %ss", b.Role, h.Config.Role, otherRole(h.Config.Role))
	}
	if b.ID == h.Config.ID {
		return nil, errors.New("trust: that is this party's own bundle")
	}
	if name == "" {
		name = b.Name
	}
	if !bridge.ValidPeerName(name) {
		return nil, bridge.WithHint(fmt.Errorf("trust: %q cannot be a peer name", name), "pass --name with lower-case letters, digits, '.', '_' or '-', not 8 or more hex digits alone (they read as an id)")
	}
	if k, err := h.revokedForever(b.SignKid(), b.BoxKid()); err != nil {
		return nil, err
	} else if k != nil {
		return nil, refuseRevokedForever("trust", k)
	}
	peers, err := h.Peers()
	if err != nil {
		return nil, err
	}
	for _, p := range peers {
		switch {
		case p.ID == b.ID && func() bool { _, ok := p.Current(); return !ok }():
			// Trusted once, every key revoked since: "trusted" again would
			// change nothing and say it did.
			return nil, bridge.WithHint(fmt.Errorf("trust: %s %q is trusted, but its keys are revoked", p.Role, p.Name),
				"a revoked key is never trusted again: it rotates (`bridge keys rotate` on its side), then `bridge keys remove %s` here and pair with its new bundle", p.Name)
		case p.ID == b.ID && p.Bundle == strings.TrimSpace(text) && p.Name == name:
			// Trusted already: keep the record (and the rotations it has
			// followed since); just make sure the directories exist.
			return &p, h.trustDirs(b.ID)
		case p.ID == b.ID:
			return nil, bridge.WithHint(fmt.Errorf("trust: %s is already trusted as %q with other keys", b.ID, p.Name),
				"if its keys really changed, run `bridge keys remove %s` and trust it again after comparing fingerprints", p.Name)
		case p.Name == name && p.ID != b.ID:
			return nil, bridge.WithHint(fmt.Errorf("trust: the name %q is already used for %s", name, p.ID), "choose another --name")
		}
	}
	p := &Peer{V: 1, Name: name, Role: b.Role, ID: b.ID, Bundle: strings.TrimSpace(text), Trusted: time.Now().Unix(),
		Keys: []PeerKey{{Seq: b.Seq, SignPub: b.SignPub, BoxPub: b.BoxPub}}}
	if err := h.savePeer(p); err != nil {
		return nil, err
	}
	return p, h.trustDirs(b.ID)
}

func (h *Home) savePeer(p *Peer) error {
	data, _ := json.MarshalIndent(p, "", "  ")
	if err := os.MkdirAll(h.Path(PeersDir), 0o700); err != nil {
		return err
	}
	return syncsafe.WriteFileAtomic(h.Path(PeersDir, p.ID+".json"), append(data, '\n'))
}

// trustDirs creates the directories this side writes for a peer: the host
// the agent's result directory; the agent its request directory for that
// host, where it also publishes its bundle.
func (h *Home) trustDirs(peer string) error {
	f, err := h.OpenFolder()
	if err != nil {
		return err
	}
	defer f.Close()
	if h.Config.Role == "host" {
		return f.MkdirAll(bridge.ToAgentDir(h.Config.ID, peer))
	}
	if err := f.MkdirAll(bridge.ToHostDir(peer, h.Config.ID)); err != nil {
		return err
	}
	signed, err := os.ReadFile(h.Path(BundleName))
	if err != nil {
		return err
	}
	return f.PublishReplace(bridge.AgentBundlePath(peer, h.Config.ID), bridge.WriteBytes(signed), syncsafe.WithMode(0o644))
}

func otherRole(r string) string {
	if r == "host" {
		return "agent"
	}
	return "host"
}

// Peers lists the trusted peers, by name.
func (h *Home) Peers() ([]Peer, error) {
	entries, err := os.ReadDir(h.Path(PeersDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []Peer
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p, err := h.readPeer(e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Peer finds a trusted peer by id or, failing that, by local name, and
// checks that the record's bundle really is that peer's.
func (h *Home) Peer(nameOrID string) (*Peer, *bcrypto.Bundle, error) {
	p, err := h.findPeer(nameOrID)
	if err != nil {
		return nil, nil, err
	}
	cur, ok := p.Current()
	if !ok {
		return nil, nil, bridge.WithHint(fmt.Errorf("peer %s: %w", p.Name, ErrEveryKeyRevoked),
			"pair with it again: `bridge keys remove %s`, then `bridge pair` or `bridge keys trust` its new bundle", p.Name)
	}
	return &p, &bcrypto.Bundle{V: 1, Role: p.Role, Name: p.Name, ID: p.ID, Seq: cur.Seq, SignPub: cur.SignPub, BoxPub: cur.BoxPub}, nil
}

// findPeer finds a trusted peer's record by id or, failing that, by name.
// An id names its record's file (savePeer): a lookup by id, what both sides
// do for every request, is one stat (and a read when the file changed), not
// a listing of every record. No name reads as an id (ValidPeerName), so a
// listing finds nothing else under an id. A lookup by id therefore does not
// fail for another peer's broken record, as a listing does: the daemon
// serves its other agents, and what lists (a lookup by name, `keys show`,
// an agent opening its client) names the broken file
// (TestPeerByIDBesideABrokenRecord).
func (h *Home) findPeer(nameOrID string) (Peer, error) {
	if bcrypto.ValidKid(nameOrID) {
		p, err := h.readPeer(nameOrID + ".json")
		if err == nil && p.ID == nameOrID {
			return p, p.bad
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Peer{}, err
		}
	}
	peers, err := h.Peers()
	if err != nil {
		return Peer{}, err
	}
	for _, p := range peers {
		if p.ID == nameOrID {
			return p, p.bad
		}
	}
	for _, p := range peers {
		if p.Name == nameOrID {
			return p, p.bad
		}
	}
	return Peer{}, fmt.Errorf("%w: %q", ErrUnknownPeer, nameOrID)
}

// PeerByID reads one trusted peer's record by its id, checked against the
// bundle it was made from. It reads that one file (a stat, when the file did
// not change since the last read): cheap enough to ask before every start,
// so that a revocation counts from the moment it was written.
func (h *Home) PeerByID(id string) (*Peer, error) {
	if !bcrypto.ValidKid(id) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownPeer, id)
	}
	p, err := h.readPeer(id + ".json")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownPeer, id)
	} else if err != nil {
		return nil, err
	}
	if p.bad != nil {
		return nil, p.bad
	}
	return &p, nil
}

// peerCache keeps parsed and checked peer records between reads. Both sides
// look a peer up for every request, and checking a record means a curve
// operation per key: a file is read, parsed and checked again only when its
// inode, size or modification time changed (records are replaced by rename,
// so an edit makes a new inode).
type peerCache struct {
	mu sync.Mutex
	m  map[string]cachedPeer // file name → record
}

type cachedPeer struct {
	ino   [2]int64 // bridge.fileIdentity
	size  int64
	mtime time.Time
	peer  Peer
}

// readPeer reads, parses and checks one file of peers/.
func (h *Home) readPeer(name string) (Peer, error) {
	path := h.Path(PeersDir, name)
	fi, err := os.Stat(path)
	if err != nil {
		return Peer{}, err
	}
	ino := fileIdentity(fi)
	if c := h.peers; c != nil {
		c.mu.Lock()
		e, ok := c.m[name]
		c.mu.Unlock()
		if ok && e.ino == ino && e.size == fi.Size() && e.mtime.Equal(fi.ModTime()) {
			return clonePeer(e.peer), nil
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Peer{}, err
	}
	var p Peer
	if err := json.Unmarshal(data, &p); err != nil {
		return Peer{}, bridge.WithHint(fmt.Errorf("read peer %s: %w", name, err),
			"%s is not a peer record: move it out of %s (a trusted peer's record is its id + .json, written by `bridge pair` or `bridge keys trust`); if it was a peer's, pair with that peer again", path, h.Path(PeersDir))
	}
	p.bad = p.Check()
	if c := h.peers; c != nil && int64(len(data)) == fi.Size() {
		c.mu.Lock()
		if c.m == nil {
			c.m = map[string]cachedPeer{}
		}
		c.m[name] = cachedPeer{ino: ino, size: fi.Size(), mtime: fi.ModTime(), peer: clonePeer(p)}
		c.mu.Unlock()
	}
	return p, nil
}

// clonePeer copies the slices too: callers change records they got (trust,
// revoke) and must not change the cache's.
func clonePeer(p Peer) Peer {
	p.Keys = slices.Clone(p.Keys)
	p.Revoked = slices.Clone(p.Revoked)
	return p
}

// check verifies a peer record against the bundle it was created from: a
// record edited to point elsewhere is refused.
func (p *Peer) Check() error {
	b, _, err := bcrypto.ParseBundleText(p.Bundle)
	if err != nil {
		return fmt.Errorf("peer %s: %w", p.Name, err)
	}
	// The bundle is one generation of the record's chain: the first one for
	// a peer trusted by pairing, a later one for a host an agent restored
	// from its secret (agentsecret.go), whose chain starts at the pinned key.
	match := false
	for _, k := range p.Keys {
		match = match || k.Seq == b.Seq && bytes.Equal(k.SignPub, b.SignPub) && bytes.Equal(k.BoxPub, b.BoxPub)
	}
	if b.ID != p.ID || b.Role != p.Role || !match {
		return fmt.Errorf("peer %s: the record does not match its bundle", p.Name)
	}
	for _, k := range p.Keys {
		if bcrypto.CheckSignKey(k.SignPub) != nil || bcrypto.CheckBoxKey(k.BoxPub) != nil {
			return fmt.Errorf("peer %s: a key of the record is malformed", p.Name)
		}
	}
	return nil
}

// looksLikeID reports whether a name could be read as a party or request
// id, or a prefix of one: 8 or more lower-case hex digits and nothing else.
// The host's operator names requests AGENT/ID with AGENT a local name or an
// id, so a peer must not be able to pick a name that reads as someone
// else's id.
// newHomePaths makes a new home's directory and its folder absolute and
// checks them: the home outside the folder, and no home there yet.
func newHomePaths(verb, dir, folder string) (absDir, absFolder string, err error) {
	if absFolder, err = filepath.Abs(folder); err != nil {
		return "", "", err
	}
	if absDir, err = filepath.Abs(dir); err != nil {
		return "", "", err
	}
	if err := CheckOutside(absDir, absFolder); err != nil {
		return "", "", err
	}
	if _, err := os.Stat(filepath.Join(absDir, configName)); err == nil {
		return "", "", bridge.WithHint(fmt.Errorf("%s %s: %w", verb, absDir, ErrHomeExists), "use another --home, or remove %s to start over", absDir)
	}
	if err := checkOwnHome(verb, absDir); err != nil {
		return "", "", err
	}
	return absDir, absFolder, nil
}

// checkOwnHome refuses a home directory that is not this user's alone
// (foreignHome), before anything is written in it.
func checkOwnHome(verb, absDir string) error {
	if why := foreignHome(absDir); why != "" {
		return bridge.WithHint(fmt.Errorf("%s %s: not a directory of this user's own: %s", verb, absDir, why), "give a --home that does not exist yet, under a directory only you can write (bridge creates it 0700); or, if the directory is yours and empty, `chmod 700` it first")
	}
	return nil
}

// ExpandTilde turns a leading ~/ (Syncthing's paths, a flag a shell did
// not expand: --repo=~/src) into the user's home.
func ExpandTilde(p string) string {
	if rest, ok := strings.CutPrefix(p, "~"+string(filepath.Separator)); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}
