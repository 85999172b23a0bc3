package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// Client is the agent side: it submits requests, reads results and acks
// them. Status and Wait are pure reads of the folder (invariant 10).
type Client struct {
	home   *trust.Home
	folder *syncsafe.Folder
	// Rotations are the hosts' key rotations this client followed on open.
	Rotations []trust.RotationEvent
	// StreamOutput: outcomes leave Stdout and Stderr nil and give the
	// output through WriteOutput, so it is never held in memory whole.
	StreamOutput bool

	// repeats are the keyed requests this client's Submit found sent
	// before: their outcome is the first send's answer (Outcome.Earlier).
	repeats sync.Map

	// quickFor, if not 0, is how long Wait's quick looks go on (quickFor
	// the constant otherwise), and waits what Wait and WaitAll did (quick
	// looks, watches armed, watches armed and not yet released): for tests.
	quickFor time.Duration
	// fullLooksEvery, if not 0, is the pause of WaitAll's full looks from
	// the first (randomised by half either way): for tests.
	fullLooksEvery time.Duration
	waits          struct{ quick, watches, open, quickBeforeWatch atomic.Int64 }
}

// recordsMu keeps this process's holders of the records' lock apart
// (lockRecords), before its file lock keeps processes apart: one for the
// process, not per client (`bridge mcp` opens a client per tool call, and
// runs calls at once).
var recordsMu sync.Mutex

// OpenClient opens an agent home's folder.
func OpenClient(home *trust.Home) (*Client, error) {
	if home.Config.Role != "agent" {
		return nil, bridge.WithHint(errors.New("this home belongs to a host"), "run agent commands with an agent's --home")
	}
	f, err := home.OpenFolder()
	if err != nil {
		return nil, err
	}
	c := &Client{home: home, folder: f}
	// Follow the hosts' key rotations (this writes only the agent's home).
	peers, err := home.Peers()
	if err != nil {
		f.Close()
		return nil, err
	}
	for _, p := range peers {
		if p.Role != "host" {
			continue
		}
		events, err := home.FollowRotations(f, p.ID, bridge.HostDir(p.ID))
		if err != nil {
			f.Close()
			return nil, err
		}
		c.Rotations = append(c.Rotations, events...)
	}
	return c, nil
}

// followHost applies the rotation statements the host published, and
// reports whether any was accepted.
func (c *Client) followHost(host string) bool {
	events, err := c.home.FollowRotations(c.folder, host, bridge.HostDir(host))
	accepted := false
	for _, ev := range events {
		accepted = accepted || ev.Result == "accepted"
	}
	c.Rotations = append(c.Rotations, events...)
	return err == nil && accepted
}

// resultCheck is what verifies results from host h for request s: the host's
// signing keys valid now, the agent's own encryption keys still kept.
func (c *Client) resultCheck(s *Sent) (bridge.ResultCheck, []trust.OwnKey, error) {
	p, _, err := c.home.Peer(s.Host)
	if err != nil {
		return bridge.ResultCheck{}, nil, err
	}
	var hostKeys [][]byte
	for _, k := range p.KeysIn(trust.KeyValid, time.Now()) {
		hostKeys = append(hostKeys, k.SignPub)
	}
	own, err := c.home.OwnKeys()
	if err != nil {
		return bridge.ResultCheck{}, nil, err
	}
	var boxKids []string
	for _, k := range own {
		boxKids = append(boxKids, k.Identity.BoxKid())
	}
	return bridge.ResultCheck{Host: s.Host, HostKeys: hostKeys, Agent: c.home.Config.ID, AgentBoxKids: boxKids,
		RequestSHA256: s.ManifestSHA256}, own, nil
}

// Close releases the folder.
func (c *Client) Close() error { return c.folder.Close() }

// Sent is what the agent remembers of a request it submitted, in its home
// (requests/<id>.json): enough to verify the result bound to it.
type Sent struct {
	V              int               `json:"v"`
	ID             string            `json:"id"`
	Host           string            `json:"host"`
	HostName       string            `json:"host_name"`
	Op             string            `json:"op"`
	Args           map[string]string `json:"args"`
	Key            string            `json:"key,omitempty"`
	ManifestSHA256 string            `json:"manifest_sha256"`
	Created        int64             `json:"created"`
	Expires        int64             `json:"expires"`
	// Earlier: Submit found this keyed request sent before, and sent
	// nothing new (not part of the record).
	Earlier bool `json:"-"`
	// Acked: the record holds the answer this home acked (read with it).
	Acked bool `json:"-"`
	// Forgotten: when this home stopped waiting for it (Forget; Unix
	// seconds, 0: not). It is no longer outstanding unless an answer
	// comes all the same.
	Forgotten int64 `json:"forgotten,omitempty"`
}

