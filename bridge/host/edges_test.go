package host

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/doctor"
	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/trust"
)

// The edges of a request's life where "at most once, else uncertain" broke
// when probed from outside (issue: one request lifecycle): refusal paths,
// shutdown, repair, revocation, approval, cancel. Each test names the
// lifecycle row of docs/DESIGN.md §6 it covers.

// edgePolicy has ops whose runs leave a line "<op>-<request id>" in
// $RUNS, so a test counts starts per request.
const edgePolicy = `
[ops.missing]
argv = ["bridge-test-missing-prog", "{request_id}"]
env = ["PATH", "RUNS"]

[ops.block]
argv = ["sh", "-c", "echo block-$0 >> \"$RUNS\"; while [ -f \"$RUNS.block\" ]; do sleep 0.05; done; echo out", "{request_id}"]
env = ["PATH", "RUNS"]
concurrency = 1

[ops.blockidem]
argv = ["sh", "-c", "echo blockidem-$0 >> \"$RUNS\"; while [ -f \"$RUNS.block\" ]; do sleep 0.05; done; echo out", "{request_id}"]
env = ["PATH", "RUNS"]
idempotent = true

[ops.chatty]
argv = ["sh", "-c", "echo chatty-$0 >> \"$RUNS\"; i=0; while [ $i -lt 30 ]; do echo line $i; i=$((i+1)); sleep 0.1; [ -f \"$RUNS.block\" ] && i=0; done", "{request_id}"]
env = ["PATH", "RUNS"]
idempotent = true

[ops.gated]
argv = ["sh", "-c", "echo gated-$0 >> \"$RUNS\"", "{request_id}"]
env = ["PATH", "RUNS"]
approve = true

[agents.cloud-1]
ops = ["missing", "block", "blockidem", "chatty", "gated"]

[agents.other]
ops = ["gated"]
`

// edge is a pair serving edgePolicy, with $RUNS and a bin directory on the
// daemon's PATH the test can put programs into.
type edge struct {
	*pair
	runs, bin string
	env       map[string]string
}

func newEdge(t *testing.T) *edge {
	t.Helper()
	e := &edge{pair: newPair(t, edgePolicy)}
	dir := t.TempDir()
	e.runs, e.bin = filepath.Join(dir, "runs"), filepath.Join(dir, "bin")
	os.Mkdir(e.bin, 0o755)
	e.env = map[string]string{"RUNS": e.runs, "PATH": e.bin + ":" + os.Getenv("PATH")}
	return e
}

// block makes the block ops wait until unblock.
func (e *edge) block()   { os.WriteFile(e.runs+".block", nil, 0o644) }
func (e *edge) unblock() { os.Remove(e.runs + ".block") }

func (e *edge) starts(t *testing.T, op, id string) int { return testkit.Count(t, e.runs, op+"-"+id) }

func (e *edge) submit(t *testing.T, op string) string {
	t.Helper()
	s, err := e.client.Submit(agent.SubmitOptions{Op: op, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// options are the edge's daemon options: its environment, quick rescans and
// signal ladder.
func (e *edge) options() DaemonOptions {
	return DaemonOptions{AllowRoot: true, Rescan: 300 * time.Millisecond, Grace: 100 * time.Millisecond, Env: envWith(e.env)}
}

// daemon starts an in-process daemon with the edge's environment.
func (e *edge) daemon(t *testing.T) *Daemon {
	t.Helper()
	return runDaemon(t, e.host, e.options())
}

// stopped stops the in-process daemon d, within 10 s.
func (e *edge) stopped(d *Daemon) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopDaemon(d, ctx)
}

// pendingThenStopped leaves a request of op waiting for its payload (its
// manifest alone in the folder) in the ledger of a daemon that then stops.
func (e *edge) pendingThenStopped(t *testing.T, op string) (id string, manifest, payload []byte) {
	t.Helper()
	id, manifest, payload = e.sealManual(t, op, map[string]string{}, nil)
	os.WriteFile(filepath.Join(e.toHost(), id+".manifest"), manifest, 0o644)
	d := e.daemon(t)
	testkit.WaitFor(t, 10*time.Second, "the request to wait for its payload", func() bool { return e.entry(t, id).State == ledger.StatePending })
	e.stopped(d)
	return id, manifest, payload
}

// awaitingThenStopped leaves a request of op awaiting approval in the
// ledger of a daemon that then stops.
func (e *edge) awaitingThenStopped(t *testing.T, op string) string {
	t.Helper()
	d := e.daemon(t)
	id := e.submit(t, op)
	testkit.WaitFor(t, 10*time.Second, "the request to await approval", func() bool {
		return e.entry(t, id).State == ledger.StateAwaitingApproval
	})
	e.stopped(d)
	return id
}

// running blocks the edge's block ops, starts a daemon and submits op, and
// returns once its run has started.
func (e *edge) running(t *testing.T, op string) (*Daemon, string) {
	t.Helper()
	e.block()
	d := e.daemon(t)
	id := e.submit(t, op)
	testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, op, id) == 1 })
	return d, id
}

// secondSignal stops d as two signals do: a drain with no deadline, and
// the second signal (Abort) once the drain began. It returns once Close
// has, with the count of runs Abort said it stopped.
func secondSignal(t *testing.T, d *Daemon) int {
	t.Helper()
	closed := make(chan struct{})
	go func() { defer close(closed); stopDaemon(d, context.Background()) }()
	testkit.WaitFor(t, 10*time.Second, "the drain to begin", d.closing.Load)
	n := d.Abort() // the op ends by its SIGTERM or the SIGKILL, whichever comes first
	<-closed       // Close returns once the run's goroutine has ended
	return n
}

