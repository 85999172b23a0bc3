package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncbridge/bridge/bridge"

	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/policy"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// DaemonOptions tunes a Daemon. Zero fields take the defaults.
type DaemonOptions struct {
	Logger *slog.Logger
	// Rescan is the interval of full directory walks (default 30s): the
	// listing is the truth, watch events only make things faster.
	Rescan time.Duration
	// PendingTimeout is how long, from first sight on the host clock, a
	// request may wait for its payload before it is rejected as incomplete
	// (default 1h).
	PendingTimeout time.Duration
	// MaxQueueAge caps how long a request may wait on the host, whatever its
	// signed expiry says (default 24h).
	MaxQueueAge time.Duration
	// Skew is how far an agent's clock may run ahead (default 10m).
	Skew time.Duration
	// Env looks up the daemon's environment for the variables a policy op
	// passes on (default os.LookupEnv).
	Env func(string) (string, bool)
	// Grace is the runner's time between the steps of the signal ladder.
	Grace time.Duration
	// Now is the host clock (default time.Now).
	Now func() time.Time
	// ApprovalTTL is how long a request may wait for a human's approval
	// (default 1h).
	ApprovalTTL time.Duration
	// AllowRoot lets the daemon run as root (refused by default).
	AllowRoot bool
	// Nudger, if set, asks the local Syncthing to scan each file the
	// daemon publishes (see NewNudger).
	Nudger *bridge.Nudger
}

// Daemon is the host side: it watches the agents' request trees, admits
// complete and authentic requests, runs what the policy allows and publishes
// sealed results. Lifecycle: NewDaemon, Open, Run, Close.
type Daemon struct {
	home    *bridge.Home
	opt     DaemonOptions
	log     *slog.Logger
	me      string
	folder  *syncsafe.Folder
	ledger  *ledger.Ledger
	policy  *policy.Policy
	lock    *syncsafe.Lockfile
	audit   *auditLog
	watcher *syncsafe.Watcher
	agentsP atomic.Pointer[map[string]*agentKeys] // by agent id; replaced whole when keys change
	ownP    atomic.Pointer[ownKeys]

	// The work queue: keys ("agent/id") wait in queue until one of a fixed
	// number of evaluation workers takes them, so hostile volume costs queue
	// entries, not goroutines. A key is active from the moment a worker
	// takes it until its evaluation ends or, if it runs, its run ends; a key
	// scheduled while active is marked dirty and queued again afterwards.
	mu       sync.Mutex
	cond     *sync.Cond
	queue    []string
	queued   map[string]bool
	active   map[string]bool
	dirty    map[string]bool
	closing  bool
	finished map[string]stamp              // keys known terminal, with their published result's stamp (finished.go)
	acks     map[string]bool               // finished keys whose ack file the watcher saw (gc.go)
	rescans  int                           // full batches seen, for dispatchFull's rotation (0: the start-up scan is not dispatched yet)
	cancels  map[string]context.CancelFunc // keys past claim, until their run ends
	noted    map[string]bool               // log-once set (bounded)
	sems     map[string]chan struct{}      // per-op concurrency
	opQueued map[string]int                // per op with a concurrency: requests claimed and not yet ended (queue.go)
	deferred map[string]*keyQueue          // per op: keys left unclaimed while it was full (queue.go)
	wg       sync.WaitGroup

	runCtx   context.Context // parent of every running op; cancelled on abort
	abortRun context.CancelFunc
	stopCtl  chan struct{} // stops the control loop

	// crashAt names a durable step at which the daemon exits abruptly, as
	// a power cut would stop it. Only the crash-injection tests set it,
	// through BRIDGE_TEST_CRASH_AT ("step" or "step#n" for the n-th time).
	crashAt    string
	crashCount atomic.Int64

	redactor *redactor    // nil: redaction off (redact.go)
	ceil     ceilingState // per-agent ceilings (ceilings.go)
}

// Crash-injection steps, in pipeline order (DESIGN §4).
var crashSteps = []string{"claimed", "running", "mid-run", "staged", "published-output", "published", "gc"}

// crashExit is the exit status of an injected crash.
const crashExit = 86

// crashPoint exits at once if the tests asked for a crash at this step.
func (d *Daemon) crashPoint(step string) {
	if d.crashAt == "" {
		return
	}
	name, nth, _ := strings.Cut(d.crashAt, "#")
	if name != step {
		return
	}
	if nth != "" && fmt.Sprint(d.crashCount.Add(1)) != nth {
		return
	}
	os.Exit(crashExit)
}

