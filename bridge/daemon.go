package bridge

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
	"strings"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/policy"
	"github.com/syncbridge/bridge/bridge/runner"
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
}

// Daemon is the host side: it watches the agents' request trees, admits
// complete and authentic requests, runs what the policy allows and publishes
// sealed results. Lifecycle: NewDaemon, Open, Run, Close.
type Daemon struct {
	home    *Home
	opt     DaemonOptions
	log     *slog.Logger
	id      *bcrypto.Identity
	me      string
	folder  *syncsafe.Folder
	ledger  *ledger.Ledger
	policy  *policy.Policy
	lock    *syncsafe.Lockfile
	audit   *auditLog
	watcher *syncsafe.Watcher
	agents  map[string]*agentKeys // by agent id

	mu       sync.Mutex
	active   map[string]bool               // keys being evaluated or run
	dirty    map[string]bool               // keys that changed while active
	finished map[string]bool               // keys known terminal with a published result
	cancels  map[string]context.CancelFunc // running keys
	noted    map[string]bool               // log-once set for refused files
	sems     map[string]chan struct{}      // per-op concurrency
	wg       sync.WaitGroup

	runCtx   context.Context // parent of every running op; cancelled on abort
	abortRun context.CancelFunc
	stopCtl  chan struct{} // stops the control loop
}

// agentKeys is what the host trusts for one agent.
type agentKeys struct {
	name   string
	sign   [][]byte
	boxPub map[string][]byte // box kid → public key
}

// NewDaemon prepares a daemon for a host home. Nothing is opened yet.
func NewDaemon(home *Home, opt DaemonOptions) (*Daemon, error) {
	if home.Config.Role != "host" {
		return nil, withHint(errors.New("serve: this home belongs to an agent"), "run `bridge serve` with a host's --home")
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
		opt.Skew = DefaultSkew
	}
	if opt.Env == nil {
		opt.Env = os.LookupEnv
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Daemon{
		home: home, opt: opt, log: opt.Logger, id: home.Identity(), me: home.Config.ID,
		active: map[string]bool{}, dirty: map[string]bool{}, finished: map[string]bool{},
		cancels: map[string]context.CancelFunc{}, noted: map[string]bool{}, sems: map[string]chan struct{}{},
	}, nil
}

// Open takes the single-instance lock, opens the ledger, the policy and the
// folder, recovers what a crash interrupted, and starts watching.
func (d *Daemon) Open() (err error) {
	defer func() {
		if err != nil {
			d.closeResources()
		}
	}()
	if err := d.openCore(); err != nil {
		return err
	}
	// Private copies a crash left in the spool are of no use: payloads are
	// settled again from the folder.
	if old, err := filepath.Glob(d.home.Path("spool", "*")); err == nil {
		for _, f := range old {
			os.Remove(f)
		}
	}
	d.folder.SweepStaging(0)
	for id := range d.agents {
		d.folder.SweepTemps(ToAgentDir(d.me, id), 0)
	}
	if err := d.publishCatalog(); err != nil {
		d.log.Warn("publish catalog", "err", err)
	}
	if err := d.recover(); err != nil {
		return fmt.Errorf("serve: recover: %w", err)
	}
	root := filepath.Join(d.home.Config.Folder, HostDir(d.me), toHostDir)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	d.watcher, err = syncsafe.NewWatcher(root, syncsafe.WatchOptions{Rescan: d.opt.Rescan})
	if err != nil {
		return fmt.Errorf("serve: watch %s: %w", root, err)
	}
	stop := make(chan struct{})
	d.stopCtl = stop
	d.wg.Add(1)
	go func() { defer d.wg.Done(); d.controlLoop(stop) }()
	d.audit.log(AuditEvent{Event: "start", Detail: "policy " + d.policy.SHA256})
	d.log.Info("serving", "host", d.me, "folder", d.home.Config.Folder, "agents", len(d.agents), "policy", d.policy.SHA256[:12])
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
		return withHint(fmt.Errorf("serve: %w", err), "another `bridge serve` is running on %s; stop it first", d.home.Dir)
	}
	if d.policy, err = policy.Load(d.home.Path(PolicyName)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return withHint(fmt.Errorf("serve: no policy: %w", err), "write %s (see `bridge policy check` and docs/CLI.md); without a policy nothing may run", d.home.Path(PolicyName))
		}
		return fmt.Errorf("serve: %w", err)
	}
	if d.ledger, err = ledger.Open(d.home.Path("ledger")); err != nil {
		var le *ledger.Error
		if errors.As(err, &le) && le.Hint != "" {
			return withHint(err, "%s", le.Hint)
		}
		return err
	}
	if d.audit, err = openAudit(d.home.Path("audit.log")); err != nil {
		return err
	}
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
	d.runCtx, d.abortRun = context.WithCancel(context.Background())
	return nil
}