// Row "host-error": an op the host cannot prepare (its program is missing)
// is answered failed and recorded failed; once the program exists, rescans
// and a restart never run it.
func TestHostErrorIsFinal(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	d := e.daemon(t)
	id := e.submit(t, "missing")
	out := e.wait(t, id)
	if out.Receipt.Status != bridge.StatusFailed || out.Receipt.Reason != "host-error" {
		t.Fatalf("missing program: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to record failed", func() bool { return e.entry(t, id).State == ledger.StateFailed })
	prog := filepath.Join(e.bin, "bridge-test-missing-prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho missing-$1 >> \"$RUNS\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	settleRescans(t, d)
	stopDaemon(d, context.Background())
	d = e.daemon(t)
	settleRescans(t, d)
	if n := e.starts(t, "missing", id); n != 0 {
		t.Fatalf("a request answered failed (host-error) ran %d times once its program existed", n)
	}
	if st := e.entry(t, id).State; st != ledger.StateFailed {
		t.Fatalf("ledger: %s, want failed", st)
	}
}

// Row "drain-abort": a daemon stopped with running ops drains for its
// deadline, then stops them. An op that started is never answered "failed"
// (could not start), which an agent may retry: a non-idempotent one is
// uncertain, an idempotent one is run again by the next start.
func TestDrainAbortNeverFailed(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	e.block()
	d := e.daemon(t)
	once, idem := e.submit(t, "block"), e.submit(t, "blockidem")
	testkit.WaitFor(t, 10*time.Second, "both ops to start", func() bool {
		return e.starts(t, "block", once) == 1 && e.starts(t, "blockidem", idem) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stopDaemon(d, ctx) // the drain deadline passes: both are stopped
	if res, err := e.client.Result(once); err == nil && res.Receipt.Status == bridge.StatusFailed {
		t.Fatalf("a started op was answered failed (%s) by a drained stop", res.Receipt.Reason)
	}
	e.unblock()
	e.daemon(t)
	out := e.wait(t, once)
	if out.Receipt.Status != bridge.StatusUncertain {
		t.Errorf("non-idempotent op stopped by a drain: %s (%s); want uncertain", out.Receipt.Status, out.Receipt.Reason)
	}
	if n := e.starts(t, "block", once); n != 1 {
		t.Errorf("non-idempotent op started %d times", n)
	}
	out = e.wait(t, idem)
	if out.Receipt.Status != bridge.StatusDone {
		t.Errorf("idempotent op stopped by a drain: %s (%s); want done after a re-run", out.Receipt.Status, out.Receipt.Reason)
	}
	if n := e.starts(t, "blockidem", idem); n != 2 {
		t.Errorf("idempotent op started %d times, want 2 (once more after the restart)", n)
	}
}

// Row "crash-unsure" by a second signal: Abort kills what runs and the
// process exits right after. This daemon answers nothing it killed (a CI run
// once had the answer half written before the exit, and the next start
// adopted "host-shutdown" where it says "crashed"): the entry stays running,
// and the next start's verdict never depends on which came first.
//
// Not in parallel: the second signal kills every op the process runs
// (runner.KillAll), other tests' ops too.
func TestSecondSignalLeavesItsKillsToTheNextStart(t *testing.T) {
	e := newEdge(t)
	d, id := e.running(t, "block")
	secondSignal(t, d)
	if st := e.entry(t, id).State; st != ledger.StateRunning {
		t.Fatalf("ledger after the kill: %s, want running (for the next start)", st)
	}
	for _, dir := range []string{e.host.Path("results", e.agent.Config.ID), e.toAgent()} {
		if m, _ := filepath.Glob(filepath.Join(dir, id+".*")); len(m) > 0 {
			t.Fatalf("an answer to the killed op was written: %v", m)
		}
	}
	e.unblock()
	e.daemon(t)
	out := e.wait(t, id)
	if out.Receipt.Status != bridge.StatusUncertain || out.Receipt.Reason != bridge.ReasonCrashed {
		t.Errorf("after the restart: %s (%s), want uncertain (crashed)", out.Receipt.Status, out.Receipt.Reason)
	}
	if n := e.starts(t, "block", id); n != 1 {
		t.Errorf("the op started %d times", n)
	}
}

// A second signal while the start's recovery is stuck retrying an answer
// (the interrupted request's files left the folder and nothing can be
// published: a full disk) ends it: Abort cancels the retry without waiting
// for Open, which returns, and the process can exit (red team of 1eee7e3:
// Abort waited for Open's lock while Open waited for Abort's cancel).
//
// Not in parallel: the second signal kills every op the process runs
// (runner.KillAll), other tests' ops too.
func TestSecondSignalEndsAStuckRecovery(t *testing.T) {
	e := newEdge(t)
	d, id := e.running(t, "block")
	secondSignal(t, d)
	e.unblock()
	// The request's files leave the folder, and every publish fails: a
	// file where the private copies' directory belongs.
	files, _ := filepath.Glob(filepath.Join(e.toHost(), id+".*"))
	for _, f := range files {
		must(t, os.Remove(f))
	}
	results := e.host.Path("results", e.agent.Config.ID)
	must(t, os.RemoveAll(results))
	must(t, os.WriteFile(results, nil, 0o600))
	var logs testkit.LockedBuffer
	opt := e.options()
	opt.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	d2, err := NewDaemon(e.host, opt)
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() { opened <- d2.Open() }()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), "answer: trying again"); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-opened:
			t.Fatalf("Open returned before its recovery retried an answer: %v; the log:\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("recovery never retried its answer; the log:\n%s", logs.String())
		}
	}
	select {
	case err := <-opened:
		t.Fatalf("Open returned while its answer could not be published: %v", err)
	default:
	}
	aborted := make(chan struct{})
	go func() { d2.Abort(); close(aborted) }() // the second signal
	select {
	case <-aborted:
	case <-time.After(20 * time.Second):
		t.Fatal("Abort still waits for Open: the second signal would never end the process")
	}
	select {
	case <-opened:
	case <-time.After(20 * time.Second):
		t.Fatal("Open did not return once Abort cancelled its retry")
	}
	d2.Close(context.Background())
	if st := e.entry(t, id).State; st != ledger.StateRunning {
		t.Errorf("ledger after the stuck start was aborted: %s, want running (for the next start)", st)
	}
}

// hookHandler runs fn, once, when a record whose message holds msg is
// logged, before the record is written: a test's way to act at a named
// point of the daemon's work, a counted event rather than a time.
type hookHandler struct {
	slog.Handler
	msg  string
	once *sync.Once
	fn   func()
}

func (h hookHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		h.once.Do(h.fn)
	}
	return h.Handler.Handle(ctx, r)
}

func (h hookHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return hookHandler{h.Handler.WithAttrs(a), h.msg, h.once, h.fn}
}

func (h hookHandler) WithGroup(g string) slog.Handler {
	return hookHandler{h.Handler.WithGroup(g), h.msg, h.once, h.fn}
}