// agentKeys is what the host trusts for one agent: a snapshot of its peer
// record, whose keys are judged at the time of use.
type agentKeys struct {
	name string
	peer bridge.Peer
}

// sign returns the signing keys valid now.
func (k *agentKeys) sign(now time.Time) [][]byte {
	var out [][]byte
	for _, pk := range k.peer.KeysIn(bridge.KeyValid, now) {
		out = append(out, pk.SignPub)
	}
	return out
}

// invalidSign returns the agent's revoked and expired signing keys with the
// reason each stands for: a request signed by one is answered with that
// reason instead of being dropped as forged.
func (k *agentKeys) invalidSign(now time.Time) (keys [][]byte, reasons []string) {
	for _, pk := range k.peer.Keys {
		switch k.peer.State(pk, now) {
		case bridge.KeyRevoked:
			keys, reasons = append(keys, pk.SignPub), append(reasons, "revoked")
		case bridge.KeyExpired:
			keys, reasons = append(keys, pk.SignPub), append(reasons, "key-expired")
		}
	}
	return keys, reasons
}

// boxPub returns the agent's encryption key with this kid, of any generation.
func (k *agentKeys) boxPub(kid string) ([]byte, bool) {
	for _, pk := range k.peer.Keys {
		if pk.BoxKid() == kid {
			return pk.BoxPub, true
		}
	}
	return nil, false
}

// boxValid reports whether kid names a box key of the agent valid now.
func (k *agentKeys) boxValid(kid string, now time.Time) bool {
	for _, pk := range k.peer.KeysIn(bridge.KeyValid, now) {
		if pk.BoxKid() == kid {
			return true
		}
	}
	return false
}

// ownKeys are the host's own identities: the current one and the retired
// ones still kept to open requests sealed to them.
type ownKeys struct {
	current *bcrypto.Identity
	all     []bridge.OwnKey
	stamp   time.Time // mtime of the home's bundle when loaded
}

func (o *ownKeys) boxKids() []string {
	var out []string
	for _, k := range o.all {
		out = append(out, k.Identity.BoxKid())
	}
	return out
}

func (o *ownKeys) byBoxKid(kid string) *bcrypto.Identity {
	for _, k := range o.all {
		if k.Identity.BoxKid() == kid {
			return k.Identity
		}
	}
	return nil
}

func (o *ownKeys) signPubs() [][]byte {
	var out [][]byte
	for _, k := range o.all {
		out = append(out, k.Identity.SignPublic())
	}
	return out
}

func (d *Daemon) agents() map[string]*agentKeys {
	if m := d.agentsP.Load(); m != nil {
		return *m
	}
	return nil
}

func (d *Daemon) own() *ownKeys { return d.ownP.Load() }