func (d *Daemon) loadAgents() error {
	peers, err := d.home.Peers()
	if err != nil {
		return err
	}
	d.agents = map[string]*agentKeys{}
	for _, p := range peers {
		if p.Role != "agent" {
			continue
		}
		_, b, err := d.home.Peer(p.ID)
		if err != nil {
			return err
		}
		d.agents[p.ID] = &agentKeys{name: p.Name, sign: [][]byte{b.SignPub}, boxPub: map[string][]byte{b.BoxKid(): b.BoxPub}}
	}
	return nil
}

// publishCatalog publishes the signed list of ops agents may discover.
func (d *Daemon) publishCatalog() error {
	body, err := bcrypto.EncodeBody(Catalog{V: 1, Host: d.me, Policy: d.policy.SHA256, Ops: d.policy.Catalog()})
	if err != nil {
		return err
	}
	signed, err := bcrypto.Sign(bcrypto.KindCatalog, body, d.id)
	if err != nil {
		return err
	}
	return d.folder.PublishReplace(HostCatalogPath(d.me), writeBytes(signed), syncsafe.WithMode(0o644))
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
		for _, p := range batch.Paths {
			d.dispatch(p, batch.Full)
		}
		if batch.Full {
			d.refuseIrregular()
		}
	}
}

// refuseIrregular audits entries at request names that are not regular files
// (symlinks, FIFOs, directories, devices): the watcher reports regular files
// only, so without this they would be ignored without a reason.
func (d *Daemon) refuseIrregular() {
	for agent := range d.agents {
		dir := ToHostDir(d.me, agent)
		entries, err := d.folder.List(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if _, _, ok := ParseToHostName(e.Name); ok && e.Type != 0 {
				d.refuseFile(dir+"/"+e.Name, fmt.Errorf("%w: %v", syncsafe.ErrNotRegular, e.Type))
			}
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
	if d.audit != nil {
		d.audit.log(AuditEvent{Event: "stop"})
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
func (d *Daemon) dispatch(p string, full bool) {
	agent, name, ok := strings.Cut(p, "/")
	if !ok || strings.Contains(name, "/") {
		return
	}
	keys := d.agents[agent]
	if keys == nil {
		d.noteOnce("agent:"+agent, "ignoring a directory of an agent nobody trusted", "agent", agent)
		return
	}
	id, ext, ok := ParseToHostName(name)
	if !ok {
		if name != agentBundleName {
			if _, isRot := ParseRotationName(name); !isRot {
				c := syncsafe.Classify(name)
				d.noteOnce("file:"+p, "ignoring a file that is not ours", "file", p, "kind", c.Kind.String(), "client", c.Client)
			}
		}
		return
	}
	switch ext {
	case ExtManifest, ExtPayload:
		key := agent + "/" + id
		if full {
			// A rescan need not re-verify finished requests; it only checks
			// that their result is still there (a lost result is re-published).
			d.mu.Lock()
			known := d.finished[key]
			d.mu.Unlock()
			if known {
				if _, err := d.folder.Lstat(ResultPath(d.me, agent, id, ExtResult)); err == nil {
					return
				}
			}
		}
		d.schedule(agent, id)
	case ExtCancel:
		d.handleCancel(agent, id)
	case ExtAck:
		// Acks let the host collect results; collection lands with `bridge gc`.
	}
}

func (d *Daemon) noteOnce(key, msg string, args ...any) {
	d.mu.Lock()
	seen := d.noted[key]
	d.noted[key] = true
	d.mu.Unlock()
	if !seen {
		d.log.Info(msg, args...)
	}
}

// schedule evaluates a request in its own goroutine; a request that changes
// while it is being evaluated is evaluated once more afterwards.
func (d *Daemon) schedule(agent, id string) {
	key := agent + "/" + id
	d.mu.Lock()
	if d.active[key] {
		d.dirty[key] = true
		d.mu.Unlock()
		return
	}
	d.active[key] = true
	d.mu.Unlock()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			d.evaluate(agent, id)
			d.mu.Lock()
			if !d.dirty[key] {
				delete(d.active, key)
				d.mu.Unlock()
				return
			}
			delete(d.dirty, key)
			d.mu.Unlock()
		}
	}()
}

// job is one authentic request on its way through the pipeline.
type job struct {
	agent    string
	keys     *agentKeys
	req      *Request
	manifest []byte
	sha      string // of the manifest file
	key      string
}

func (d *Daemon) check(agent string, keys *agentKeys) RequestCheck {
	return RequestCheck{
		Host: d.me, HostBoxKids: []string{d.id.BoxKid()}, Agent: agent, AgentKeys: keys.sign,
		AgentBoxKid: func(kid string) bool { _, ok := keys.boxPub[kid]; return ok },
		Now:         d.opt.Now(), Skew: d.opt.Skew,
	}
}

// evaluate runs the pipeline of SPEC §8 for one request id. It is safe to
// call any number of times (invariant 6): the ledger decides what happens.
func (d *Daemon) evaluate(agent, id string) {
	keys := d.agents[agent]
	key := agent + "/" + id
	ent, err := d.ledger.Get(key)
	exists := err == nil
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		d.log.Error("ledger read", "key", key, "err", err)
		return
	}
	if exists && (ent.State.Terminal() || ent.State == ledger.StateUncertain) {
		// Never run again (invariant 4); but a manifest under this id with
		// other content is a forgery or a bug, and is reported as such.
		mpath := RequestPath(d.me, agent, id, ExtManifest)
		if data, err := d.folder.ReadFile(mpath, bcrypto.KindRequest.MaxSize()); err == nil && SHA256Hex(data) != ent.ManifestSHA256 {
			d.refuseFile(mpath, fmt.Errorf("%w: %s was recorded with another manifest", ErrReplay, id))
		}
		d.duplicate(ent)
		return
	}
	if exists && (ent.State.InFlight() || ent.State == ledger.StateAwaitingApproval) {
		return // a worker owns it, or a human does
	}
	mpath := RequestPath(d.me, agent, id, ExtManifest)
	data, err := d.folder.ReadFile(mpath, bcrypto.KindRequest.MaxSize())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return // the payload came first; the manifest will follow
	case errors.Is(err, syncsafe.ErrTooLarge), errors.Is(err, syncsafe.ErrNotRegular):
		d.refuseFile(mpath, err)
		return
	case err != nil:
		d.log.Warn("read manifest", "file", mpath, "err", err)
		return
	}
	j := &job{agent: agent, keys: keys, manifest: data, sha: SHA256Hex(data), key: key}
	if exists && ent.ManifestSHA256 != j.sha {
		d.refuseFile(mpath, fmt.Errorf("%w: %s was recorded with another manifest", ErrReplay, id))
		return
	}
	req, err := OpenRequest(data, id, d.check(agent, keys))
	if err != nil && req == nil {
		if errors.Is(err, bcrypto.ErrTruncated) {
			return // still arriving
		}
		d.refuseFile(mpath, err)
		return
	}
	j.req = req
	if !exists {
		first := ledger.StateSeen
		ent, _, err = d.ledger.Admit(ledger.Entry{Key: key, Agent: agent, ID: id, State: first, ManifestSHA256: j.sha,
			FirstSeen: d.opt.Now(), Expires: time.Unix(req.Expires, 0)})
		if errors.Is(err, ledger.ErrConflict) {
			d.refuseFile(mpath, fmt.Errorf("%w: %s", ErrReplay, id))
			return
		} else if err != nil {
			d.log.Error("ledger admit", "key", key, "err", err)
			return
		}
		if ent.State.Terminal() {
			d.duplicate(ent)
			return
		}
		d.audit.log(AuditEvent{Event: "seen", Agent: agent, ID: id})
	}
	if err != nil { // authentic but refused for its times
		status := StatusRejected
		if errors.Is(err, ErrExpired) {
			status = StatusExpired
		}
		d.finish(j, Receipt{Status: status, Reason: Reason(err), Detail: err.Error()})
		return
	}
	now := d.opt.Now()
	if now.Sub(ent.FirstSeen) > d.opt.MaxQueueAge {
		d.finish(j, Receipt{Status: StatusExpired, Reason: "expired", Detail: fmt.Sprintf("waited on the host for more than %s", d.opt.MaxQueueAge)})
		return
	}
	if d.cancelled(agent, id) {
		d.finish(j, Receipt{Status: StatusCancelled, Reason: "cancelled", Detail: "cancelled before it ran"})
		return
	}
	spool, err := d.settle(j)
	if err != nil {
		if ent.State == ledger.StateSeen {
			if _, err := d.ledger.Transition(key, []ledger.State{ledger.StateSeen}, ledger.StatePending, nil); err != nil {
				d.log.Warn("ledger", "key", key, "err", err)
			}
		}
		if now.Sub(ent.FirstSeen) > d.opt.PendingTimeout {
			d.finish(j, Receipt{Status: StatusRejected, Reason: "incomplete", Detail: fmt.Sprintf("payload not complete after %s: %v", d.opt.PendingTimeout, err)})
		} else {
			d.log.Debug("payload pending", "key", key, "err", err)
		}
		return
	}
	defer os.Remove(spool)
	d.admit(j, spool, false)
}