// A second signal while the start recovers what the last stop left: what
// recovery hands on (an idempotent op to run again, a request to evaluate
// again) must not be answered by a daemon that is exiting, but left as it
// was for the next start (red team of 1186b36: the idempotent op ended
// uncertain (rerun-refused) every time). And Abort
// counts the runs it stopped, also those that die of the cancel's SIGTERM.
//
// Not in parallel: the second signal kills every op the process runs
// (runner.KillAll), other tests' ops too.
func TestSecondSignalWhileStartingLeavesWhatItRecovers(t *testing.T) {
	e := newEdge(t)
	e.block()
	d := e.daemon(t)
	idem, once, queued := e.submit(t, "blockidem"), e.submit(t, "block"), e.submit(t, "block")
	testkit.WaitFor(t, 10*time.Second, "the ops to start", func() bool {
		return e.starts(t, "blockidem", idem) == 1 && e.starts(t, "block", once)+e.starts(t, "block", queued) == 1
	})
	if e.starts(t, "block", queued) == 1 {
		once, queued = queued, once // block's concurrency is 1: one runs, one waits claimed
	}
	testkit.WaitFor(t, 10*time.Second, "the other to wait, claimed", func() bool { return e.entry(t, queued).State == ledger.StateClaimed })
	if n := secondSignal(t, d); n != 2 {
		t.Errorf("Abort says it stopped %d runs, want 2 (they die of SIGTERM before the kill)", n)
	}
	e.unblock()
	var logs testkit.LockedBuffer
	var d2 *Daemon
	var once2 sync.Once
	aborted, cancelSeen := make(chan struct{}), make(chan struct{})
	h := hookHandler{slog.NewTextHandler(&logs, nil), "recover: re-running an idempotent op", &once2, func() {
		// The second signal, as recovery hands the idempotent op on: in
		// the signal goroutine (it waits for Open's lock to publish the
		// stamp), its cancel seen before recovery goes on.
		go func() { defer close(aborted); d2.Abort() }()
		for d2.runCtx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		close(cancelSeen)
	}}
	opt := e.options()
	opt.Logger = slog.New(h)
	d2, err := NewDaemon(e.host, opt)
	if err != nil {
		t.Fatal(err)
	}
	// The request that waited for its slot is unclaimed by recovery and
	// claimed again by a worker beside it: held at that claim until the
	// second signal, so that it meets the stop before its start. (A worker
	// that outran recovery to the idempotent op started it: 4 runs in 30
	// under -race, the signal then a moment too late to be the one tested.)
	d2.probe.OnEvent = func(ev string) {
		if event(ev) == evClaim {
			<-cancelSeen
		}
	}
	if err := d2.Open(); err != nil {
		t.Fatal(err)
	}
	<-aborted
	d2.Close(context.Background()) // waits until what Open handed on has ended
	if !strings.Contains(logs.String(), "recover: re-running an idempotent op") {
		t.Fatalf("recovery never re-ran the idempotent op; the log:\n%s", logs.String())
	}
	if st := e.entry(t, idem).State; st != ledger.StateRunning {
		t.Errorf("the idempotent op, aborted as recovery re-ran it: %s, want running (the next start runs it again)", st)
	}
	if out, err := e.client.Result(idem); err == nil {
		t.Errorf("the idempotent op answered %s (%s) by a daemon that was exiting", out.Receipt.Status, out.Receipt.Reason)
	}
	// The request that never started is left for the next start, or, if
	// the abort came in the instant between its running step and its exec
	// (its evaluation runs beside recovery), answered failed: true, since
	// nothing ran, and never uncertain.
	switch ent := e.entry(t, queued); ent.State {
	case ledger.StateClaimed, ledger.StatePending:
	case ledger.StateFailed:
		if ent.Reason != string(bridge.ReasonHostShutdown) {
			t.Errorf("the request that never started: failed (%s), want host-shutdown", ent.Reason)
		}
	default:
		t.Errorf("the request that never started: %s, want claimed or pending (or failed: host-shutdown)", ent.State)
	}
	if n := e.starts(t, "blockidem", idem); n != 1 {
		t.Errorf("the idempotent op started %d times during the aborted start, want 1 (the first run only)", n)
	}
	if n := e.starts(t, "block", queued); n != 0 {
		t.Errorf("the request that waited for its slot started %d times", n)
	}
}