// NewDaemon prepares a daemon for a host home. Nothing is opened yet.
func NewDaemon(home *bridge.Home, opt DaemonOptions) (*Daemon, error) {
	if home.Config.Role != "host" {
		return nil, bridge.WithHint(errors.New("serve: this home belongs to an agent"), "run `bridge serve` with a host's --home")
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opt.Rescan <= 0 {
		opt.Rescan = 30 * time.Second
	}
	if opt.PendingTimeout <= 0 {
		opt.PendingTimeout = time.Hour
	}
	if opt.MaxQueueAge <= 0 {
		opt.MaxQueueAge = 24 * time.Hour
	}
	if opt.Skew <= 0 {
		opt.Skew = bridge.DefaultSkew
	}
	if opt.Env == nil {
		opt.Env = os.LookupEnv
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	d := &Daemon{
		home: home, opt: opt, log: opt.Logger, me: home.Config.ID,
		queued: map[string]bool{}, active: map[string]bool{}, dirty: map[string]bool{}, finished: map[string]stamp{}, acks: map[string]bool{},
		cancels: map[string]context.CancelFunc{}, noted: map[string]bool{}, sems: map[string]chan struct{}{},
		opQueued: map[string]int{}, deferred: map[string]*keyQueue{},
	}
	d.cond = sync.NewCond(&d.mu)
	d.crashAt = os.Getenv("BRIDGE_TEST_CRASH_AT")
	return d, nil
}

// evalWorkers is how many requests are verified and settled at once. Runs
// are handed off to their own goroutines, so a long op never holds a worker.
const evalWorkers = 4

// Open takes the single-instance lock, opens the ledger, the policy and the
// folder, recovers what a crash interrupted, and starts watching.
func (d *Daemon) Open() (err error) {
	defer func() {
		if err != nil {
			d.closeResources()
		}
	}()
	if err := d.checkPrivilege(); err != nil {
		return err
	}
	if err := d.openCore(); err != nil {
		return err
	}
	d.loadFinished()
	// Private copies a crash left in the spool are of no use: payloads are
	// settled again from the folder.
	if old, err := filepath.Glob(d.home.Path("spool", "*")); err == nil {
		for _, f := range old {
			os.Remove(f)
		}
	}
	d.folder.SweepStaging(0)
	for id := range d.agents() {
		d.folder.SweepTemps(bridge.ToAgentDir(d.me, id), 0)
		d.followRotations(id)
	}
	if err := d.publishCatalog(); err != nil {
		d.log.Warn("publish catalog", "err", err)
	}
	for i := 0; i < evalWorkers; i++ {
		d.wg.Add(1)
		go d.worker()
	}
	if err := d.recover(); err != nil {
		return fmt.Errorf("serve: recover: %w", err)
	}
	root := filepath.Join(d.home.Config.Folder, bridge.ToHostRoot(d.me))
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	// Only the trusted agents' directories are watched, one level deep: a
	// folder writer creating subdirectories or untrusted agent directories
	// costs the daemon nothing.
	skip := func(rel string, isDir bool) bool {
		if !isDir {
			return false
		}
		agent, rest, deeper := strings.Cut(rel, "/")
		return deeper || rest != "" || d.agents()[agent] == nil
	}
	// No debounce: every millisecond of quiet waited for is a millisecond of
	// round trip. A request is two files published back to back; the
	// payload's event alone starts nothing (no manifest yet), and whatever
	// arrives while the loop is busy comes in its next batch.
	d.watcher, err = syncsafe.NewWatcher(root, syncsafe.WatchOptions{Rescan: d.opt.Rescan, Skip: skip, Debounce: -1})
	if err != nil {
		return fmt.Errorf("serve: watch %s: %w", root, err)
	}
	stop := make(chan struct{})
	d.stopCtl = stop
	d.wg.Add(1)
	go func() { defer d.wg.Done(); d.controlLoop(stop) }()
	d.audit.log(AuditEvent{Event: "start", Detail: "policy " + d.policy.SHA256})
	if d.policyChanged() {
		d.notify("", bridge.Note{Event: "policy-changed", Text: "the host's policy changed; `bridge ops` shows what you may run now"})
	}
	d.notify("", bridge.Note{Event: "started", Text: "the host is serving requests again"})
	d.log.Info("serving", "host", d.me, "folder", d.home.Config.Folder, "agents", len(d.agents()), "policy", d.policy.SHA256[:12])
	return nil
}

// openCore takes the lock and opens policy, ledger, audit log and folder:
// everything but recovery and watching.
func (d *Daemon) openCore() (err error) {
	defer func() {
		if err != nil {
			d.closeResources()
		}
	}()
	if d.lock, err = syncsafe.Lock(d.home.Path("serve.lock")); err != nil {
		return bridge.WithHint(fmt.Errorf("serve: %w", err), "another `bridge serve` is running on %s; stop it first", d.home.Dir)
	}
	if d.policy, err = policy.Load(d.home.Path(bridge.PolicyName)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return bridge.WithHint(fmt.Errorf("serve: no policy: %w", err), "write %s (see `bridge policy check` and docs/CLI.md); without a policy nothing may run", d.home.Path(bridge.PolicyName))
		}
		return fmt.Errorf("serve: %w", err)
	}
	if d.ledger, err = ledger.Open(d.home.Path("ledger")); err != nil {
		var le *ledger.Error
		if errors.As(err, &le) && le.Hint != "" {
			return bridge.WithHint(err, "%s", le.Hint)
		}
		return err
	}
	if d.audit, err = openAudit(d.home.Path("audit.log")); err != nil {
		return err
	}
	d.redactor = newRedactor(d.policy.Redaction())
	d.audit.redact = d.redactor.string
	for _, dir := range []string{"spool", "results"} {
		if err := os.MkdirAll(d.home.Path(dir), 0o700); err != nil {
			return err
		}
	}
	if d.folder, err = d.home.OpenFolder(); err != nil {
		return err
	}
	if err := d.loadAgents(); err != nil {
		return err
	}
	if err := d.loadOwnKeys(); err != nil {
		return err
	}
	d.runCtx, d.abortRun = context.WithCancel(context.Background())
	return nil
}

func (d *Daemon) loadAgents() error {
	peers, err := d.home.Peers()
	if err != nil {
		return err
	}
	agents := map[string]*agentKeys{}
	for _, p := range peers {
		if p.Role != "agent" {
			continue
		}
		// The record is checked against the bundle it was made from: never a
		// lookup by name, which another record could shadow.
		if err := p.Check(); err != nil {
			return fmt.Errorf("trusted agent: %w", err)
		}
		agents[p.ID] = &agentKeys{name: p.Name, peer: p}
	}
	d.agentsP.Store(&agents)
	return nil
}

// loadOwnKeys reads the host's own identities, if the home's bundle changed
// since they were last read (a `bridge keys rotate` while serving).
func (d *Daemon) loadOwnKeys() error {
	fi, err := os.Stat(d.home.Path(bridge.BundleName))
	if err != nil {
		return err
	}
	if o := d.own(); o != nil && o.stamp.Equal(fi.ModTime()) {
		return nil
	}
	h, err := bridge.OpenHome(d.home.Dir)
	if err != nil {
		return err
	}
	all, err := h.OwnKeys()
	if err != nil {
		return err
	}
	prev := d.own()
	d.ownP.Store(&ownKeys{current: h.Identity(), all: all, stamp: fi.ModTime()})
	if prev != nil && prev.current.SignKid() != h.Identity().SignKid() && d.folder != nil {
		d.notify("", bridge.Note{Event: "key-rotated", Text: "the host rotated its keys; agents follow the rotation statement by themselves"})
		if err := d.publishCatalog(); err != nil {
			d.log.Warn("publish catalog", "err", err)
		}
	}
	if len(all) > 1 {
		d.log.Info("own keys", "current", h.Identity().SignKid(), "kept", len(all)-1)
	}
	return nil
}

// followRotations applies the rotation statements an agent published.
func (d *Daemon) followRotations(agent string) {
	events, err := d.home.FollowRotations(d.folder, agent, bridge.ToHostDir(d.me, agent))
	if err != nil {
		d.log.Warn("follow rotations", "agent", agent, "err", err)
	}
	changed := false
	for _, ev := range events {
		changed = changed || ev.Result == "accepted"
		// A statement that stays in the folder is read again by every
		// rescan: say why it is refused or ignored once, not every time.
		if ev.Result != "accepted" && !d.firstTime(fmt.Sprintf("rotation:%s:%d:%s", agent, ev.Seq, ev.Result)) {
			continue
		}
		d.audit.log(AuditEvent{Event: "rotation", Agent: agent, Detail: fmt.Sprintf("seq %d: %s", ev.Seq, ev.Result)})
		d.log.Info("agent key rotation", "agent", ev.Peer, "seq", ev.Seq, "result", ev.Result)
	}
	if changed {
		if err := d.loadAgents(); err != nil {
			d.log.Error("reload agents", "err", err)
		}
		if err := d.publishCatalog(); err != nil {
			d.log.Warn("publish catalog", "err", err)
		}
	}
}

// followBatchRotations follows the rotation statements of every trusted
// agent with one in paths, once per agent however many it has (each
// following reads all of them), and returns the other paths in order.
func (d *Daemon) followBatchRotations(paths []string) []string {
	var agents []string
	rest := paths[:0:0]
	for _, p := range paths {
		if strings.HasSuffix(p, ".rotation") {
			agent, name, ok := strings.Cut(p, "/")
			if _, isRot := bridge.ParseRotationName(name); ok && isRot && !strings.Contains(name, "/") && d.agents()[agent] != nil {
				if !slices.Contains(agents, agent) {
					agents = append(agents, agent)
				}
				continue
			}
		}
		rest = append(rest, p)
	}
	for _, agent := range agents {
		d.followRotations(agent)
	}
	return rest
}

// publishCatalog publishes, for each trusted agent, the signed list of the
// ops that agent may run, so it can discover what to ask before it asks.
func (d *Daemon) publishCatalog() error {
	all := d.policy.Catalog()
	var errs []error
	for agentID, keys := range d.agents() {
		allowed := d.policy.AgentOps(keys.name)
		ops := []policy.OpInfo{}
		for _, op := range all {
			if slices.Contains(allowed, op.Name) {
				ops = append(ops, op)
			}
		}
		signed, err := bridge.SignCatalog(bridge.Catalog{Host: d.me, Agent: agentID, Policy: d.policy.SHA256, Ops: ops}, d.own().current)
		if err != nil {
			return err
		}
		errs = append(errs, d.folder.PublishReplace(bridge.CatalogPath(d.me, agentID), bridge.WriteBytes(signed), syncsafe.WithMode(0o644)))
	}
	return errors.Join(errs...)
}

// Run serves until ctx is cancelled: it turns watcher batches into
// evaluations. It returns after in-flight work drained (see Close).
func (d *Daemon) Run(ctx context.Context) error {
	for {
		batch, err := d.watcher.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if batch.Full {
			if err := d.loadOwnKeys(); err != nil {
				d.log.Error("reload own keys", "err", err)
			}
		}
		// Rotation statements first: a request signed by an agent's new key
		// may arrive in the same batch as the statement that introduces it.
		paths := d.followBatchRotations(batch.Paths)
		if batch.Full {
			d.dispatchFull(paths)
			d.refuseIrregular(batch.Irregular)
			continue
		}
		for _, p := range paths {
			d.dispatch(p)
		}
	}
}

// startScanDone reports whether the start-up scan was dispatched and the
// evaluations it queued were taken (long runs may go on).
func (d *Daemon) startScanDone() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rescans > 0 && len(d.queue) == 0
}

