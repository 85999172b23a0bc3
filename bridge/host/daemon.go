package host

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
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

	"github.com/syncbridge/bridge/bridge/host/internal/probe"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/runner"
	"github.com/syncbridge/bridge/bridge/trust"
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
	// LivenessInterval is how often the daemon rewrites its liveness
	// stamps when nothing changes (default bridge.DefaultLivenessInterval).
	LivenessInterval time.Duration
}

// Daemon is the host side: it watches the agents' request trees, admits
// complete and authentic requests, runs what the policy allows and publishes
// sealed results. Lifecycle: NewDaemon, Open, Run, Close.
type Daemon struct {
	*base
	openedAt time.Time    // when Open began (wall clock): a temporary older than it is a crash's (collector.sweepTemps)
	out      *outbox      // what the daemon writes into the folder and keeps of it
	sched    *scheduler   // when each request's key is worked on
	fin      *finishedSet // what the daemon knows finished beside the ledger
	keys     *keyring     // the keys in force, kept in step with the home
	policy   *policyWatch // the policy in force, kept in step with its file
	gc       *collector   // what the agents no longer need, removed
	lock     *syncsafe.Lockfile
	runs     *runner.State // the runner's records of the ops it starts (run/)
	// runsUnsure, when set, says why a process of a run the last daemon
	// left may still live: no such run is re-run, checked or answered as
	// if it were over (recover.go).
	runsUnsure string
	runsWait   time.Duration // how long a start waits for them (0: runsWait)
	watcher    *syncsafe.Watcher

	// The requests' state in memory beside the ledger (the queue is the
	// scheduler's, under its own lock).
	mu       sync.Mutex
	cancels  map[string]context.CancelFunc // keys past claim, until their run ends
	slotWait map[string]*job               // keys whose run waits for a slot of its op (revokeWaiting)
	checks   map[string]bool               // keys whose reconcile command runs after a crash (reconcileCheck), until it ends or hands a run on

	refusals *refusals // manifests refused for good, not read again until they change
	wg       sync.WaitGroup

	runCtx   context.Context // parent of every running op; cancelled on abort
	abortRun context.CancelFunc
	// stopMu keeps Abort apart from Open and from Close's last steps (its
	// stamp, closing the folder, the ledger and the lock): a second signal
	// comes while Close drains, and Close goes on once the kill ends the
	// runs, so the two would otherwise use the folder at once (one closing
	// the directory the other publishes through).
	stopMu  sync.Mutex
	stopCtl chan struct{} // stops the control loop

	// Whether an entry may await approval or wait in seen/pending (set
	// at start and by noteState, cleared by a sweep that finds none), so
	// that an idle daemon's control loop scans nothing.
	awaitingMaybe atomic.Bool
	stalledMaybe  atomic.Bool
	// controlPoke wakes the control loop when an entry starts waiting for
	// one of its sweeps, so that an idle loop asleep on its long fallback
	// sets the sweep's timer (buffered: one poke is enough).
	controlPoke chan struct{}
	// rescanned wakes the control loop after each full walk of the
	// folder: its look at the home, and what it does periodically, come
	// with the rescan, so an idle daemon wakes once a rescan, not twice.
	rescanned chan struct{}

	// life ends when the daemon must stop by itself (a broken invariant,
	// fatal): Run returns its cause.
	life     context.Context
	stopLife context.CancelCauseFunc
}

// fatal stops the daemon: Run returns err (the first one given).
func (d *Daemon) fatal(err error) { d.stopLife(err) }

// stopped reports whether the daemon is stopping for good: aborting its
// runs, or stopped by a fatal error.
func (d *Daemon) stopped() bool {
	return d.life.Err() != nil || (d.runCtx != nil && d.runCtx.Err() != nil)
}