// settle copies the payload into the private spool if it matches the pin.
func (d *Daemon) settle(j *job) (string, error) {
	// A spool file of its own per evaluation: two evaluations of one id
	// (harmless by design, invariant 6) must not share a copy.
	f, err := os.CreateTemp(d.home.Path("spool"), j.req.ID+"-*.payload")
	if err != nil {
		return "", err
	}
	spool := f.Name()
	defer f.Close()
	err = syncsafe.Settle(d.folder, RequestPath(d.me, j.agent, j.req.ID, ExtPayload), j.req.Payload.Len, j.req.Payload.Digest(), f)
	if err != nil {
		os.Remove(spool)
		return "", err
	}
	return spool, nil
}

// admit decrypts the spooled payload, applies the policy, claims the id and
// runs it. resume is set when crash recovery re-runs an idempotent op that
// was already running.
func (d *Daemon) admit(j *job, spool string, resume bool) {
	in, err := os.Open(spool)
	if err != nil {
		d.log.Error("open spool", "err", err)
		return
	}
	stdinPath := spool + ".stdin"
	stdin, err := os.OpenFile(stdinPath, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		in.Close()
		d.log.Error("spool stdin", "err", err)
		return
	}
	defer os.Remove(stdinPath)
	defer stdin.Close()
	call, err := OpenCall(in, j.req, d.id, stdin)
	in.Close()
	if err != nil {
		d.finish(j, Receipt{Status: StatusRejected, Reason: Reason(err), Detail: err.Error()})
		return
	}
	if call.Op == PingOp {
		d.ping(j)
		return
	}
	inv, err := d.policy.Render(j.keys.name, call.Op, call.Args, policy.RenderContext{Env: d.opt.Env, Vars: map[string]string{"request_id": j.req.ID}})
	if err != nil {
		rc := Receipt{Status: StatusRejected, Op: call.Op, Detail: err.Error(), PolicySHA256: d.policy.SHA256}
		switch {
		case errors.Is(err, policy.ErrNotAllowed), errors.Is(err, policy.ErrUnknownOp):
			rc.Reason = "not-allowed"
		case errors.Is(err, policy.ErrInvalidArg):
			rc.Reason = "bad-argument"
		default:
			rc.Status, rc.Reason = StatusFailed, "host-error"
		}
		d.finish(j, rc)
		return
	}
	if inv.Approve && !resume {
		if _, err := d.ledger.Transition(j.key, []ledger.State{ledger.StateSeen, ledger.StatePending}, ledger.StateAwaitingApproval,
			func(e *ledger.Entry) { e.Op = inv.Op }); err != nil {
			d.log.Warn("ledger", "key", j.key, "err", err)
		}
		d.audit.log(AuditEvent{Event: "awaiting-approval", Agent: j.agent, ID: j.req.ID, Op: inv.Op})
		return
	}
	release := d.acquire(inv.Op, inv.Concurrency)
	defer release()
	if !resume {
		_, err = d.ledger.Transition(j.key, []ledger.State{ledger.StateSeen, ledger.StatePending}, ledger.StateClaimed,
			func(e *ledger.Entry) { e.Op, e.Idempotent = inv.Op, inv.Idempotent })
		if err != nil {
			d.log.Debug("claim lost", "key", j.key, "err", err)
			return
		}
		d.audit.log(AuditEvent{Event: "claimed", Agent: j.agent, ID: j.req.ID, Op: inv.Op})
		if d.cancelled(j.agent, j.req.ID) {
			d.finish(j, Receipt{Status: StatusCancelled, Reason: "cancelled", Op: inv.Op, Detail: "cancelled before it ran"})
			return
		}
	}
	from := []ledger.State{ledger.StateClaimed}
	if resume {
		from = []ledger.State{ledger.StateRunning}
	}
	// Ledger before effect (invariant 3): running is durable before the
	// process exists.
	if _, err = d.ledger.Transition(j.key, from, ledger.StateRunning, nil); err != nil {
		d.log.Error("ledger", "key", j.key, "err", err)
		return
	}
	if _, err := stdin.Seek(0, io.SeekStart); err != nil {
		d.log.Error("spool stdin", "err", err)
		return
	}
	ctx, cancel := context.WithCancel(d.runCtx)
	d.mu.Lock()
	d.cancels[j.key] = cancel
	d.mu.Unlock()
	d.audit.log(AuditEvent{Event: "run", Agent: j.agent, ID: j.req.ID, Op: inv.Op, Detail: inv.String()})
	out := runner.Run(ctx, runner.Spec{
		Argv: inv.Argv, Dir: inv.Dir, Env: inv.Env, Stdin: stdin, Timeout: inv.Timeout,
		MaxOutput: inv.MaxOutput, Grace: d.opt.Grace,
	})
	d.mu.Lock()
	delete(d.cancels, j.key)
	d.mu.Unlock()
	cancel()
	rc := Receipt{
		Status: StatusDone, Op: inv.Op, Argv: inv.Argv, PolicySHA256: d.policy.SHA256,
		ExitCode: out.ExitCode, Signal: out.Signal, TimedOut: out.TimedOut,
		Started: out.Started.UnixMilli(), Finished: out.Finished.UnixMilli(),
		StdoutTotal: out.Stdout.Total, StdoutTruncated: out.Stdout.Truncated,
		StderrTotal: out.Stderr.Total, StderrTruncated: out.Stderr.Truncated,
	}
	switch {
	case out.StartErr != nil && !out.Cancelled:
		rc.Status, rc.Reason, rc.Detail = StatusFailed, "start-failed", out.StartErr.Error()
	case out.Cancelled:
		rc.Status, rc.Reason = StatusCancelled, "cancelled"
		if d.runCtx.Err() != nil {
			rc.Status, rc.Reason, rc.Detail = StatusFailed, "host-shutdown", "the host daemon was stopped while the op ran"
		}
	case out.TimedOut:
		rc.Reason = "timeout"
		rc.Detail = fmt.Sprintf("timed out after %s", inv.Timeout)
	}
	if len(out.Notes) > 0 && rc.Detail == "" {
		rc.Detail = strings.Join(out.Notes, "; ")
	}
	d.finishWithOutput(j, rc, out.Stdout.Data, out.Stderr.Data)
}