// The second signal lands while a crash re-run writes its durable running
// step: the runner then refuses to start it, and the entry, running since
// the last stop, stays running for the next start to run it again (red team
// of 89cc37a: it was answered uncertain, rerun-refused).
//
// Not in parallel: the second signal kills every op the process runs
// (runner.KillAll), other tests' ops too.
func TestSecondSignalDuringARerunsStepLeavesItRunning(t *testing.T) {
	e := newEdge(t)
	d, idem := e.running(t, "blockidem")
	secondSignal(t, d)
	e.unblock()
	d2, err := NewDaemon(e.host, e.options())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	aborted := make(chan struct{})
	d2.probe.OnEvent = func(ev string) {
		if event(ev) == evCrashRerun {
			once.Do(func() {
				go func() { defer close(aborted); d2.Abort() }() // the signal goroutine
				for d2.runCtx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
	if err := d2.Open(); err != nil {
		t.Fatal(err)
	}
	<-aborted
	d2.Close(context.Background())
	if ent := e.entry(t, idem); ent.State != ledger.StateRunning {
		t.Errorf("an idempotent op whose re-run the second signal refused: %s (%s), want running (the next start runs it again)", ent.State, ent.Reason)
	}
	if n := e.starts(t, "blockidem", idem); n != 1 {
		t.Errorf("the op started %d times, want 1", n)
	}
}

// backedUp answers a request (something for the ledger to keep), backs
// the ledger up with the daemon stopped, and starts a daemon again: the
// backup is the ledger a test restores later, behind what happens next.
func (e *edge) backedUp(t *testing.T) (*Daemon, map[string][]byte) {
	t.Helper()
	d := e.daemon(t)
	e.wait(t, e.submit(t, "blockidem"))
	stopDaemon(d, context.Background())
	before := testkit.BackupLedger(t, e.host)
	return e.daemon(t), before
}

// Rows "record-lost" and "catch-up": a ledger repaired after damage, or
// restored from a backup, has lost the record of a request that ran. Its
// files are still in the folder; the evidence in the home and the folder
// stops a second run. Where the result this host signed is found, the
// ledger records it (the agent's answer stands, nothing is left to
// settle); where only other evidence is (the result was collected, the
// agent's ack remains), the request is held uncertain for a human. A second
// repair still lists what the first found and has not come back.
func TestLostRecordNeverRunsAgain(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"repair", "restore", "restore, result collected"} {
		t.Run(how, func(t *testing.T) {
			e := newEdge(t)
			d, before := e.backedUp(t)
			id := e.submit(t, "blockidem")
			first := e.wait(t, id)
			if first.Receipt.Status != bridge.StatusDone {
				t.Fatalf("first run: %s", first.Receipt.Status)
			}
			stopDaemon(d, context.Background())
			collected := how == "restore, result collected"
			if collected {
				// The agent acked; the result left the folder and the home
				// (its grace and expiry passed, or a hand removed it). A
				// folder writer kept copies of the request's files.
				manifest, _ := os.ReadFile(filepath.Join(e.toHost(), id+".manifest"))
				payload, _ := os.ReadFile(filepath.Join(e.toHost(), id+".payload"))
				if err := e.client.Ack(first); err != nil {
					t.Fatal(err)
				}
				for _, p := range []string{filepath.Join(e.toAgent(), id+".result"), filepath.Join(e.toAgent(), id+".output"),
					e.host.Path("results", e.agent.Config.ID, id+".result"), e.host.Path("results", e.agent.Config.ID, id+".output")} {
					if err := os.Remove(p); err != nil {
						t.Fatal(err)
					}
				}
				os.WriteFile(filepath.Join(e.toHost(), id+".payload"), payload, 0o644)
				os.WriteFile(filepath.Join(e.toHost(), id+".manifest"), manifest, 0o644)
			}
			if how == "repair" {
				// Damage right after the records that were there before,
				// in both files (the request's done record went to the
				// archive): repair keeps those and drops the request's.
				for _, name := range testkit.LedgerFiles {
					f, err := os.OpenFile(e.host.Path("ledger", name), os.O_WRONLY, 0)
					if err != nil {
						t.Fatal(err)
					}
					f.WriteAt([]byte("garbage!"), int64(len(before[name])))
					f.Close()
				}
				os.Remove(e.host.Path("ledger", "ledger.db.checked"))
			} else {
				testkit.RestoreLedger(t, e.host, before)
			}
			// As OPERATIONS.md says to after a restore; run twice, it
			// lists the same.
			for range 2 {
				rep, err := RepairLedger(e.host)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(rep.Lost, "cloud-1/"+id) {
					t.Fatalf("the repair does not list the lost request: %v", rep.Lost)
				}
			}
			// The finished-requests cache still lists the request (its
			// result is in place): the repair's lost list must make the
			// daemon look at it all the same, to record it.
			if got := e.entry(t, id); got.State != "" {
				t.Fatalf("the test did not lose the record: %s", got.State)
			}
			d = e.daemon(t)
			testkit.WaitFor(t, 10*time.Second, "the request to be recorded again", func() bool { return e.entry(t, id).State != "" })
			settleRescans(t, d)
			if n := e.starts(t, "blockidem", id); n != 1 {
				t.Fatalf("a request whose record was lost ran %d times", n)
			}
			got := e.entry(t, id)
			if lost, _ := os.ReadFile(e.host.Path(lostName)); strings.Contains(string(lost), id) {
				t.Fatalf("the lost list still holds the request that came back:\n%s", lost)
			}
			if !collected {
				// The result this host signed is what happened.
				if got.State != ledger.StateDone || got.Reason != "record-lost" {
					t.Fatalf("ledger: %s (%s); want done, record-lost", got.State, got.Reason)
				}
				out, err := e.client.Result(id)
				if err != nil || !bytes.Equal(out.Manifest, first.Manifest) {
					t.Fatalf("the agent's answer changed: %v", err)
				}
				for _, f := range Doctor(e.host, doctor.Options{}) {
					if f.Severity != doctor.SeverityOK && strings.Contains(f.Message, id) {
						t.Fatalf("doctor asks a human about a request whose answer is known: %+v", f)
					}
				}
				return
			}
			if got.State != ledger.StateUncertain || !strings.Contains(got.Reason, "record-lost") {
				t.Fatalf("ledger: %s (%s); want uncertain, record-lost", got.State, got.Reason)
			}
			// doctor names it, with what to do.
			found := false
			for _, f := range Doctor(e.host, doctor.Options{}) {
				found = found || f.Check == "record-lost" && f.Severity == doctor.SeverityWarn && strings.Contains(f.Message, "cloud-1/"+id)
			}
			if !found {
				t.Fatalf("doctor does not name the request held for its lost record")
			}
			// A human settles it; it is not run either way but rerun.
			if _, err := Reconcile(e.host, "cloud-1/"+id, "done"); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, 10*time.Second, "the settled result", func() bool {
				return e.entry(t, id).State == ledger.StateDone
			})
			if n := e.starts(t, "blockidem", id); n != 1 {
				t.Fatalf("ran %d times after the settlement", n)
			}
		})
	}
}

// Row "revoke" before admission: after `bridge keys revoke` returns,
// nothing signed by that key starts, even within the second the daemon
// takes to reload its peers.
func TestRevokeIsImmediate(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	e.daemon(t)
	warm := e.submit(t, "blockidem")
	e.wait(t, warm)
	if _, err := e.host.Revoke(e.agent.Identity().SignKid()); err != nil {
		t.Fatal(err)
	}
	id := e.submit(t, "blockidem")
	out := e.wait(t, id)
	if out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "revoked" {
		t.Fatalf("a request sent after the revocation: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	if n := e.starts(t, "blockidem", id); n != 0 {
		t.Fatalf("a request signed by a revoked key ran %d times", n)
	}
}

// Row "revoke" while claimed: a request admitted before the revocation and
// waiting for its op's slot never starts after it.
func TestRevokedWhileQueuedNeverStarts(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	e.block()
	e.daemon(t)
	first := e.submit(t, "block")
	testkit.WaitFor(t, 10*time.Second, "the first to run", func() bool { return e.starts(t, "block", first) == 1 })
	queued := e.submit(t, "block")
	testkit.WaitFor(t, 10*time.Second, "the second to wait for the slot", func() bool { return e.entry(t, queued).State == ledger.StateClaimed })
	if _, err := e.host.Revoke(e.agent.Identity().SignKid()); err != nil {
		t.Fatal(err)
	}
	// Answered at once, not when the slot frees (the first still runs).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := e.client.Wait(ctx, queued, nil)
	if err != nil {
		t.Fatalf("a request waiting for its slot was not answered at the revocation: %v", err)
	}
	e.unblock()
	if n := e.starts(t, "block", queued); n != 0 {
		t.Fatalf("a request queued before its key was revoked started %d times after", n)
	}
	if out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "revoked" {
		t.Fatalf("queued request after the revocation: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	if out := e.wait(t, first); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the run that started before the revocation: %s", out.Receipt.Status)
	}
}

// Row "revoke" while awaiting approval: approving a request signed by a
// revoked key is refused at once, naming the revocation, and the daemon
// answers the request rejected (revoked) instead of leaving it pending.
func TestApproveOfRevokedRefused(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	// Stopped first: a running daemon sees the revocation and rejects the
	// request itself, sometimes before approve looks (then approve says it
	// is rejected, and its own check of the key is not what refused it).
	id := e.awaitingThenStopped(t, "gated")
	if _, err := e.host.Revoke(e.agent.Identity().SignKid()); err != nil {
		t.Fatal(err)
	}
	_, err := operator.Approve(e.host, id)
	if err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("approve of a request signed by a revoked key: %v", err)
	}
	e.daemon(t)
	out := e.wait(t, id)
	if out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "revoked" {
		t.Fatalf("answer: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	testkit.WaitFor(t, 5*time.Second, "pending to list nothing", func() bool { list, _ := operator.Pending(e.host); return len(list) == 0 })
	if n := e.starts(t, "gated", id); n != 0 {
		t.Fatalf("ran %d times", n)
	}
}

// Row "cancel" while awaiting approval: the request is answered cancelled
// at once, without anyone approving it.
func TestCancelAwaitingApproval(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	e.daemon(t)
	id := e.submit(t, "gated")
	testkit.WaitFor(t, 10*time.Second, "the request to await approval", func() bool {
		return e.entry(t, id).State == ledger.StateAwaitingApproval
	})
	if err := e.client.Cancel(id); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := e.client.Wait(ctx, id, nil)
	if err != nil {
		t.Fatalf("no answer to a cancel of a request awaiting approval: %v", err)
	}
	if out.Receipt.Status != bridge.StatusCancelled {
		t.Fatalf("answer: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	// (The answer is out a moment before the ledger records it.)
	testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateCancelled })
	if _, err := operator.Approve(e.host, id); err == nil {
		t.Fatal("a cancelled request could be approved")
	}
}

// Row "crash-rerun": an idempotent op re-run after a crash continues the
// progress chain its first run started, so the live output reads as one
// verified stream and the result commits to its head.
func TestProgressChainSurvivesRerun(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	e.block() // chatty prints until unblocked
	id := e.submit(t, "chatty")
	env := []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
	d := startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 15*time.Second, "two progress chunks", func() bool {
		chunks, _ := e.client.Progress(id, 1, "")
		return len(chunks) >= 2
	})
	d.Kill()
	e.unblock()
	startDaemonProcess(t, e.pair, env...)
	out := e.wait(t, id)
	if n := e.starts(t, "chatty", id); n != 2 {
		t.Fatalf("started %d times, want 2", n)
	}
	chunks, err := e.client.Progress(id, 1, "")
	if err != nil {
		t.Fatalf("the progress stream after a re-run: %v", err)
	}
	if len(chunks) == 0 || out.Receipt.ProgressCount != len(chunks) || out.Receipt.ProgressHead != chunks[len(chunks)-1].ChunkHash() {
		t.Fatalf("the result names %d chunks ending %.8s; the folder holds a chain of %d", out.Receipt.ProgressCount, out.Receipt.ProgressHead, len(chunks))
	}
}

// Row "approve"/"deny" by reference: agents choose their ids, so another
// agent publishing the same id must not block a decision. A decision takes
// AGENT/ID, and an id alone when one request of that id awaits approval.
func TestDecisionsByAgentAndID(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	other, err := trust.InitHome(filepath.Join(t.TempDir(), "other"), "agent", "other", e.folder)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.host.Trust(other.BundleText(), "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Trust(e.host.BundleText(), "laptop"); err != nil {
		t.Fatal(err)
	}
	oc, err := agent.OpenClient(other)
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	e.daemon(t)
	mine := e.submit(t, "gated")
	testkit.WaitFor(t, 10*time.Second, "the request to await approval", func() bool {
		return e.entry(t, mine).State == ledger.StateAwaitingApproval
	})
	// The other agent copies the id: its own request, under its own name.
	_, hb, _ := other.Peer(e.host.Config.ID)
	var payload strings.Builder
	now := time.Now()
	m, _, err := bridge.SealRequest(&payload, bridge.NewRequest{ID: mine, Agent: other.Identity(), AgentID: other.Config.ID, Host: hb,
		Call: bridge.Call{Op: "gated"}, Created: now, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.folder, bridge.ToHostDir(e.host.Config.ID, other.Config.ID))
	os.WriteFile(filepath.Join(dir, mine+".payload"), []byte(payload.String()), 0o644)
	os.WriteFile(filepath.Join(dir, mine+".manifest"), m, 0o644)
	testkit.WaitFor(t, 10*time.Second, "both requests to await approval", func() bool {
		list, _ := operator.Pending(e.host)
		return len(list) == 2
	})
	if _, err := operator.Approve(e.host, mine); err == nil || !strings.Contains(err.Error(), "cloud-1/"+mine) {
		t.Fatalf("approve by a shared id: %v; want a refusal naming cloud-1/%s", err, mine)
	}
	// The agent half is a local name or a whole id, never an id's prefix:
	// a peer could otherwise pick a name that reads as another's id (and
	// a name of hex digits alone is refused at trust for that reason).
	if _, err := operator.Approve(e.host, e.agent.Config.ID[:8]+"/"+mine); err == nil {
		t.Fatal("approve by an agent id's prefix was accepted")
	}
	if _, err := e.host.Trust(other.BundleText(), other.Config.ID[:8]); err == nil {
		t.Fatal("trust accepted a peer name that reads as an id")
	}
	if dec, err := operator.Approve(e.host, e.agent.Config.ID+"/"+mine); err != nil || dec.Ref != "cloud-1/"+mine {
		t.Fatalf("approve by the whole agent id: %+v, %v", dec, err)
	}
	if _, err := operator.Deny(e.host, "other/"+mine, "copied id"); err != nil {
		t.Fatalf("deny other/ID: %v", err)
	}
	// The same request by its local name: queued again, unless the daemon
	// already took the approval above (its orders are picked up within a
	// second, and a busy machine makes that any moment).
	taken := func(err error) bool { // claimed, running or done by now
		for _, st := range []string{"claimed", "running", "done"} {
			if strings.Contains(err.Error(), "cloud-1/"+mine+" is "+st) {
				return true
			}
		}
		return false
	}
	if dec, err := operator.Approve(e.host, "cloud-1/"+mine); err != nil && !taken(err) ||
		err == nil && (dec.Ref != "cloud-1/"+mine || !dec.Queued) {
		t.Fatalf("approve cloud-1/ID: %+v, %v", dec, err)
	}
	if out := e.wait(t, mine); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("approved request: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	if n := e.starts(t, "gated", mine); n != 1 {
		t.Fatalf("ran %d times", n)
	}
	testkit.WaitFor(t, 5*time.Second, "the copy to be denied", func() bool {
		for _, en := range mustEntries(t, e.host) {
			if en.Agent == other.Config.ID && en.ID == mine {
				return en.State == ledger.StateRejected && en.Reason == "denied"
			}
		}
		return false
	})
}

func mustEntries(t *testing.T, h *trust.Home) []ledger.Entry {
	t.Helper()
	entries, err := operator.LedgerEntries(h)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return entries
}

// Row "adopt": a crash between publishing an answer and recording it,
// after which the agent acks the answer and takes its files away. No
// evaluation would come back to the request: the next start adopts the
// sealed result, so the ledger does not stay non-terminal behind an answer
// (found by TestLifecycleModel).
func TestAnsweredBeforeCrashIsRecorded(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	id := e.submit(t, "missing") // answered failed (host-error): no run needed
	d := startCrashingDaemon(t, e.pair, "RUNS="+e.runs, "PATH="+e.env["PATH"], "BRIDGE_TEST_CRASH_AT=published")
	out := e.wait(t, id)
	<-d.Done
	if code := d.Cmd.ProcessState.ExitCode(); code != probe.CrashExit {
		t.Fatalf("the daemon exited %d, not at the injected crash", code)
	}
	if st := e.entry(t, id).State; st.Answered() {
		t.Fatalf("the crash came after the record (%s): the test did not test anything", st)
	}
	if err := e.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	startDaemonProcess(t, e.pair, "RUNS="+e.runs, "PATH="+e.env["PATH"])
	testkit.WaitFor(t, 10*time.Second, "the ledger to record the answer", func() bool { return e.entry(t, id).State == ledger.StateFailed })
}

// Rows "crash-unsure" and "rerun": a non-idempotent op interrupted by a
// crash is uncertain; a human's rerun runs it exactly once more, and its
// answer replaces the uncertain one.
func TestReconcileRerunRunsOnce(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	id, out, d, env := e.uncertainBlock(t)
	if out.Receipt.Reason != "crashed" {
		t.Fatalf("after the crash: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the rerun's answer", func() bool {
		out, err := e.client.Result(id)
		return err == nil && out.Receipt.Status == bridge.StatusDone && e.entry(t, id).State == ledger.StateDone
	})
	if n := e.starts(t, "block", id); n != 2 {
		t.Fatalf("started %d times, want 2 (once more for the rerun)", n)
	}
	if en := e.entry(t, id); en.Runs != 2 {
		t.Fatalf("ledger runs %d, want 2", en.Runs)
	}

	// An agent that took its files away (acking an uncertain answer does
	// not: TestAckKeepsFilesOfUncertain): a rerun is refused with what to
	// do, instead of waiting for ever.
	e.block()
	gone := e.submit(t, "block")
	testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, "block", gone) == 1 })
	d.Kill()
	e.unblock()
	d = startDaemonProcess(t, e.pair, env...)
	e.wait(t, gone)
	testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, gone).State == ledger.StateUncertain })
	for _, ext := range []string{"manifest", "payload"} {
		os.Remove(filepath.Join(e.toHost(), gone+"."+ext))
	}
	d.Kill() // Reconcile acts at once on a stopped daemon
	_, err := Reconcile(e.host, "cloud-1/"+gone, "rerun")
	var he *bridge.HintError
	if err == nil || !strings.Contains(err.Error(), "payload is not in the folder") || !errors.As(err, &he) {
		t.Fatalf("rerun without the payload: %v", err)
	}
	if st := e.entry(t, gone).State; st != ledger.StateUncertain {
		t.Fatalf("a refused rerun left the request %s", st)
	}
}