// refuseIrregular audits entries at request names that are not regular files
// (symlinks, FIFOs, directories, devices), from a full walk's list of them:
// the watcher reports regular files only, so without this they would be
// ignored without a reason.
func (d *Daemon) refuseIrregular(paths []string) {
	for _, p := range paths {
		agent, name, ok := strings.Cut(p, "/")
		if !ok || strings.Contains(name, "/") || d.agents()[agent] == nil {
			continue
		}
		if _, _, ok := bridge.ParseToHostName(name); !ok {
			continue
		}
		rel := bridge.ToHostDir(d.me, agent) + "/" + name
		if fi, err := d.folder.Lstat(rel); err == nil && !fi.Mode().IsRegular() {
			d.refuseFile(rel, fmt.Errorf("%w: %v", syncsafe.ErrNotRegular, fi.Mode().Type()))
		}
	}
}

// Close stops watching and waits for running work until ctx is done; then
// it cancels running operations (the signal ladder) and waits for them to
// publish their results.
func (d *Daemon) Close(ctx context.Context) error {
	if d.watcher != nil {
		d.watcher.Close()
	}
	if d.stopCtl != nil {
		close(d.stopCtl)
		d.stopCtl = nil
	}
	d.mu.Lock()
	d.closing = true
	d.cond.Broadcast()
	d.mu.Unlock()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		d.log.Warn("aborting running operations")
		if d.abortRun != nil {
			d.abortRun()
		}
		<-done
	}
	if d.ledger != nil {
		if err := d.saveFinished(); err != nil {
			d.log.Warn("save the finished-requests cache", "err", err)
		}
	}
	if d.audit != nil {
		d.audit.log(AuditEvent{Event: "stop"})
	}
	if d.folder != nil && d.watcher != nil {
		d.notify("", bridge.Note{Event: "stopping", Text: "the host daemon stopped; requests wait in the folder until it is back"})
	}
	return d.closeResources()
}