// Abort stops every running op at once (SIGKILL to its process group),
// for a second signal: the caller exits right after. The ledger keeps them
// running, and the next start recovers them as after a crash.
func (d *Daemon) Abort() int {
	// Before the cancel, so a run it stops sees it: the process exits at
	// once, and an answer half written by then would make the next start's
	// verdict depend on which came first.
	d.killed.Store(true)
	d.mu.Lock()
	n := len(d.cancels) - len(d.slotWait) + len(d.checks) // the runs underway, as Close counts them
	d.mu.Unlock()
	// The cancel first, and without a lock: it ends what Open may be
	// stuck in (recovery retrying an answer on a full disk), which holds
	// stopMu until it returns (red team of 1eee7e3: a second signal then
	// never got past the lock); a run it stops answers nothing (killed).
	// Then the kill, at once: not the signal ladder's SIGTERM and grace,
	// and not after waiting for the lock. (Before the cancel, a run would
	// see its process die of SIGKILL as an exit of its own; after it, it
	// still may, and run() leaves every run of a killed daemon unanswered.)
	d.abortRun()
	n = max(n, runner.KillAll()) // the runner's own count, if higher (a run between the steps of its registration)
	d.stopMu.Lock()
	if d.folder != nil && d.watcher != nil {
		// As a clean stop says it: agents learn at once that the host
		// stopped, not after two intervals of a stamp that says serving.
		// A folder Close already closed has its stamp already.
		if err := d.out.publishLiveness(bridge.LivenessStopped); err != nil {
			d.log.Warn("publish liveness stamps", "err", err)
		}
	}
	d.stopMu.Unlock()
	// Again: a run that passed the runner's check of the cancel as it came
	// may have been started since the first kill.
	runner.KillAll()
	if n > 0 {
		d.log.Warn("stopped at once: killed the running ops and everything they started", "killed", n,
			"hint", "the next `bridge serve` settles them: an idempotent op runs again, one with a reconcile command is checked, any other is held uncertain")
	} else {
		d.log.Info("stopped at once: nothing was running")
	}
	return n
}

// NewDaemon prepares a daemon for a host home. Nothing is opened yet.
func NewDaemon(home *trust.Home, opt DaemonOptions) (*Daemon, error) {
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
		base:    &base{home: home, opt: opt, log: opt.Logger, me: home.Config.ID, limits: defaultLimits},
		cancels: map[string]context.CancelFunc{}, slotWait: map[string]*job{}, checks: map[string]bool{},

		controlPoke: make(chan struct{}, 1),
		rescanned:   make(chan struct{}, 1),
	}
	d.life, d.stopLife = context.WithCancelCause(context.Background())
	// From the start, so that Abort cancels every run (and every retry of
	// an answer, recovery's in Open included) without waiting for anyone.
	d.runCtx, d.abortRun = context.WithCancel(context.Background())
	if probe.New != nil {
		d.probe = probe.New(home.Dir)
	}
	// The rooms, each with the base and what it hands work to.
	d.out = &outbox{base: d.base}
	d.sched = newScheduler(d.base)
	d.fin = &finishedSet{base: d.base, done: doneMap{m: map[string]stamp{}}, acks: map[string]bool{}}
	d.refusals = &refusals{base: d.base, marks: map[uint64]refusedMark{}, seed: maphash.MakeSeed()}
	d.keys = &keyring{base: d.base, out: d.out}
	d.policy = &policyWatch{base: d.base, sched: d.sched, out: d.out}
	d.gc = &collector{base: d.base, fin: d.fin, out: d.out}
	return d, nil
}

// evalWorkers is how many requests are verified and settled at once. Runs
// are handed off to their own goroutines, so a long op never holds a worker.
const evalWorkers = 4