// acquire takes a slot of op's concurrency limit (0 = unlimited).
func (d *Daemon) acquire(op string, limit int) func() {
	if limit <= 0 {
		return func() {}
	}
	d.mu.Lock()
	sem := d.sems[op]
	if sem == nil || cap(sem) != limit {
		sem = make(chan struct{}, limit)
		d.sems[op] = sem
	}
	d.mu.Unlock()
	sem <- struct{}{}
	return func() { <-sem }
}

var statusState = map[string]ledger.State{
	StatusDone: ledger.StateDone, StatusFailed: ledger.StateFailed, StatusRejected: ledger.StateRejected,
	StatusExpired: ledger.StateExpired, StatusCancelled: ledger.StateCancelled, StatusUncertain: ledger.StateUncertain,
}

func (d *Daemon) finish(j *job, rc Receipt) {
	d.finishWithOutput(j, rc, nil, nil)
}

// finishWithOutput publishes the result and only then records the final
// state: a crash in between leaves the result published and the ledger not
// final, and the next evaluation adopts the published result (invariant 3).
func (d *Daemon) finishWithOutput(j *job, rc Receipt, stdout, stderr []byte) {
	if rc.PolicySHA256 == "" && d.policy != nil {
		rc.PolicySHA256 = d.policy.SHA256
	}
	resSHA, status, err := d.publishResult(j, rc, stdout, stderr)
	if err != nil {
		d.log.Error("publish result", "key", j.key, "err", err)
		return
	}
	to := statusState[status]
	var from []ledger.State
	for _, s := range []ledger.State{ledger.StateSeen, ledger.StatePending, ledger.StateAwaitingApproval, ledger.StateClaimed, ledger.StateRunning, ledger.StateUncertain} {
		if ledger.CanTransition(s, to) {
			from = append(from, s)
		}
	}
	if _, err := d.ledger.Transition(j.key, from, to, func(e *ledger.Entry) {
		e.ResultSHA256, e.Reason = resSHA, rc.Reason
		if rc.Op != "" {
			e.Op = rc.Op
		}
	}); err != nil {
		d.log.Error("ledger", "key", j.key, "err", err)
		return
	}
	d.mu.Lock()
	d.finished[j.key] = true
	d.mu.Unlock()
	ev := AuditEvent{Event: "result", Agent: j.agent, ID: j.req.ID, Op: rc.Op, Status: status, Reason: rc.Reason, Detail: rc.Detail}
	if status == StatusDone {
		code := rc.ExitCode
		ev.Exit = &code
	}
	d.audit.log(ev)
	d.log.Info("result", "agent", j.keys.name, "id", j.req.ID, "op", rc.Op, "status", status, "reason", rc.Reason, "exit", rc.ExitCode)
}