func (d *Daemon) closeResources() error {
	var errs []error
	if d.ledger != nil {
		errs = append(errs, d.ledger.Close())
		d.ledger = nil
	}
	if d.folder != nil {
		errs = append(errs, d.folder.Close())
		d.folder = nil
	}
	if d.audit != nil {
		errs = append(errs, d.audit.close())
		d.audit = nil
	}
	if d.lock != nil {
		errs = append(errs, d.lock.Unlock())
		d.lock = nil
	}
	return errors.Join(errs...)
}

// dispatch routes one path (relative to to-host/) from the watcher.
// Rotation statements were taken out of the batch before
// (followBatchRotations), and a full batch's finished requests are checked
// by dispatchFull.
func (d *Daemon) dispatch(p string) {
	agent, name, ok := strings.Cut(p, "/")
	if !ok || strings.Contains(name, "/") {
		return
	}
	keys := d.agents()[agent]
	if keys == nil {
		d.noteOnce("agent:"+agent, "ignoring a directory of an agent nobody trusted", "agent", agent)
		return
	}
	id, ext, ok := bridge.ParseToHostName(name)
	if !ok {
		if name != bridge.AgentBundleName {
			c := syncsafe.Classify(name)
			d.noteOnce("file:"+p, "ignoring a file that is not ours", "file", p, "kind", c.Kind.String(), "client", c.Client)
		}
		return
	}
	switch ext {
	case bridge.ExtManifest, bridge.ExtPayload:
		d.schedule(agent, id)
	case bridge.ExtCancel:
		d.handleCancel(agent, id)
	case bridge.ExtAck:
		// The periodic collection looks at a finished request only if it
		// has an ack (or is past its retention or expiry, gc.go). Only
		// finished keys are remembered, so the set is no larger than the
		// finished one; an ack seen before its request finished is seen
		// again by the next full walk.
		key := agent + "/" + id
		d.mu.Lock()
		if _, ok := d.finished[key]; ok {
			d.acks[key] = true
		}
		d.mu.Unlock()
	}
}