// Row "unclaim": a stop takes no new work. A request waiting for its op's
// slot when the daemon is told to stop does not start when the slot frees
// during the drain: it never started, so the next start runs it, and it is
// never answered uncertain (found by the red team).
func TestDrainStartsNothingNew(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	e.block()
	d := e.daemon(t)
	first := e.submit(t, "block") // concurrency 1
	testkit.WaitFor(t, 10*time.Second, "the first to run", func() bool { return e.starts(t, "block", first) == 1 })
	queued := e.submit(t, "block")
	testkit.WaitFor(t, 10*time.Second, "the second to wait", func() bool { return e.entry(t, queued).State == ledger.StateClaimed })
	go func() { time.Sleep(300 * time.Millisecond); e.unblock() }() // the first ends during the drain
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	stopDaemon(d, ctx)
	if n := e.starts(t, "block", queued); n != 0 {
		t.Fatalf("a request waiting for its slot started %d times after the stop began", n)
	}
	if out := e.wait(t, first); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the op that ran through the drain: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	e.daemon(t)
	if out := e.wait(t, queued); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the waiting request after the restart: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	if n := e.starts(t, "block", queued); n != 1 {
		t.Fatalf("started %d times", n)
	}
}

// A folder writer plants directories at a running request's result names:
// they are cleared and the answer is published, the entry ends done, and
// the next request for the op (concurrency 1) is not held up (found by the
// red team: the answer was retried for ever while the op's slot was held).
func TestSquattedResultNamesAreCleared(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	e.block()
	e.daemon(t)
	first := e.submit(t, "block")
	testkit.WaitFor(t, 10*time.Second, "the first to run", func() bool { return e.starts(t, "block", first) == 1 })
	next := e.submit(t, "block")
	for _, ext := range []string{"result", "output"} {
		if err := os.MkdirAll(filepath.Join(e.toAgent(), first+"."+ext, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.unblock()
	if out := e.wait(t, first); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the squatted request: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	if out := e.wait(t, next); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the request after it: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to record both", func() bool {
		return e.entry(t, first).State == ledger.StateDone && e.entry(t, next).State == ledger.StateDone
	})
}

// Row "adopt" from no entry: a request denied on the host comes back after
// its record was lost (a ledger restored from a backup). The rejection this
// host signed is what happened: the entry is created rejected (record-lost)
// with that very result, and the request never waits for a human again.
func TestLostRecordOfARefusalKeepsItsAnswer(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	d, before := e.backedUp(t)
	id := e.submit(t, "gated")
	testkit.WaitFor(t, 10*time.Second, "the request to await approval", func() bool {
		return e.entry(t, id).State == ledger.StateAwaitingApproval
	})
	if _, err := operator.Deny(e.host, id, "not today"); err != nil {
		t.Fatal(err)
	}
	first := e.wait(t, id)
	if first.Receipt.Status != bridge.StatusRejected || first.Receipt.Reason != "denied" {
		t.Fatalf("denied: %s (%s)", first.Receipt.Status, first.Receipt.Reason)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to record the denial", func() bool { return e.entry(t, id).State == ledger.StateRejected })
	stopDaemon(d, context.Background())
	testkit.RestoreLedger(t, e.host, before)
	if rep, err := RepairLedger(e.host); err != nil || !slices.Contains(rep.Lost, "cloud-1/"+id) {
		t.Fatalf("repair after the restore: %v, lost %v", err, rep.Lost)
	}
	if got := e.entry(t, id); got.State != "" {
		t.Fatalf("the test did not lose the record: %s", got.State)
	}
	d = e.daemon(t)
	testkit.WaitFor(t, 10*time.Second, "the request to be recorded again", func() bool { return e.entry(t, id).State != "" })
	settleRescans(t, d)
	got := e.entry(t, id)
	if got.State != ledger.StateRejected || got.Reason != "record-lost" || got.ResultSHA256 != bridge.SHA256Hex(first.Manifest) {
		t.Fatalf("ledger: %s (%s), result %.12s; want rejected, record-lost, the denial's result %.12s",
			got.State, got.Reason, got.ResultSHA256, bridge.SHA256Hex(first.Manifest))
	}
	if out, err := e.client.Result(id); err != nil || !bytes.Equal(out.Manifest, first.Manifest) {
		t.Fatalf("the agent's answer changed: %v", err)
	}
	if n := e.starts(t, "gated", id); n != 0 {
		t.Fatalf("a denied request ran %d times", n)
	}
	if w, err := operator.Pending(e.host); err != nil || len(w) != 0 {
		t.Fatalf("a denied request waits for a human again: %+v, %v", w, err)
	}
}

// Rows "record-lost" and "catch-up" for an entry that exists but is behind
// what the host did (found by the red team): a whole home restored from a
// backup taken while the request waited for its payload (the ledger then
// records the result found in the folder), and a repair that drops the
// record of a run (held uncertain). Neither runs the request again.
func TestLedgerBehindNeverRunsAgain(t *testing.T) {
	t.Parallel()
	t.Run("home restored", func(t *testing.T) {
		e := newEdge(t)
		id, manifest, payload := e.sealManual(t, "blockidem", map[string]string{}, nil)
		os.WriteFile(filepath.Join(e.toHost(), id+".manifest"), manifest, 0o644) // the payload is still syncing
		d := e.daemon(t)
		testkit.WaitFor(t, 10*time.Second, "the request to wait for its payload", func() bool { return e.entry(t, id).State == ledger.StatePending })
		stopDaemon(d, context.Background())
		backup := filepath.Join(t.TempDir(), "home")
		if err := exec.Command("cp", "-a", e.hostHome, backup).Run(); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(e.toHost(), id+".payload"), payload, 0o644)
		d = e.daemon(t)
		if out := e.wait(t, id); out.Receipt.Status != bridge.StatusDone {
			t.Fatalf("first run: %s", out.Receipt.Status)
		}
		stopDaemon(d, context.Background())
		os.RemoveAll(e.hostHome)
		if err := exec.Command("cp", "-a", backup, e.hostHome).Run(); err != nil {
			t.Fatal(err)
		}
		if _, err := RepairLedger(e.host); err != nil {
			t.Fatal(err)
		}
		d = e.daemon(t)
		testkit.WaitFor(t, 10*time.Second, "the ledger to record the result this host signed", func() bool {
			got := e.entry(t, id)
			return got.State == ledger.StateDone && got.Reason == "record-lost"
		})
		settleRescans(t, d)
		if n := e.starts(t, "blockidem", id); n != 1 {
			t.Fatalf("ran %d times after the home was restored", n)
		}
		if out := e.wait(t, id); out.Receipt.Status != bridge.StatusDone {
			t.Fatalf("the agent's answer changed to %s", out.Receipt.Status)
		}
	})
	t.Run("run record repaired away", func(t *testing.T) {
		e := newEdge(t)
		e.block()
		id := e.submit(t, "block")
		env := []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
		d := startDaemonProcess(t, e.pair, env...)
		testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, "block", id) == 1 })
		d.Kill()
		e.unblock()
		db := e.host.Path("ledger", "ledger.db")
		data, err := os.ReadFile(db)
		if err != nil {
			t.Fatal(err)
		}
		at := bytes.LastIndex(data, []byte(`"state":"running"`))
		if at < 0 {
			t.Fatal("no running record in the ledger")
		}
		data[at+1] = 'X' // the last record, the run's, is damaged
		os.WriteFile(db, data, 0o600)
		os.Remove(db + ".checked")
		rep, err := RepairLedger(e.host)
		if err != nil || !rep.Damaged {
			t.Fatalf("repair: %+v, %v", rep, err)
		}
		if st := e.entry(t, id).State; st != ledger.StateClaimed {
			t.Fatalf("the repair left %s; the test wants the run's record dropped (claimed)", st)
		}
		startDaemonProcess(t, e.pair, env...)
		out := e.wait(t, id)
		if out.Receipt.Status != bridge.StatusUncertain || out.Receipt.Reason != "record-lost" {
			t.Fatalf("after the repair: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
		}
		if n := e.starts(t, "block", id); n != 1 {
			t.Fatalf("ran %d times after the repair", n)
		}
	})
}