// publishResult seals the result into private copies under results/ (the
// output first, the manifest last, so a manifest copy implies a complete
// pair), then publishes both into the folder. If copies exist from an
// earlier attempt, they are published instead of new ones: one id has one
// result. It returns the result manifest's SHA-256 and its status.
func (d *Daemon) publishResult(j *job, rc Receipt, stdout, stderr []byte) (string, string, error) {
	dir := d.home.Path("results", j.agent)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	outCopy := filepath.Join(dir, j.req.ID+"."+ExtOutput)
	resCopy := filepath.Join(dir, j.req.ID+"."+ExtResult)
	manifest, err := os.ReadFile(resCopy)
	if errors.Is(err, fs.ErrNotExist) {
		var buf bytes.Buffer
		manifest, err = SealResult(&buf, NewResult{
			Host: d.id, HostID: d.me, AgentBoxPub: j.keys.boxPub[j.req.ReplyBoxKid], Request: j.req, RequestSHA: j.sha,
			Receipt: rc, Stdout: stdout, Stderr: stderr, Created: d.opt.Now(),
		})
		if err != nil {
			return "", "", err
		}
		if err := writeFileAtomic(outCopy, buf.Bytes()); err != nil {
			return "", "", err
		}
		if err := writeFileAtomic(resCopy, manifest); err != nil {
			return "", "", err
		}
	} else if err != nil {
		return "", "", err
	}
	status, err := d.publishCopies(j.agent, j.req.ID)
	return SHA256Hex(manifest), status, err
}