// Open takes the single-instance lock, opens the ledger, the policy and the
// folder, recovers what a crash interrupted, and starts watching.
func (d *Daemon) Open() (err error) {
	// A second signal while Open runs (Abort) waits for it: it sets up
	// what Abort reads (the folder, the watcher, the runs' context).
	d.stopMu.Lock()
	defer d.stopMu.Unlock()
	defer func() {
		if err != nil {
			d.closeResources()
		}
	}()
	if err := checkPrivilege(d.home, d.opt.AllowRoot); err != nil {
		return err
	}
	d.openedAt = time.Now().Round(0) // the wall clock's: compared with files' times
	endLoad := gcLoading()           // the ledger and the finished set: the heap grows from nothing
	defer endLoad()                  // also on an error or a panic; once
	if err := d.openCore(); err != nil {
		return err
	}
	if d.probe != nil && d.probe.Opened != nil {
		d.probe.Opened()
	}
	if err := d.openRuns(); err != nil {
		return err
	}
	d.fin.load()
	d.fin.loadLost()
	endLoad()
	// Private copies a crash left in the spool are of no use: payloads are
	// settled again from the folder.
	if old, err := filepath.Glob(d.home.Path("spool", "*")); err == nil {
		for _, f := range old {
			os.Remove(f)
		}
	}
	// The home's staging directory is shared with the host's other bridge
	// commands: one staging a file right now keeps it (a minute's margin).
	d.folder.SweepStaging(time.Minute)
	for id := range d.agents() {
		// The temporaries a crash left among the agent's results are
		// swept after the start-up scan (collector.sweepTemps): a listing of
		// 200,000 names beside 100,000 finished requests is not worth
		// delaying the first answers for (issue 25).
		d.keys.followRotations(id)
	}
	if err := d.out.publishForAgents(); err != nil {
		d.log.Warn("publish catalog", "err", err)
	}
	for i := 0; i < evalWorkers; i++ {
		d.wg.Add(1)
		go d.worker()
	}
	if err := d.recover(); err != nil {
		return fmt.Errorf("serve: recover: %w", err)
	}
	// Reached without a link, as every directory the daemon makes or
	// watches: a link planted at hosts/<host> would have it create and
	// watch a tree outside the folder.
	root := bridge.ToHostRoot(d.me)
	if err := d.out.ownDir(root); err != nil {
		// What a folder writer put at its names (a link at hosts/, a
		// file where a directory goes) must not stop the daemon from
		// starting: the watcher waits for a directory there, as it would
		// if one went away later, and says so.
		d.log.Warn("cannot make the requests directory: waiting for one there", "dir", root, "err", err,
			"hint", "`bridge doctor` checks the folder's directories")
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
	d.watcher, err = d.folder.Watch(root, syncsafe.WatchOptions{Rescan: d.opt.Rescan, Skip: skip, Debounce: -1})
	if err != nil {
		return fmt.Errorf("serve: watch %s: %w", root, err)
	}
	stop := make(chan struct{})
	d.stopCtl = stop
	d.wg.Add(1)
	go func() { defer d.wg.Done(); d.controlLoop(stop) }()
	d.audit.log(AuditEvent{Event: "start", Detail: "policy " + d.pol().SHA256})
	first, changed := d.out.policyChanged()
	if changed {
		d.out.notify("", bridge.Note{Event: bridge.EventPolicyChanged, Text: "the host's policy changed; `bridge ops` shows what you may run now"})
	}
	started := "the host is serving requests again"
	if first {
		started = "the host is serving requests"
	}
	d.out.notify("", bridge.Note{Event: bridge.EventStarted, Text: started})
	d.log.Info("serving", "host", d.me, "folder", d.home.Config.Folder, "agents", len(d.agents()), "policy", d.pol().SHA256[:12],
		"containment", runner.Containment(0))
	return nil
}

// runsWait is how long a start waits for what ops of the daemon before
// left running (a daemon killed outright) to end.
const runsWait = 10 * time.Second

// openRuns opens the runner's records and ends every process that runs of
// the daemon before left behind, before anything is answered: an op that a
// crash interrupted must be over before it is run again, checked by its
// reconcile command or answered uncertain (DESIGN §3, Least privilege).
func (d *Daemon) openRuns() error {
	wait := d.runsWait
	if wait <= 0 {
		wait = runsWait
	}
	st, lo, err := runner.OpenState(d.home.Path("run"), wait)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	d.runs = st
	if lo.Ended > 0 {
		d.log.Warn("ended what ops interrupted by the last stop had left running", "processes", lo.Ended)
	}
	if lo.Waited >= time.Second {
		d.log.Info("waited for what ops interrupted by the last stop had left running to end", "waited", lo.Waited.Round(time.Millisecond))
	}
	if lo.Unended != "" {
		d.runsUnsure = lo.Unended
		d.log.Error("processes of ops interrupted by the last stop may still live: their requests are held uncertain",
			"why", lo.Unended, "hint", "see `bridge doctor`; settle them with `bridge reconcile` once nothing of them runs")
	}
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
	pol, stamp, err := loadPolicy(d.home.Path(trust.PolicyName))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return bridge.WithHint(fmt.Errorf("serve: no policy: %w", err), "write %s (see `bridge policy check` and docs/CLI.md); without a policy nothing may run", d.home.Path(trust.PolicyName))
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
	if d.probe != nil {
		l := d.ledger
		d.probe.Entries = func() ([]ledger.Entry, error) { return l.List(nil) }
	}
	if d.audit, err = openAudit(d.home.Path("audit.log")); err != nil {
		return err
	}
	// Orders an operator's command left while a daemon was stopping come
	// first, before anything this holder of the lock logs.
	logAuditOrders(d.home, d.audit)
	d.rulesP.Store(&rules{p: pol, red: newRedactor(pol.Redaction()), stamp: stamp})
	for _, w := range pol.PathWarnings() {
		d.log.Warn("policy: "+w, "hint", "`bridge policy check` lists every warning")
	}
	d.audit.redact = func(s string) string { return d.rules().red.string(s) }
	for _, dir := range []string{"spool", "results"} {
		if err := os.MkdirAll(d.home.Path(dir), 0o700); err != nil {
			return err
		}
	}
	if d.folder, err = d.home.OpenFolder(); err != nil {
		return err
	}
	d.keys.loadedFrom = d.keys.peersVersion()
	if err := d.keys.loadAgents(); err != nil {
		return err
	}
	if err := d.keys.loadOwnKeys(); err != nil {
		return err
	}
	return nil
}

// maxUnfollowed bounds how many Same full batches in a row take the
// statements the batch before followed as followed (Run).
const maxUnfollowed = 9

// Run serves until ctx is cancelled: it turns watcher batches into
// evaluations. It returns after in-flight work drained (see Close).
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.life, cancel)()
	// A ledger that refuses all further work (a failed fsync; its file
	// removed or replaced under the daemon) stops the daemon, instead of
	// failing every request it sees: a restart reads what is on disk.
	l, watched := d.ledger, make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-l.Unusable():
			d.log.Error("the ledger is unusable: stopping", "err", l.Err())
			d.fatal(bridge.WithHint(fmt.Errorf("serve: %w", l.Err()),
				"start `bridge serve` again: it reads the ledger file that is there now (`bridge doctor` checks it); requests wait in the folder meanwhile"))
		case <-ctx.Done():
		}
	}()
	defer func() { cancel(); <-watched }()
	var trouble string                    // what is wrong with the requests directory, said once
	var lastStmts []string                // the last full batch's rotation statements (trusted agents')
	var lastVersions []version            // theirs when last followed
	var lastRest []string                 // its other paths
	var lastAgents *map[string]*agentKeys // the trusted agents' keys it was followed against
	unfollowed := 0                       // Same full batches in a row whose statements were not followed again
	for {
		batch, err := d.watcher.Next(ctx)
		if err != nil {
			if d.life.Err() != nil {
				return context.Cause(d.life)
			}
			if ctx.Err() != nil || errors.Is(err, fs.ErrClosed) {
				return nil
			}
			// Nothing the folder holds may end the daemon: a sync client
			// applying a rename, a restore or a folder writer can take
			// the directory away for a while. The watcher looks again
			// every few seconds; requests wait in the folder meanwhile.
			if trouble == "" && d.folderLine("") {
				trouble = err.Error()
				d.log.Warn("cannot watch the requests directory: waiting for it to come back", "err", err,
					"hint", "a sync client may be applying a rename or a restore; if this lasts, see `bridge doctor`")
				d.audit.log(AuditEvent{Event: "folder", Reason: "watch", Detail: trouble})
			} else {
				// Each look again, for a debug log (and for a test that
				// counts them rather than sleeping past them).
				d.log.Debug("the requests directory is still not watchable", "err", err)
			}
			continue
		}
		// Said within the budget of folder input: a writer can move the
		// directory away and back as often as it likes.
		if trouble != "" {
			trouble = ""
			if d.folderLine("") {
				d.log.Info("the requests directory is back: serving again")
			}
		} else if batch.Replaced && d.folderLine("") {
			d.log.Warn("the requests directory was replaced by another one: watching the new one")
		}
		if batch.Full {
			if err := d.keys.loadOwnKeys(); err != nil {
				d.log.Error("reload own keys", "err", err)
			}
		}
		// Rotation statements first: a request signed by an agent's new key
		// may arrive in the same batch as the statement that introduces it.
		// A full batch the same as the one before holds the statements it
		// held (none: its 20,000 names beside 10,000 finished requests are
		// not looked through again), and following them again against the
		// same trusted keys, each as it was (its version), finds what it
		// found: each following lists the agent's whole directory and reads
		// every statement not yet accepted, a folder writer's junk ones
		// included. A following that failed is done again by the next
		// batch; one that could not read a statement, by the tenth.
		agents := d.agentsP.Load()
		paths := batch.Paths
		switch {
		case batch.Full && batch.Same && len(lastStmts) == 0:
		case batch.Full && batch.Same && agents == lastAgents && unfollowed < maxUnfollowed &&
			slices.Equal(d.keys.statementVersions(lastStmts), lastVersions):
			paths = lastRest
			unfollowed++
		default:
			var stmts []string
			paths, stmts = d.keys.statementsIn(batch.Paths)
			if batch.Full {
				// Taken before the following: a statement changed during
				// it is followed again by the next batch.
				lastStmts, lastVersions, unfollowed = stmts, d.keys.statementVersions(stmts), 0
			}
			if d.keys.followStatements(stmts) && batch.Full {
				// Failed for the home's or the folder's reasons, not the
				// statements': followed again by the next batch.
				lastVersions = nil
			}
		}
		if batch.Full {
			// A Same batch gives dispatchFull the paths it had the last
			// time, statements taken out: those of the agents whose
			// directories the walk lists, the trusted ones (an agent
			// that rotated its keys keeps its statements in the folder
			// for good, so they must not keep a rescan from being Same).
			lastRest, lastAgents = paths, agents
			d.dispatchFull(paths, batch.Same)
			d.refusals.refuseIrregular(batch.Irregular)
			poke(d.rescanned)
			continue
		}
		for _, p := range paths {
			d.dispatch(p)
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
	d.sched.close()
	// What a drain waits for: the ops that run and the reconcile commands
	// that check one a crash interrupted (not the requests waiting for a
	// slot: nothing starts any more).
	running := len(d.cancels) - len(d.slotWait) + len(d.checks)
	d.mu.Unlock()
	if running > 0 {
		until := "until they end"
		if dl, ok := ctx.Deadline(); ok {
			until = "for up to " + time.Until(dl).Round(time.Second).String()
		}
		// Agents learn it now, not when the drain ends: their new
		// requests wait for the next start (SPEC §10c, draining). Before
		// the log line, which thus says the stamps are out.
		d.publishDraining()
		d.log.Info("stopping: no new work; running ops may finish "+until+", then they are stopped (a second signal stops them at once)",
			"running", running)
	} else if d.watcher != nil {
		d.log.Info("stopping: nothing runs")
	}
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	// A drain longer than the stamps' interval rewrites them, or the agents
	// would call a host that drains as told "stale" (it may be down).
	var again <-chan time.Time
	if running > 0 {
		t := time.NewTicker(d.out.livenessInterval())
		defer t.Stop()
		again = t.C
	}
drain:
	for {
		select {
		case <-done:
			if running > 0 {
				d.log.Info("drained: every running op ended in time")
			}
			break drain
		case <-ctx.Done():
			d.log.Warn("aborting running operations: the drain is over", "hint", "each is answered uncertain, or left for the next start if it is idempotent or has a reconcile command")
			if d.abortRun != nil {
				d.abortRun()
			}
			<-done
			break drain
		case <-again:
			d.publishDraining()
		}
	}
	d.stopMu.Lock()
	defer d.stopMu.Unlock()
	if d.ledger != nil {
		if err := d.fin.save(); err != nil {
			d.log.Warn("save the finished-requests cache", "err", err)
		}
	}
	if d.audit != nil {
		d.audit.log(AuditEvent{Event: "stop"})
	}
	if d.folder != nil && d.watcher != nil {
		// Agents waiting on this host learn at once that it stopped,
		// rather than after two intervals of silence.
		if err := d.out.publishLiveness(bridge.LivenessStopped); err != nil {
			d.log.Warn("publish liveness stamps", "err", err)
		}
		d.out.notify("", bridge.Note{Event: bridge.EventStopping, Text: "the host daemon stopped; requests wait in the folder until it is back"})
	}
	return d.closeResources()
}

// publishDraining writes the stamps of a daemon that drains (not after a
// second signal: its stopped stamps are the last).
func (d *Daemon) publishDraining() {
	d.stopMu.Lock()
	defer d.stopMu.Unlock()
	if d.folder != nil && d.watcher != nil && !d.killed.Load() {
		if err := d.out.publishLiveness(bridge.LivenessDraining); err != nil {
			d.log.Warn("publish liveness stamps", "err", err)
		}
	}
}

func (d *Daemon) closeResources() error {
	var errs []error
	if d.runs != nil {
		errs = append(errs, d.runs.Close())
		d.runs = nil
	}
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