// Rows "incomplete" and "rerun-refused": a request whose files leave the
// folder while it waits (its agent gave up; for a human's rerun, its agent
// took them away) is answered once the pending timeout passed, instead of
// waiting for ever where no file event brings the daemon back to it
// (found by the red team and a new user: a rerun stayed pending).
func TestStalledRequestsAreAnswered(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	// Never complete: the payload never comes, then the manifest goes.
	id, manifest, _ := e.sealManual(t, "blockidem", map[string]string{}, nil)
	os.WriteFile(filepath.Join(e.toHost(), id+".manifest"), manifest, 0o644)
	// Run once, interrupted: uncertain.
	e.block()
	ran := e.submit(t, "block")
	env := []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
	d := startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 10*time.Second, "the op to start and the other to wait", func() bool {
		return e.starts(t, "block", ran) == 1 && e.entry(t, id).State == ledger.StatePending
	})
	d.Kill()
	e.unblock()
	d = startDaemonProcess(t, e.pair, env...)
	if out := e.wait(t, ran); out.Receipt.Status != bridge.StatusUncertain {
		t.Fatalf("after the crash: %s", out.Receipt.Status)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, ran).State == ledger.StateUncertain })
	d.Kill()
	if _, err := Reconcile(e.host, "cloud-1/"+ran, "rerun"); err != nil {
		t.Fatal(err)
	}
	// Both requests' files leave the folder.
	for _, rid := range []string{id, ran} {
		for _, ext := range []string{"manifest", "payload"} {
			os.Remove(filepath.Join(e.toHost(), rid+"."+ext))
		}
	}
	runDaemon(t, e.host, DaemonOptions{Rescan: 300 * time.Millisecond, PendingTimeout: time.Second, Env: envWith(e.env)})
	if out := e.wait(t, id); out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "incomplete" {
		t.Fatalf("a request whose files left before it was complete: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	testkit.WaitFor(t, 10*time.Second, "the rerun to be answered", func() bool {
		out, err := e.client.Result(ran)
		return err == nil && out.Receipt.Reason == "rerun-refused" && e.entry(t, ran).State == ledger.StateUncertain
	})
	if n := e.starts(t, "block", ran); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}