// SubmitOptions describe a request.
type SubmitOptions struct {
	Host  string // local name or id of the host; "" = the only trusted host
	Op    string
	Args  map[string]string
	Key   string        // idempotency key: the id becomes a function of it
	Stdin io.Reader     // optional standard input for the op
	TTL   time.Duration // validity (default 24h)
	// NoCheck sends the input without holding it to the op's max_stdin in
	// the host's catalog (a catalog older than the host's policy); the
	// host enforces its bound either way.
	NoCheck bool
}

// ErrAmbiguousHost: the agent trusts several hosts and none was named.
var ErrAmbiguousHost = errors.New("several hosts are trusted")

// ErrUnknownHost: the host named (--host) is none this agent trusts. It is
// a trust.ErrUnknownPeer too.
var ErrUnknownHost = fmt.Errorf("%w", trust.ErrUnknownPeer)

// host finds the trusted host by name or id, or the only one.
func (c *Client) host(name string) (*trust.Peer, *bcrypto.Bundle, error) {
	if name != "" {
		p, b, err := c.home.Peer(name)
		if errors.Is(err, trust.ErrUnknownPeer) {
			err = c.unknownHost(name)
		}
		return p, b, err
	}
	hosts, err := c.hosts()
	if err != nil {
		return nil, nil, err
	}
	switch len(hosts) {
	case 0:
		return nil, nil, bridge.WithHint(fmt.Errorf("%w: no host is trusted", trust.ErrUnknownPeer), "run `bridge keys trust BUNDLE` with the line `bridge keys export` printed on the host")
	case 1:
		return c.home.Peer(hosts[0].ID)
	}
	return nil, nil, bridge.WithHint(ErrAmbiguousHost, "pass --host NAME: %s", peerNames(hosts))
}