// publishCopies publishes the private copies of a result (output, then
// manifest) where they are missing from the folder. A published result is
// never changed, except an "uncertain" one, which a reconciled or re-run
// result replaces (the host owns the file; SPEC §5).
func (d *Daemon) publishCopies(agent, id string) (string, error) {
	dir := d.home.Path("results", agent)
	manifest, err := os.ReadFile(filepath.Join(dir, id+"."+ExtResult))
	if err != nil {
		return "", err
	}
	status, err := resultStatus(manifest)
	if err != nil {
		return "", err
	}
	resPath, outPath := ResultPath(d.me, agent, id, ExtResult), ResultPath(d.me, agent, id, ExtOutput)
	replace := false
	existing, err := d.folder.ReadFile(resPath, bcrypto.KindResult.MaxSize())
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", err
	case bytes.Equal(existing, manifest):
		// Published already; make sure the output is there too.
		err := d.publishFile(outPath, filepath.Join(dir, id+"."+ExtOutput), false)
		if errors.Is(err, syncsafe.ErrExists) {
			err = nil
		}
		return status, err
	default:
		if old, err := resultStatus(existing); err != nil || old != StatusUncertain {
			return "", fmt.Errorf("result %s: a different result is already published", id)
		}
		replace = true
	}
	// An output without its manifest is ours and referenced by nothing, so
	// it may be replaced.
	if err := d.publishFile(outPath, filepath.Join(dir, id+"."+ExtOutput), true); err != nil {
		return "", err
	}
	return status, d.publishFile(resPath, filepath.Join(dir, id+"."+ExtResult), replace)
}