// A request from before the start that waits for its files, alone in the
// ledger, its manifest gone while no daemon ran, is answered by the
// stalled sweep of the next start: the start's look at the ledger finds
// it (no event of this start's brings the daemon to it).
func TestStalledFromBeforeTheStartIsSwept(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	id, _, _ := e.pendingThenStopped(t, "blockidem")
	os.Remove(filepath.Join(e.toHost(), id+".manifest"))
	opt := e.options()
	opt.PendingTimeout = time.Second
	runDaemon(t, e.host, opt)
	if out := e.wait(t, id); out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "incomplete" {
		t.Fatalf("a request whose files left while no daemon ran: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
}

// A request from before the start that awaits approval, alone in the
// ledger, its files gone and its key revoked while no daemon ran, is
// answered by the approval sweep of the next start: the start's look at the
// ledger finds it.
func TestAwaitingFromBeforeTheStartIsSwept(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	id := e.awaitingThenStopped(t, "gated")
	for _, ext := range []string{"manifest", "payload"} {
		os.Remove(filepath.Join(e.toHost(), id+"."+ext))
	}
	if _, err := e.host.Revoke(e.agent.Identity().SignKid()); err != nil {
		t.Fatal(err)
	}
	e.daemon(t)
	if out := e.wait(t, id); out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "revoked" {
		t.Fatalf("a request awaiting approval whose key was revoked while no daemon ran: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
}

// Invariant 3, lazy records: seen and claimed are not fsynced on their own.
// A power cut after the claim (the ledger file cut to its last fsync) loses
// both; the request never started, so the next start runs it once and
// answers done, never uncertain: its kept manifest takes the name that is
// evidence of admission only once its record is on disk.
func TestLostLazyRecordRunsOnce(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	id := e.submit(t, "block") // not idempotent; runs at once without .block
	env := []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
	d := startCrashingDaemon(t, e.pair, append(env, "BRIDGE_TEST_CRASH_AT=claimed", "BRIDGE_TEST_POWER_CUT=1")...)
	<-d.Done
	if code := d.Cmd.ProcessState.ExitCode(); code != probe.CrashExit {
		t.Fatalf("the daemon exited %d, not at the injected crash", code)
	}
	if st := e.entry(t, id).State; st != "" {
		t.Fatalf("after the power cut the ledger holds %s: the claim was fsynced, the test tests nothing", st)
	}
	startDaemonProcess(t, e.pair, env...)
	out := e.wait(t, id)
	if out.Receipt.Status != bridge.StatusDone || out.Receipt.Reason != "" {
		t.Fatalf("after a power cut that lost the claim: %s (%s: %s), want done", out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail)
	}
	if n := e.starts(t, "block", id); n != 1 {
		t.Fatalf("the op started %d times, want 1", n)
	}
	testkit.WaitFor(t, 10*time.Second, "the ledger to record it", func() bool {
		ent := e.entry(t, id)
		return ent.State == ledger.StateDone && ent.Runs == 1
	})
}

// A folder writer's junk at a waiting request's manifest name must not keep
// it waiting for ever: evaluations refuse the junk (and rescans then skip
// it), so the stalled sweep counts the request's manifest as gone unless
// the bytes there are the ones the ledger recorded (found by the red team).
func TestJunkAtAWaitingManifestStillAnswered(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	id, manifest, _ := e.sealManual(t, "blockidem", map[string]string{}, nil) // its payload never comes
	mpath := filepath.Join(e.toHost(), id+".manifest")
	must(t, os.WriteFile(mpath, manifest, 0o644))
	runDaemon(t, e.host, DaemonOptions{Rescan: 300 * time.Millisecond, PendingTimeout: time.Second, Env: envWith(e.env)})
	testkit.WaitFor(t, 10*time.Second, "the request to wait for its payload", func() bool { return e.entry(t, id).State == ledger.StatePending })
	must(t, os.WriteFile(mpath, []byte("BRA1 not a manifest any more"), 0o644))
	if out := e.wait(t, id); out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "incomplete" {
		t.Fatalf("a waiting request whose manifest became junk: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
}

// Junk a folder writer put at a running request's cancel name before its
// agent cancels: the agent's cancel replaces it (its own earlier cancel
// would stand), so the op is cancelled, and `bridge cancel` never reports
// a cancel that the host will refuse (found by the red team).
func TestCancelReplacesJunkAtItsName(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	e.block()
	defer e.unblock()
	e.daemon(t)
	id := e.submit(t, "block")
	testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, "block", id) == 1 })
	must(t, os.WriteFile(filepath.Join(e.toHost(), id+"."+bridge.ExtCancel), []byte("BRA1 junk"), 0o644))
	if err := e.client.Cancel(id); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	testkit.WaitFor(t, 10*time.Second, "the op to be cancelled", func() bool { return e.entry(t, id).State == ledger.StateCancelled })
}