// peerNames is the peers' names, comma-separated, for a hint.
func peerNames(peers []trust.Peer) string {
	names := make([]string, len(peers))
	for i, p := range peers {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// hosts lists the trusted hosts.
func (c *Client) hosts() ([]trust.Peer, error) {
	peers, err := c.home.Peers()
	if err != nil {
		return nil, err
	}
	var hosts []trust.Peer
	for _, p := range peers {
		if p.Role == "host" {
			hosts = append(hosts, p)
		}
	}
	return hosts, nil
}

// unknownHost is the error for a --host that names no trusted host, with
// the names that would do: a typo, or a host's id from another home, is
// the usual cause.
func (c *Client) unknownHost(name string) error {
	err := fmt.Errorf("--host %s: %w", name, ErrUnknownHost)
	hosts, _ := c.hosts()
	if len(hosts) == 0 {
		return bridge.WithHint(err, "no host is trusted yet: run `bridge keys trust BUNDLE` with the line `bridge keys export` printed on the host")
	}
	return bridge.WithHint(err, "the hosts this agent trusts: %s (`bridge keys show`)", peerNames(hosts))
}

// Submit publishes a request: the payload first, then the manifest, both
// atomically. With a Key, submitting the same thing again returns the first
// submission and publishes nothing new.
func (c *Client) Submit(o SubmitOptions) (*Sent, error) {
	peer, hb, err := c.host(o.Host)
	if err != nil {
		return nil, err
	}
	if o.Args == nil {
		o.Args = map[string]string{}
	}
	id := bridge.NewRequestID()
	if o.Key != "" {
		if id, err = c.home.KeyedRequestID(hb.ID, o.Op, o.Args, o.Key); err != nil {
			return nil, fmt.Errorf("submit: %w", err)
		}
		if s, err := c.sentBefore(id, hb.ID, o); err == nil {
			return c.sentAgain(s, o), nil
		}
		// A record there that does not read is refused before the input is
		// read; a passing error is looked at again under the lock.
		if err := c.unreadableRecord(id, o.Key); err != nil && (errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EISDIR)) {
			return nil, err
		}
	}
	if o.TTL <= 0 {
		o.TTL = 24 * time.Hour
	}
	if o.TTL > bridge.MaxValidity {
		return nil, fmt.Errorf("submit: validity %s is over the maximum of %s", o.TTL, bridge.MaxValidity)
	}
	// This agent's directory for the host is its own: if a sync client
	// or a cleanup removed it, make it again rather than fail.
	ownDir := bridge.ToHostDir(hb.ID, c.home.Config.ID)
	if _, err := c.folder.Lstat(ownDir); errors.Is(err, fs.ErrNotExist) {
		if err := c.folder.MkdirAll(ownDir); err != nil {
			return nil, fmt.Errorf("submit: %w", err)
		}
	}
	if o.Stdin != nil && !o.NoCheck {
		o.Stdin = c.boundStdin(o.Host, o.Op, o.Stdin)
	}
	now := time.Now()
	n := bridge.NewRequest{ID: id, Agent: c.home.Identity(), AgentID: c.home.Config.ID, Host: hb,
		Call: bridge.Call{Op: o.Op, Args: o.Args}, Stdin: o.Stdin, Created: now, Expires: now.Add(o.TTL)}
	if o.Key == "" {
		// Sealed straight into the payload's publish.
		var manifest []byte
		var req *bridge.Request
		return c.publishRequest(peer, hb, o, id, func(w io.Writer) error {
			var err error
			manifest, req, err = bridge.SealRequest(w, n)
			return err
		}, func() ([]byte, *bridge.Request) { return manifest, req }, false)
	}
	// A keyed submit seals into a spool first, outside the records' lock
	// (its standard input may be a slow pipe), then, under the lock, looks
	// again and publishes: a second submit of the same key in another
	// process (an agent retrying a call still on its way) finds this one,
	// and never removes its payload between its payload and its manifest.
	spool, err := c.spoolFile()
	if err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	defer spool.Close()
	manifest, req, err := bridge.SealRequest(spool, n)
	if err != nil {
		return nil, c.sealError(id, err)
	}
	unlock, err := c.lockRecords()
	if err != nil {
		return nil, bridge.WithHint(fmt.Errorf("submit: %w", err), "nothing was sent; another call or process of this agent holds its request records (an ack, a keyed submit of a large input): try again. If nothing else of this agent runs, check that %s is a file of yours (`ls -l`): a command run as another user (sudo) can leave it so", c.home.Path("requests", recordsLock))
	}
	unlock = sync.OnceFunc(unlock)
	defer unlock()
	if s, err := c.sentBefore(id, hb.ID, o); err == nil {
		unlock()
		if _, rerr := c.readSent(s.ID); rerr != nil {
			c.Sent(s.ID) // found again from the folder: remembered now, as the look under the lock could not
		}
		return c.sentAgain(s, o), nil
	}
	for _, rid := range []string{id, c.publicKeyedID(hb.ID, o)} {
		if err := c.unreadableRecord(rid, o.Key); err != nil {
			return nil, err
		}
	}
	mpath := bridge.RequestPath(hb.ID, c.home.Config.ID, id, bridge.ExtManifest)
	if _, err := c.folder.Lstat(mpath); err == nil {
		// A manifest of the key's id that this home cannot verify as its
		// own (a key retired since, another home's, a sync conflict's):
		// its payload is not this submit's to replace.
		return nil, bridge.WithHint(fmt.Errorf("submit: key %q: the folder holds a manifest of request %s that this home cannot verify as its own (signed by a key retired since, another home's, or a sync conflict's)", o.Key, id), "nothing was sent; if %s in the folder is not this agent's, remove it and submit again. Another key sends a new request, which the host runs even if this one ran", mpath)
	}
	if !time.Now().Before(time.Unix(req.Expires, 0)) {
		// Reading its input and waiting for the lock outlived the request
		// (as the manifest says it, in whole seconds): sent now, it would
		// spend the key on an answer that can only say expired.
		return nil, bridge.WithHint(fmt.Errorf("submit: key %q: the request expired (TTL %s) before it could be sent: reading its input and waiting for the records' lock took %s", o.Key, o.TTL, time.Since(now).Round(time.Millisecond)), "nothing was sent; submit again with a longer TTL")
	}
	// A payload from a submission that crashed before its manifest went
	// out is this agent's own file: replace it.
	c.folder.Remove(bridge.RequestPath(hb.ID, c.home.Config.ID, id, bridge.ExtPayload))
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	return c.publishRequest(peer, hb, o, id, func(w io.Writer) error {
		_, err := io.Copy(w, spool)
		return err
	}, func() ([]byte, *bridge.Request) { return manifest, req }, true)
}

// unreadableRecord refuses a keyed submit whose record is there but does
// not read (not missing, not torn: a directory in its place, another user's
// file): the request may be sent, acked and collected, and a new manifest
// under its id could run it again once the host has forgotten it.
func (c *Client) unreadableRecord(id, key string) error {
	_, err := c.readSent(id)
	if err == nil || errors.Is(err, errNoRecord) || errors.Is(err, errTornRecord) {
		return nil
	}
	rec := c.home.Path("requests", id+".json")
	if _, lerr := os.Lstat(rec); lerr != nil {
		return bridge.WithHint(fmt.Errorf("submit: key %q: cannot look for the record of request %s: %w", key, id, err), "nothing was sent; check %s (a directory of yours)", c.home.Path("requests"))
	}
	return bridge.WithHint(fmt.Errorf("submit: key %q was sent as request %s, whose record in this home cannot be read: %w", key, id, err), "nothing was sent; check %s (a file of yours, readable)", rec)
}

// sentBefore finds the request a keyed submit of o sent before as id (or
// under its older public id).
func (c *Client) sentBefore(id, host string, o SubmitOptions) (*Sent, error) {
	s, err := c.Sent(id)
	if err != nil {
		s, err = c.sentUnderPublicID(host, o)
	}
	return s, err
}

// sentAgain is what a keyed submit of o returns for s, sent before: its
// record learns what was asked if it was found again from the folder, a
// forgotten one is waited for again, and the very same manifest is
// delivered again if it is not in the folder (a crash before it was
// published, or a lost file); the host answers a duplicate from its ledger.
func (c *Client) sentAgain(s *Sent, o SubmitOptions) *Sent {
	if s.Op == "" || s.Forgotten != 0 {
		c.keyedAgain(s, o)
	}
	c.repeats.Store(s.ID, true)
	s.Earlier = true
	if out, err := c.Result(s.ID); errors.Is(err, ErrNoResult) {
		c.redeliver(s)
	} else {
		out.Close()
	}
	return s
}

// sealError says a failed seal of request id as the command line says it.
func (c *Client) sealError(id string, err error) error {
	var over *stdinTooLarge
	if errors.As(err, &over) {
		// Said as the host would say it, without the sealing's chain.
		return bridge.WithHint(fmt.Errorf("submit: %w", over), "`bridge ops` shows each op's max_stdin; send less, or ask the host's owner to raise it")
	}
	if errors.Is(err, fs.ErrNotExist) {
		return bridge.WithHint(fmt.Errorf("submit: %w", err), "the host's directory is missing: run `bridge keys trust` for the host again, and check the folder is synced")
	}
	return fmt.Errorf("submit %s: %w", id, err)
}

// publishRequest publishes request id's payload (written by payload), then
// its manifest (sealed returns it and the request, once payload has run),
// and remembers it. locked: the caller holds the records' lock.
func (c *Client) publishRequest(peer *trust.Peer, hb *bcrypto.Bundle, o SubmitOptions, id string, payload func(io.Writer) error, sealed func() ([]byte, *bridge.Request), locked bool) (*Sent, error) {
	// The payload's directory entry becomes durable with the manifest's
	// publish into the same directory: without the manifest it is nothing.
	if err := c.folder.Publish(bridge.RequestPath(hb.ID, c.home.Config.ID, id, bridge.ExtPayload), payload, syncsafe.WithoutDirSync()); err != nil {
		return nil, c.sealError(id, err)
	}
	manifest, req := sealed()
	s := &Sent{V: 1, ID: id, Host: hb.ID, HostName: peer.Name, Op: o.Op, Args: o.Args, Key: o.Key,
		ManifestSHA256: bridge.SHA256Hex(manifest), Created: req.Created, Expires: req.Expires}
	if err := c.folder.Publish(bridge.RequestPath(hb.ID, c.home.Config.ID, id, bridge.ExtManifest), bridge.WriteBytes(manifest)); err != nil {
		return nil, fmt.Errorf("submit %s: %w", id, err)
	}
	// Remembered once the request is on its way, not before: the record is
	// a cache until an ack (Remember), and the host starts on the request
	// while it is written. A result is verified against it (the manifest's
	// hash), and a keyed retry re-sends these very bytes; a record that a
	// crash lost, or that could not be written, is found again from the
	// manifest, which stays in the folder until the result is acked. The
	// request is sent either way: no error for it. Never over a record
	// another process wrote meanwhile (rememberSent).
	c.rememberSent(s, manifest, locked)
	return s, nil
}

// sentUnderPublicID finds a keyed request this home sent before keyed ids
// were derived with its idempotency secret, under the id SPEC §7.2 gave it
// then (a plain SHA-256 of the same inputs). A retry of it must keep that id,
// or it would run again. It only looks up this home's own records; no new
// request is ever given such an id.
func (c *Client) sentUnderPublicID(host string, o SubmitOptions) (*Sent, error) {
	s, err := c.Sent(c.publicKeyedID(host, o))
	if err != nil {
		return nil, err
	}
	if s.Host != host || s.Op != o.Op || s.Key != o.Key || !maps.Equal(s.Args, o.Args) {
		return nil, fmt.Errorf("request %s: not this command", s.ID)
	}
	return s, nil
}

// publicKeyedID is the id SPEC §7.2 gave a keyed request before keyed ids
// were derived with the home's idempotency secret.
func (c *Client) publicKeyedID(host string, o SubmitOptions) string {
	h := sha256.New()
	h.Write([]byte("bridge/v1/idempotency\x00"))
	field := func(s string) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(c.home.Config.ID)
	field(host)
	field(o.Op)
	for _, k := range slices.Sorted(maps.Keys(o.Args)) {
		field(k)
		field(o.Args[k])
	}
	field(o.Key)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// boundStdin holds the input of a request to its op's max_stdin from the
// host's signed catalog, so an agent learns before it sends (and before it
// fills the folder) what the host would refuse. Without a readable catalog
// (or one that may be older than the host's policy: Catalog.Stale), or for
// an op it does not list, the input goes as it is: the host enforces
// the bound either way, and the catalog may be older than its policy.
func (c *Client) boundStdin(host, op string, in io.Reader) io.Reader {
	most := int64(-1)
	if cat, err := c.Ops(host); err == nil && !cat.Stale {
		for _, info := range cat.Ops {
			if info.Name == op {
				most = info.MaxStdin
			}
		}
	}
	if most < 0 {
		return in
	}
	return &boundedReader{r: in, op: op, left: most, most: most}
}

// stdinTooLarge: the input is longer than the op takes.
type stdinTooLarge struct {
	op   string
	most int64
}

func (e *stdinTooLarge) Error() string {
	if e.most == 0 {
		return fmt.Sprintf("%v: op %s takes no standard input (its max_stdin in the host's catalog is 0); nothing was sent", bridge.ErrTooLarge, e.op)
	}
	return fmt.Sprintf("%v: standard input is larger than the %d bytes op %s takes (max_stdin in the host's catalog); nothing was sent", bridge.ErrTooLarge, e.most, e.op)
}

// Unwrap makes it bridge.ErrTooLarge, as the host's refusal would be.
func (e *stdinTooLarge) Unwrap() error { return bridge.ErrTooLarge }

// boundedReader fails once more than left bytes were read: the seal is
// abandoned and nothing is published.
type boundedReader struct {
	r          io.Reader
	op         string
	left, most int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	if int64(n) > b.left {
		return 0, &stdinTooLarge{op: b.op, most: b.most}
	}
	b.left -= int64(n)
	return n, err
}

// redeliver publishes the remembered manifest of a request again if the
// folder does not hold those very bytes: the name is this agent's alone,
// so something else there (a sync client's conflict resolution that kept
// another writer's version, an rclone --resync that kept the other side's,
// a planted directory) is replaced. The host keys on the id, so a request it
// saw before is answered from its ledger, never run again.
func (c *Client) redeliver(s *Sent) {
	m := c.sentManifest(s.ID)
	if m == nil || bridge.SHA256Hex(m) != s.ManifestSHA256 {
		return
	}
	rel := bridge.RequestPath(s.Host, c.home.Config.ID, s.ID, bridge.ExtManifest)
	fi, err := c.folder.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.folder.Publish(rel, bridge.WriteBytes(m))
	case err != nil:
	case !fi.Mode().IsRegular():
		if c.folder.RemoveAll(rel) == nil {
			c.folder.Publish(rel, bridge.WriteBytes(m))
		}
	default:
		if have, err := c.folder.ReadFile(rel, int64(len(m))+1); err == nil && bytes.Equal(have, m) {
			return
		}
		c.folder.PublishReplace(rel, bridge.WriteBytes(m))
	}
}

// sentRecord is requests/<id>.json: what Sent shows, plus the manifest's
// bytes for a re-delivery and, once the result is acked, the kept result's
// manifest and, when small, its output (else requests/<id>.output). One
// file, so a submit makes one private write and an ack one more. Homes from before kept the
// manifest in requests/<id>.manifest and the result in requests/<id>.result;
// both are still read.
type sentRecord struct {
	Sent
	Manifest []byte `json:"manifest,omitempty"`
	Result   []byte `json:"result,omitempty"`
	// Output is the acked result's sealed output when it is small
	// (inlineOutputMax); nil: it is requests/<id>.output.
	Output []byte `json:"output,omitempty"`
}

// Remember records a request this agent sent, in its home. The record is
// a cache until a result is acked (SPEC §10): written without an fsync, so
// a submit waits on none for it. A record a crash lost or cut short is found
// again from the agent's own signed manifest in the folder (recoverSent),
// and a submit that crashed before its manifest was published sent nothing
// (a keyed retry replaces its payload).
func (c *Client) Remember(s *Sent, manifest []byte) error {
	return c.writeRecord(sentRecord{Sent: *s, Manifest: manifest}, false)
}

// rememberSent is Remember for the request Submit has just published: it
// never writes over a record that reads. One that is there was written by
// another process of this agent (an MCP server's wait over everything
// outstanding) that found the request in the folder first; an ack there may
// already keep the answer, which the host then collects: written over, the
// answer would be lost. The move refuses a taken name without a lock; only
// when placing fails (rare: the name taken, or a filesystem that cannot
// move without overwriting) does Submit take the records' lock, waiting for
// it up to recordsLockWait (without it the record is left to be found again
// from the folder). locked: the caller holds the lock already (a keyed
// submit).
func (c *Client) rememberSent(s *Sent, manifest []byte, locked bool) error {
	rec := sentRecord{Sent: *s, Manifest: manifest}
	if c.placeRecord(rec) == nil {
		return nil
	}
	// Taken, or no move without overwrite here (a filesystem without hard
	// links): under the lock, a record that reads is kept and, found again
	// from the folder (which does not say what was asked), learns it; a
	// torn one, or none, is replaced by this one.
	if !locked {
		unlock, lerr := c.lockRecords()
		if lerr != nil {
			return lerr
		}
		defer unlock()
	}
	old, rerr := c.readSent(s.ID)
	switch {
	case errors.Is(rerr, errNoRecord) || errors.Is(rerr, errTornRecord):
		return c.writeRecord(rec, false)
	case rerr != nil:
		return rerr
	case old.ManifestSHA256 != s.ManifestSHA256 || (old.Op != "" && old.Manifest != nil):
		return nil
	}
	if old.Op == "" {
		old.Op, old.Args, old.Key = s.Op, s.Args, s.Key
	}
	if old.Manifest == nil {
		old.Manifest = manifest // of the same hash, checked above
	}
	return c.writeRecord(*old, c.acked(old))
}

// placeRecord puts a new record in place, without an fsync (a cache until
// an ack, as Remember's), and never over one: fs.ErrExist if the name is
// taken.
func (c *Client) placeRecord(rec sentRecord) error {
	data, _ := json.MarshalIndent(rec, "", "  ")
	return c.writePrivate(rec.ID+".json", false, false, func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}

// writeRecord writes requests/<id>.json by temp and rename; durable: with
// the file's fsync (the directory's is the caller's).
func (c *Client) writeRecord(rec sentRecord, durable bool) error {
	data, _ := json.MarshalIndent(rec, "", "  ")
	return c.writePrivate(rec.ID+".json", durable, true, func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}

// writePrivate puts requests/<name> in place by a temp file and a rename,
// with the file's fsync before the rename when durable; without replace it
// fails with fs.ErrExist, nothing changed, if the name is taken. The
// directory's fsync is left to the caller, so several files share one.
func (c *Client) writePrivate(name string, durable, replace bool, write func(io.Writer) error) error {
	dir := c.home.Path("requests")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed { // renamed, it is gone: removed only when it was not (an error, a panic in write)
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	err = write(tmp)
	if err == nil && durable {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		move := os.Rename
		if !replace {
			move = syncsafe.RenameNoReplace
		}
		err = move(tmp.Name(), filepath.Join(dir, name))
		renamed = err == nil
	}
	return err
}

// sentManifest returns the manifest bytes this agent sent as id, or nil.
func (c *Client) sentManifest(id string) []byte {
	if rec, err := c.readSent(id); err == nil && rec.Manifest != nil {
		return rec.Manifest
	}
	m, err := os.ReadFile(c.home.Path("requests", id+"."+bridge.ExtManifest))
	if err != nil {
		return nil
	}
	return m
}

// Sent returns what the agent remembers of request id.
func (c *Client) Sent(id string) (*Sent, error) {
	s, rec, err := c.sentOf(id)
	if rec != nil && !s.Acked {
		s.Acked = c.acked(rec) // an older layout's kept manifest beside the record
	}
	return s, err
}

// sentOf is Sent without its look for an older layout's kept manifest
// (Result's, at every look of a wait, needs none): Acked says only whether
// the record holds a result. rec is the record read, nil if none.
func (c *Client) sentOf(id string) (*Sent, *sentRecord, error) {
	if !bridge.ValidID(id) {
		return nil, nil, fmt.Errorf("%q is not a request id", id)
	}
	rec, err := c.readSent(id)
	if errors.Is(err, errNoRecord) || errors.Is(err, errTornRecord) {
		if s := c.recoverSent(id); s != nil {
			return s, nil, nil
		}
	}
	if err != nil {
		return nil, nil, err
	}
	rec.Sent.Acked = rec.Result != nil
	return &rec.Sent, rec, nil
}

// acked reports whether this home keeps an acked answer of rec's request:
// in the record, or in requests/<id>.result (a home of an older layout).
func (c *Client) acked(rec *sentRecord) bool {
	if rec.Result != nil {
		return true
	}
	_, err := os.Lstat(c.home.Path("requests", rec.ID+"."+bridge.ExtResult))
	return err == nil
}

// errNoRecord: the home has no record of the request; errTornRecord: its
// record does not parse (cut short by a crash: it is written without an
// fsync until an ack). Either way the folder may tell (recoverSent).
var (
	errNoRecord   = errors.New("not sent from this home")
	errTornRecord = errors.New("record cut short")
)

// recoverSent finds a request this agent sent without its private record
// (a home rebuilt from the agent secret, or one that lost requests/): the
// agent's own manifest in the folder, verified with its own keys, says which
// host it went to and pins what the result is bound to. With the manifest
// collected after an ack, the host's signed result in this agent's
// directory stands for it, bound to no manifest (as an earlier send's is,
// in Result). The op and arguments are sealed to the host: they stay
// unknown until the result's receipt names the op. A recovered request is
// remembered again, so losing the record costs a lookup, nothing more.
func (c *Client) recoverSent(id string) *Sent {
	if !bridge.ValidID(id) {
		return nil
	}
	own, err := c.home.OwnKeys()
	if err != nil {
		return nil
	}
	var ownSign [][]byte
	for _, k := range own {
		ownSign = append(ownSign, k.Identity.SignPublic())
	}
	peers, err := c.home.Peers()
	if err != nil {
		return nil
	}
	me := c.home.Config.ID
	for _, p := range peers {
		if p.Role != "host" {
			continue
		}
		data, err := c.folder.ReadFile(bridge.RequestPath(p.ID, me, id, bridge.ExtManifest), bcrypto.KindRequest.MaxSize())
		if err == nil {
			var r bridge.Request
			if bridge.OpenBody(bcrypto.KindRequest, data, ownSign, &r) != nil || r.ID != id || r.Agent != me || r.Host != p.ID {
				continue
			}
			s := &Sent{V: 1, ID: id, Host: p.ID, HostName: p.Name, Args: map[string]string{},
				ManifestSHA256: bridge.SHA256Hex(data), Created: r.Created, Expires: r.Expires}
			c.rememberRecovered(s, data)
			return s
		}
		if _, err := c.folder.Lstat(bridge.ResultPath(p.ID, me, id, bridge.ExtResult)); err == nil {
			// Not remembered: with no manifest to bind it to, every look
			// checks the result file again.
			return &Sent{V: 1, ID: id, Host: p.ID, HostName: p.Name, Args: map[string]string{}}
		}
	}
	return nil
}

// keyedAgain updates the record of s, sent before, for a keyed resend of
// it (o): one recovered from the folder learns what was asked (the keyed
// id, made under this agent's secret, proves it), and one forgotten is
// waited for again (the host answers a duplicate from its ledger, or
// never did). Into the record as it is, under the records' lock: one acked
// since holds the answer, the only copy once the host collected its own.
func (c *Client) keyedAgain(s *Sent, o SubmitOptions) {
	if s.Op == "" {
		s.Op, s.Args, s.Key = o.Op, o.Args, o.Key
	}
	s.Forgotten = 0
	// On an error the record stays as it was, and the resend goes on.
	_ = c.changeRecord(s, func(rec *sentRecord) error {
		if rec.Op == "" {
			rec.Op, rec.Args, rec.Key = o.Op, o.Args, o.Key
		}
		rec.Forgotten = 0
		return c.writeRecord(*rec, c.acked(rec))
	})
}

// rememberRecovered remembers a request found again from the folder,
// unless another process wrote its record meanwhile (an ack's holds the
// answer).
func (c *Client) rememberRecovered(s *Sent, manifest []byte) {
	// One try, no wait, in lockRecords' order: a look must not stall
	// behind another holder's change (remembered by a later look).
	if !recordsMu.TryLock() {
		return
	}
	defer recordsMu.Unlock()
	if os.MkdirAll(c.home.Path("requests"), 0o700) != nil {
		return
	}
	l, err := syncsafe.Lock(filepath.Join(c.home.Path("requests"), recordsLock))
	if err != nil {
		return
	}
	defer l.Unlock()
	switch _, err := c.readSent(s.ID); {
	case errors.Is(err, errTornRecord):
		c.Remember(s, manifest)
	case errors.Is(err, errNoRecord):
		// Not over a Submit's record placed since the read: that one
		// knows what was asked (without a key it takes no lock on its way
		// in).
		c.placeRecord(sentRecord{Sent: *s, Manifest: manifest})
	}
	// Anything else: there (another process wrote it meanwhile), or
	// unreadable: not written over.
}

// lockRecords takes the home's lock on its request records, which every
// change of a record that already exists holds from its read to its write
// (Ack, Forget, a keyed resend, a record found again): two processes of
// one agent (an MCP server and a command) must not write back a record
// read before the other's ack, without the answer in it; and a keyed
// submit from its second look for an earlier send of its key to its record
// (its input sealed before). Another new request's record is put in place
// without it, never over a record that is there (rememberSent, which takes
// it only when placing fails). It waits for another holder, for a while.
func (c *Client) lockRecords() (unlock func(), err error) {
	dir := c.home.Path("requests")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// This process's holders are kept apart by a mutex (the file lock
	// alone may not keep two of one process apart: flock emulated on NFS
	// does not), another process's by the file; both within one deadline.
	deadline := time.Now().Add(recordsLockWait)
	for ; !recordsMu.TryLock(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("request records: another call of this process held them for %s", recordsLockWait)
		}
	}
	for ; ; time.Sleep(2 * time.Millisecond) {
		l, err := syncsafe.Lock(filepath.Join(dir, recordsLock))
		if err == nil {
			return func() { l.Unlock(); recordsMu.Unlock() }, nil
		}
		if !errors.Is(err, syncsafe.ErrLocked) || time.Now().After(deadline) {
			recordsMu.Unlock()
			return nil, fmt.Errorf("request records: %w", err)
		}
	}
}

// recordsLockWait is how long lockRecords waits for another holder (a
// variable: a test shortens it).
var recordsLockWait = 30 * time.Second

// recordsLock is the lock file of lockRecords, in requests/.
const recordsLock = ".lock"

func (c *Client) readSent(id string) (*sentRecord, error) {
	data, err := os.ReadFile(c.home.Path("requests", id+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, bridge.WithHint(fmt.Errorf("request %s: %w", id, errNoRecord), "`bridge ls` lists the requests this agent sent")
	} else if err != nil {
		return nil, err
	}
	var rec sentRecord
	if err := json.Unmarshal(data, &rec); err != nil || rec.ID != id {
		if err == nil {
			err = fmt.Errorf("it names request %s", rec.ID)
		}
		return nil, fmt.Errorf("read request %s: %w: %v", id, errTornRecord, err)
	}
	return &rec, nil
}

// List returns every request this agent remembers, newest first.
func (c *Client) List() ([]Sent, error) {
	entries, err := os.ReadDir(c.home.Path("requests"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var out []Sent
	for _, e := range entries {
		if id, ok := cutSuffix(e.Name(), ".json"); ok && bridge.ValidID(id) {
			if s, err := c.Sent(id); err == nil {
				out = append(out, *s)
			}
		}
	}
	out = append(out, c.unremembered(out)...)
	sort.Slice(out, func(i, j int) bool { return out[i].Created > out[j].Created })
	return out, nil
}

func cutSuffix(s, suffix string) (string, bool) {
	if len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)], true
	}
	return s, false
}

// unremembered lists the requests this agent has files of in the folder
// (its manifests, the host's results to it) but no private record of.
func (c *Client) unremembered(known []Sent) []Sent {
	seen := map[string]bool{}
	for _, s := range known {
		seen[s.ID] = true
	}
	peers, _ := c.home.Peers()
	var out []Sent
	for _, p := range peers {
		if p.Role != "host" {
			continue
		}
		for _, dir := range []string{bridge.ToHostDir(p.ID, c.home.Config.ID), bridge.ToAgentDir(p.ID, c.home.Config.ID)} {
			entries, _ := c.folder.List(dir)
			for _, e := range entries {
				id, ext, ok := bridge.ParseToHostName(e.Name)
				if !ok {
					id, ext, ok = bridge.ParseToAgentName(e.Name)
				}
				if !ok || seen[id] || (ext != bridge.ExtManifest && ext != bridge.ExtResult) {
					continue
				}
				seen[id] = true
				if s := c.recoverSent(id); s != nil {
					out = append(out, *s)
				}
			}
		}
	}
	return out
}