func (d *Daemon) noteOnce(key, msg string, args ...any) {
	if d.firstTime(key) {
		d.log.Info(msg, args...)
	}
}

// maxNoted bounds the log-once set: names come from the folder, so a
// writer could otherwise grow it forever.
const maxNoted = 100_000

// firstTime reports whether key was not noted before. When the set is full
// it forgets a random half (map order), not all of it: a folder with more
// refused files than the bound has some of them logged again by a rescan,
// not every one by every rescan.
func (d *Daemon) firstTime(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.noted[key] {
		return false
	}
	if len(d.noted) >= maxNoted {
		for k := range d.noted {
			if len(d.noted) <= maxNoted/2 {
				break
			}
			delete(d.noted, k)
		}
	}
	d.noted[key] = true
	return true
}

// stamp identifies a published result file cheaply: a rescan compares it
// instead of reading and verifying the file again.
type stamp struct {
	size, outSize   int64
	mtime, outMtime time.Time
}

// resultStamp covers both files of a published result: losing or changing
// either makes a rescan look at the request again.
func (d *Daemon) resultStamp(agent, id string) stamp {
	return d.resultStamps([]string{agent + "/" + id})[0]
}

// resultStamps is resultStamp of many "agent/id" keys, each agent's result
// directory opened once for a run of its keys.
func (d *Daemon) resultStamps(keys []string) []stamp {
	out := make([]stamp, len(keys))
	for i := 0; i < len(keys); {
		agent, _, _ := strings.Cut(keys[i], "/")
		j := i
		var names []string
		for ; j < len(keys) && strings.HasPrefix(keys[j], agent+"/"); j++ {
			id := keys[j][len(agent)+1:]
			names = append(names, id+"."+bridge.ExtResult, id+"."+bridge.ExtOutput)
		}
		fis, err := d.folder.LstatIn(bridge.ToAgentDir(d.me, agent), names)
		for k := i; k < j; k++ {
			st := stamp{size: -1, outSize: -1}
			if err == nil {
				if fi := fis[2*(k-i)]; fi != nil {
					st.size, st.mtime = fi.Size(), fi.ModTime()
				}
				if fi := fis[2*(k-i)+1]; fi != nil {
					st.outSize, st.outMtime = fi.Size(), fi.ModTime()
				}
			}
			out[k] = st
		}
		i = j
	}
	return out
}

// markFinished records that key is terminal and its result is in place:
// the stamp is taken only after the folder's bytes were seen to equal the
// private copy, so a file swapped in meanwhile is never taken for ours.
func (d *Daemon) markFinished(agent, id string) {
	st := d.resultStamp(agent, id)
	want, err := os.ReadFile(d.home.Path("results", agent, id+"."+bridge.ExtResult))
	if err == nil {
		have, err := d.folder.ReadFile(bridge.ResultPath(d.me, agent, id, bridge.ExtResult), bcrypto.KindResult.MaxSize())
		if err != nil || !bytes.Equal(have, want) || d.resultStamp(agent, id) != st {
			return
		}
	}
	d.mu.Lock()
	d.finished[agent+"/"+id] = st
	d.mu.Unlock()
}