func (d *Daemon) publishFile(rel, src string, replace bool) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	write := func(w io.Writer) error {
		_, err := io.Copy(w, f)
		return err
	}
	if replace {
		return d.folder.PublishReplace(rel, write, syncsafe.WithMode(0o644))
	}
	return d.folder.Publish(rel, write, syncsafe.WithMode(0o644))
}

func resultStatus(manifest []byte) (string, error) {
	env, err := bcrypto.Parse(bcrypto.KindResult, manifest)
	if err != nil {
		return "", err
	}
	var res Result
	if err := bcrypto.DecodeBody(env.Body(), &res); err != nil {
		return "", err
	}
	return res.Status, nil
}

// duplicate handles a request id the ledger already finished: it never runs
// again (invariant 4); its stored result is re-published if it is missing.
func (d *Daemon) duplicate(ent ledger.Entry) {
	if _, err := d.folder.Lstat(ResultPath(d.me, ent.Agent, ent.ID, ExtResult)); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(d.home.Path("results", ent.Agent, ent.ID+"."+ExtResult)); err == nil {
			if _, err := d.publishCopies(ent.Agent, ent.ID); err != nil {
				d.log.Warn("re-publish result", "key", ent.Key, "err", err)
				return
			}
			d.audit.log(AuditEvent{Event: "republished", Agent: ent.Agent, ID: ent.ID})
		}
	}
	d.mu.Lock()
	d.finished[ent.Key] = true
	d.mu.Unlock()
}

// refuseFile records a file that will never be admitted as it is, once per
// content.
func (d *Daemon) refuseFile(p string, err error) {
	d.mu.Lock()
	k := "refused:" + p + ":" + err.Error()
	seen := d.noted[k]
	d.noted[k] = true
	d.mu.Unlock()
	if seen {
		return
	}
	d.log.Warn("refused", "file", p, "reason", Reason(err), "err", err)
	d.audit.log(AuditEvent{Event: "refused", File: p, Reason: Reason(err), Detail: err.Error()})
}

// cancelled reports whether a verified cancel file exists for the request.
func (d *Daemon) cancelled(agent, id string) bool {
	data, err := d.folder.ReadFile(RequestPath(d.me, agent, id, ExtCancel), bcrypto.KindCancel.MaxSize())
	if err != nil {
		return false
	}
	_, err = OpenCancel(data, id, d.me, agent, d.agents[agent].sign)
	if err != nil {
		d.refuseFile(RequestPath(d.me, agent, id, ExtCancel), err)
	}
	return err == nil
}

// handleCancel stops a running op whose agent cancelled it, or records the
// cancel for a request not yet running.
func (d *Daemon) handleCancel(agent, id string) {
	if !d.cancelled(agent, id) {
		return
	}
	key := agent + "/" + id
	d.mu.Lock()
	cancel := d.cancels[key]
	d.mu.Unlock()
	if cancel != nil {
		d.log.Info("cancelling", "key", key)
		cancel()
		return
	}
	d.schedule(agent, id)
}

// recover looks at what a crash left in flight (invariant 5): a claimed
// request never started and is simply evaluated again; a running one is
// re-run only if its op is idempotent, else it becomes uncertain and the
// agent is told. A result that was published before the crash is adopted.
func (d *Daemon) recover() error {
	inflight, err := d.ledger.InFlight()
	if err != nil {
		return err
	}
	for _, ent := range inflight {
		keys := d.agents[ent.Agent]
		if keys == nil {
			d.log.Warn("in-flight request of an agent no longer trusted", "key", ent.Key)
			continue
		}
		j, err := d.reload(ent, keys)
		if err != nil {
			d.log.Warn("recover", "key", ent.Key, "err", err)
			continue
		}
		if _, err := os.Stat(d.home.Path("results", ent.Agent, ent.ID+"."+ExtResult)); err == nil {
			d.log.Info("recover: adopting the published result", "key", ent.Key)
			d.finish(j, Receipt{})
			continue
		}
		switch {
		case ent.State == ledger.StateClaimed:
			if _, err := d.ledger.Transition(ent.Key, []ledger.State{ledger.StateClaimed}, ledger.StatePending, nil); err != nil {
				return err
			}
			d.log.Info("recover: claimed but never started; evaluating again", "key", ent.Key)
		case ent.Idempotent:
			d.log.Info("recover: re-running an idempotent op", "key", ent.Key, "op", ent.Op)
			spool, err := d.settle(j)
			if err != nil {
				d.log.Warn("recover: payload gone", "key", ent.Key, "err", err)
				d.finish(j, Receipt{Status: StatusUncertain, Reason: "crashed", Op: ent.Op,
					Detail: "the host stopped while the op ran and its payload is no longer there to run it again"})
				continue
			}
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				defer os.Remove(spool)
				d.mu.Lock()
				d.active[ent.Key] = true
				d.mu.Unlock()
				d.admit(j, spool, true)
				d.mu.Lock()
				delete(d.active, ent.Key)
				d.mu.Unlock()
			}()
		default:
			d.log.Warn("recover: op was running when the host stopped; marking it uncertain", "key", ent.Key, "op", ent.Op)
			d.finish(j, Receipt{Status: StatusUncertain, Reason: "crashed", Op: ent.Op,
				Detail: "the host stopped while the op ran; it may or may not have had its effect. Resolve with `bridge reconcile`"})
		}
	}
	return nil
}

// reload re-reads and re-verifies the manifest of a ledger entry. The
// signature is checked again; the times are not (the request was admitted).
func (d *Daemon) reload(ent ledger.Entry, keys *agentKeys) (*job, error) {
	data, err := d.folder.ReadFile(RequestPath(d.me, ent.Agent, ent.ID, ExtManifest), bcrypto.KindRequest.MaxSize())
	if err != nil {
		return nil, err
	}
	if SHA256Hex(data) != ent.ManifestSHA256 {
		return nil, fmt.Errorf("%w: manifest changed", ErrReplay)
	}
	req, err := OpenRequest(data, ent.ID, d.check(ent.Agent, keys))
	if req == nil {
		return nil, err
	}
	return &job{agent: ent.Agent, keys: keys, req: req, manifest: data, sha: ent.ManifestSHA256, key: ent.Key}, nil
}

// Catalog is the signed body of host.catalog: the ops agents may discover.
type Catalog struct {
	V      int             `json:"v"`
	Host   string          `json:"host"`
	Policy string          `json:"policy_sha256"`
	Ops    []policy.OpInfo `json:"ops"`
}

// ping answers the built-in no-op: claimed, running and done like any op, so
// it measures the whole pipeline except the process start.
func (d *Daemon) ping(j *job) {
	if _, err := d.ledger.Transition(j.key, []ledger.State{ledger.StateSeen, ledger.StatePending}, ledger.StateClaimed,
		func(e *ledger.Entry) { e.Op, e.Idempotent = PingOp, true }); err != nil {
		return
	}
	if _, err := d.ledger.Transition(j.key, []ledger.State{ledger.StateClaimed}, ledger.StateRunning, nil); err != nil {
		return
	}
	now := d.opt.Now().UnixMilli()
	d.finishWithOutput(j, Receipt{Status: StatusDone, Op: PingOp, Started: now, Finished: now, StdoutTotal: 5}, []byte("pong\n"), nil)
}
