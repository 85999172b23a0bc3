package systest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
)

// crashLoopPolicy's ops append "start-<id>" and "end-<id>" to COUNT_FILE,
// so the test counts how often each request's op started and finished.
// Each prints "started-<id>" once it started (and, for those with a child,
// once the child is on its way): the "mid-run" crash comes at the op's
// first output, so inside the run, whatever the machine's load.
const crashLoopPolicy = `
[ops.once]
argv = ["sh", "-c", "echo start-$1 >> \"$COUNT_FILE\"; echo started-$1; sleep 0.8; echo end-$1 >> \"$COUNT_FILE\"; echo out-$1", "once", "{request_id}"]
env = ["PATH", "COUNT_FILE"]
idempotent = false

[ops.again]
argv = ["sh", "-c", "echo start-$1 >> \"$COUNT_FILE\"; echo started-$1; sleep 0.8; echo end-$1 >> \"$COUNT_FILE\"; echo out-$1", "again", "{request_id}"]
env = ["PATH", "COUNT_FILE"]
idempotent = true

[ops.fails]
argv = ["sh", "-c", "echo start-$1 >> \"$COUNT_FILE\"; echo started-$1; sleep 0.8; echo end-$1 >> \"$COUNT_FILE\"; echo out-$1; echo err-$1 >&2; exit 3", "fails", "{request_id}"]
env = ["PATH", "COUNT_FILE"]
idempotent = true

# Not idempotent, but its reconcile command can tell whether the op
# started: after a crash while it ran, it is run once more only if not.
[ops.checked]
argv = ["sh", "-c", "echo start-$1 >> \"$COUNT_FILE\"; echo started-$1; sleep 0.8; echo end-$1 >> \"$COUNT_FILE\"; echo out-$1", "checked", "{request_id}"]
reconcile = ["sh", "-c", "if grep -qx start-$1 \"$COUNT_FILE\"; then echo seen-$1; exit 0; fi; exit 3", "checked", "{request_id}"]
env = ["PATH", "COUNT_FILE"]
idempotent = false

# The effect is a child's that outlives nothing in a clean run (the
# program waits for it before its last line: a 0.3 s margin between the
# two sleeps let a loaded machine start the child late, and the end of
# the run killed it before its effect, once in CI), but does outlive the
# program when a crash kills it: the child notes its pid in
# COUNT_FILE.<id>.children, so the test can tell that none lives when the
# answer comes.
[ops.bgonce]
argv = ["sh", "-c", "echo start-$1 >> \"$COUNT_FILE\"; sh -c 'echo $$ >> \"$COUNT_FILE.$1.children\"; sleep 0.5; echo end-$1 >> \"$COUNT_FILE\"' child \"$1\" </dev/null >/dev/null 2>&1 & echo started-$1; sleep 0.8; wait; echo out-$1", "bgonce", "{request_id}"]
env = ["PATH", "COUNT_FILE"]
idempotent = false

# The same, with a reconcile command that looks for the child's effect.
[ops.bgchecked]
argv = ["sh", "-c", "echo start-$1 >> \"$COUNT_FILE\"; sh -c 'echo $$ >> \"$COUNT_FILE.$1.children\"; sleep 0.5; echo end-$1 >> \"$COUNT_FILE\"' child \"$1\" </dev/null >/dev/null 2>&1 & echo started-$1; sleep 0.8; wait; echo out-$1", "bgchecked", "{request_id}"]
reconcile = ["sh", "-c", "if grep -qx end-$1 \"$COUNT_FILE\"; then echo seen-$1; exit 0; fi; exit 3", "bgchecked", "{request_id}"]
env = ["PATH", "COUNT_FILE"]
idempotent = false

[ops.denied]
argv = ["true"]

[agents.cloud-1]
ops = ["once", "again", "fails", "checked", "bgonce", "bgchecked"]
`

// crashOp is one kind of request of the crash loop.
type crashOp struct {
	name       string
	idempotent bool
	reconcile  bool // has a reconcile command that tells whether it started
	runs       bool // false: refused by the policy, never claimed or run
	exit       int
	// child: its effect is a background child's, which outlives the
	// program when a crash kills it; with reconcile, the command looks for
	// that effect, not for the start.
	child bool
}

var crashOps = []crashOp{
	{name: "once", runs: true},
	{name: "again", idempotent: true, runs: true},
	{name: "fails", idempotent: true, runs: true, exit: 3},
	{name: "checked", reconcile: true, runs: true},
	{name: "bgonce", runs: true, child: true},
	{name: "bgchecked", reconcile: true, runs: true, child: true},
	{name: "denied"}, // reaches only the steps of publishing a result
}

// reaches reports whether a request for op passes the crash step.
func (op crashOp) reaches(step string) bool {
	switch step {
	case "claimed", "running", "mid-run":
		return op.runs
	}
	return true
}

// crashWant is what a request must end as after a crash at a step and one
// clean restart (DESIGN invariant 5 and Daemon.recover): a claimed request
// never started and is evaluated again; a running one is re-run if its op is
// idempotent, else its reconcile command decides (exit 0: it happened, done
// as "reconciled"; exit 3: run once more), and without one it is uncertain;
// a sealed result is adopted and nothing runs again.
type crashWant struct {
	status       string
	reason       string
	startsMin    int
	startsMax    int
	ends         int
	runs         int          // ledger Runs: entries into running
	crashedState ledger.State // the ledger state the crash left
}

func wantAfterCrash(step string, op crashOp) crashWant {
	if !op.runs {
		w := crashWant{status: bridge.StatusRejected, reason: "not-allowed", crashedState: ledger.StateSeen}
		if step == "recorded" {
			w.crashedState = ledger.StateRejected
		}
		return w
	}
	w := crashWant{status: bridge.StatusDone, startsMin: 1, startsMax: 1, ends: 1, runs: 1, crashedState: ledger.StateRunning}
	switch step {
	case "claimed":
		w.crashedState = ledger.StateClaimed
	case "running": // running is durable, the process was not started yet
		switch {
		case op.idempotent, op.reconcile: // re-run; the reconcile check finds no start
			w.runs = 2
		default:
			w = crashWant{status: bridge.StatusUncertain, reason: "crashed", runs: 1, crashedState: ledger.StateRunning}
		}
	case "mid-run": // the op started (it printed) and was killed with the daemon
		switch {
		case op.idempotent:
			w.startsMax, w.runs = 2, 2
		case op.reconcile && op.child:
			// The crash ended the child before its effect (no process of
			// the run outlives the daemon): the check finds none, and the
			// op runs once more, to one effect.
			w = crashWant{status: bridge.StatusDone, startsMin: 2, startsMax: 2, ends: 1, runs: 2, crashedState: ledger.StateRunning}
		case op.reconcile: // the check finds the start: done, not run again
			w = crashWant{status: bridge.StatusDone, reason: "reconciled", startsMin: 1, startsMax: 1, runs: 1, crashedState: ledger.StateRunning}
		default:
			w = crashWant{status: bridge.StatusUncertain, reason: "crashed", startsMax: 1, runs: 1, crashedState: ledger.StateRunning}
		}
	case "gc", "recorded":
		w.crashedState = ledger.StateDone
	}
	return w
}

// Crash-injection steps, in pipeline order (DESIGN §4).
var crashSteps = []string{"claimed", "running", "mid-run", "kept-output", "kept", "published-output", "published", "gc"}

// startCrashProc starts a daemon process that exits at step at ("": none),
// its ops counting in countFile.
func startCrashProc(t *testing.T, p *pair, at, countFile string, powerCut bool) *testkit.Process {
	t.Helper()
	env := []string{"COUNT_FILE=" + countFile}
	if powerCut {
		env = append(env, "BRIDGE_TEST_POWER_CUT=1")
	}
	if p.skew > 0 {
		env = append(env, "BRIDGE_TEST_SKEW="+p.skew.String())
	}
	return testkit.StartCrashing(t, p.hostHome, at, env...)
}

// crashAuditEvents returns the host audit log's events of one request.
func crashAuditEvents(t *testing.T, p *pair, id, event string) []host.AuditEvent {
	t.Helper()
	data, err := os.ReadFile(p.host.Path("audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []host.AuditEvent
	for _, line := range bytes.Split(data, []byte("\n")) {
		var e host.AuditEvent
		if len(line) == 0 || json.Unmarshal(line, &e) != nil {
			continue
		}
		if e.ID == id && e.Event == event {
			out = append(out, e)
		}
	}
	return out
}

// crashFolderFiles lists the names in the agent's result directory that belong
// to request id (results, outputs, and any temp or junk carrying the id).
// Progress chunks are left out: an op that runs past the progress interval
// (a loaded machine makes the ops' 0.8 s sleep longer) leaves one, rightly,
// and it is collected with the result, not part of the answer.
func crashFolderFiles(t *testing.T, p *pair, id string) []string {
	t.Helper()
	entries, err := os.ReadDir(p.toAgent())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.Contains(e.Name(), id) && !strings.HasPrefix(e.Name(), id+".progress-") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// TestCrashAtEveryDurableStep crashes a real daemon process (os.Exit, as a
// power cut would stop it) at each durable step of the pipeline in turn, for
// a non-idempotent op, two idempotent ops (one exiting 3), a non-idempotent
// op with a reconcile command and a request the policy refuses, then
// restarts a clean daemon and checks: every request gets exactly one result,
// which the agent verifies; the result the crash left sealed or published is
// the one adopted; a non-idempotent op never starts twice, and ends
// uncertain only if it was running and has no reconcile command; the ledger ends
// in the state the result names, with the right count of runs; the folder
// holds exactly the request's result pair; and a collection a crash
// interrupted completes after the restart.
//
// Its steps run in parallel with each other and the test beside the
// package's others: each step's waits for its crash and restart are bounded
// generously (seconds of work against tens of seconds), and the gc step,
// whose requests live 2-3 s (a TTL of 3 s, the expiry in whole seconds),
// starts its daemon before it writes one. The gc
// step's ops run at once too, each on a pair of its own (crashGCStep).
func TestCrashAtEveryDurableStep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a system suite: -short leaves it out (docs/TESTING.md, \"Running\")")
	}
	var (
		mu    sync.Mutex
		table = map[string]map[string]string{}
	)
	record := func(step, op, outcome string) {
		mu.Lock()
		defer mu.Unlock()
		if table[step] == nil {
			table[step] = map[string]string{}
		}
		table[step][op] = outcome
	}
	t.Run("steps", func(t *testing.T) {
		for _, step := range crashSteps {
			t.Run(step, func(t *testing.T) {
				t.Parallel()
				if step == "gc" {
					crashGCStep(t, record)
					return
				}
				p := newPair(t, crashLoopPolicy)
				countFile := filepath.Join(t.TempDir(), "count")
				for _, op := range crashOps {
					if !op.reaches(step) {
						record(step, op.name, "(not reached)")
						continue
					}
					completed := false
					t.Run(op.name, func(t *testing.T) {
						record(step, op.name, "FAILED")
						outcome := crashInPipeline(t, p, step, op, countFile, false)
						if t.Failed() {
							outcome = "FAILED: " + outcome
						}
						record(step, op.name, outcome)
						completed = true
					})
					if !completed {
						break // stopped half way: the pair's state is unknown
					}
				}
			})
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "crash step × op → outcome after one clean restart\n%-17s", "step")
	for _, op := range crashOps {
		fmt.Fprintf(&b, " | %-44s", op.name)
	}
	for _, step := range crashSteps {
		fmt.Fprintf(&b, "\n%-17s", step)
		for _, op := range crashOps {
			fmt.Fprintf(&b, " | %-44s", table[step][op.name])
		}
	}
	t.Logf("%s", b.String())
}

// A power cut at each durable step from running on loses what the daemon
// wrote without an fsync (probe.PowerCut): the ledger's lazy writes, the
// kept manifest, whose bytes the ledger's record carries instead, and the
// result published into the folder, whose private copies were kept first.
// Recovery ends each request as a crash there does (wantAfterCrash): the
// manifest is read back from the record, the result published again from
// the copies, never sealed anew. (At claimed the power cut loses the
// record itself: TestLostLazyRecordRunsOnce in package host.)
func TestPowerCutAtEveryDurableStep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a system suite: -short leaves it out (docs/TESTING.md, \"Running\")")
	}
	ops := []crashOp{crashOps[0], crashOps[1], crashOps[3], crashOps[6]} // once, again, checked, denied
	for _, step := range []string{"running", "mid-run", "kept-output", "kept", "published-output", "published", "recorded"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			p := newPair(t, crashLoopPolicy)
			countFile := filepath.Join(t.TempDir(), "count")
			for _, op := range ops {
				if !op.reaches(step) {
					continue
				}
				if !t.Run(op.name, func(t *testing.T) {
					t.Logf("%s", crashInPipeline(t, p, step, op, countFile, true))
				}) {
					break // stopped half way: the pair's state is unknown
				}
			}
		})
	}
}

// A red team (session 30): the finished cache vouches for a published
// result by its size and modification time, and a rescan skips a request
// it vouches for. A result is published without a flush; a power cut after
// the cache was saved, on a file system that keeps a file's size and time
// but not its bytes (probe.CutZeros), would leave zeros the cache vouches
// for, never published again, and the agent would wait for ever. The
// cache's save flushes the results it vouches for first (flushRels).
func TestPowerCutBehindTheFinishedCache(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a system suite: -short leaves it out (docs/TESTING.md, \"Running\")")
	}
	p := newPair(t, crashLoopPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	s, err := p.client.Submit(agent.SubmitOptions{Op: "once"})
	if err != nil {
		t.Fatal(err)
	}
	c := testkit.StartCrashing(t, p.hostHome, "cache-saved", "COUNT_FILE="+countFile, "BRIDGE_TEST_POWER_CUT=zeros")
	testkit.WaitFor(t, 10*time.Second, "the ledger to record the answer", func() bool { return p.entry(t, s.ID).State == ledger.StateDone })
	// A clean stop saves the cache (a periodic collection may have saved
	// it already, and crashed there): the power cut comes right after.
	c.Cmd.Process.Signal(syscall.SIGTERM)
	c.WaitCrash(t, "cache-saved")
	kept, err := os.ReadFile(operator.KeptManifestPath(p.host, p.agent.Config.ID, s.ID, bridge.ExtManifest))
	if err != nil || len(kept) == 0 || bytes.ContainsFunc(kept, func(r rune) bool { return r != 0 }) {
		t.Fatalf("the power cut did not zero the kept manifest (%v): the test tests nothing", err)
	}
	// What the cache vouches for was flushed before it was saved, so the
	// cut left it whole. (A zero-filled copy would now be found all the
	// same, by its change time, which no simulated cut can put back: this
	// is what shows the flush.)
	for _, ext := range []string{bridge.ExtResult, bridge.ExtOutput} {
		folder, ferr := os.ReadFile(filepath.Join(p.toAgent(), s.ID+"."+ext))
		home, herr := os.ReadFile(p.host.Path("results", p.agent.Config.ID, s.ID+"."+ext))
		if ferr != nil || herr != nil || !bytes.Equal(folder, home) {
			t.Fatalf("the result's %s the cache vouched for was not flushed before it was saved: the cut took it (%v, %v)", ext, ferr, herr)
		}
	}
	testkit.WaitLockFree(t, p.host)
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	out := p.wait(t, s.ID)
	if out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("after the power cut: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	if n := testkit.Count(t, countFile, "start-"+s.ID); n != 1 {
		t.Fatalf("the op started %d times, want 1", n)
	}
	p.stop(t)
}

// crashInPipeline submits one request, lets a daemon process crash at the
// step, restarts a clean daemon and checks the invariants. It returns the
// outcome for the table.
func crashInPipeline(t *testing.T, p *pair, at string, op crashOp, countFile string, powerCut bool) string {
	s, err := p.client.Submit(agent.SubmitOptions{Op: op.name})
	if err != nil {
		t.Fatal(err)
	}
	id := s.ID
	c := startCrashProc(t, p, at, countFile, powerCut)
	c.WaitCrash(t, at)
	want := wantAfterCrash(at, op)
	if powerCut && want.crashedState == ledger.StateSeen {
		want.crashedState = "" // its lazy seen is gone with the cut
	}
	if powerCut {
		// What the daemon wrote without an fsync is gone: the kept
		// manifest above all, which the record carries instead.
		for _, ext := range []string{bridge.ExtManifest, operator.ExtUnrecorded} {
			if data, err := os.ReadFile(operator.KeptManifestPath(p.host, p.agent.Config.ID, id, ext)); err == nil && len(data) > 0 {
				t.Fatalf("the power cut left the kept manifest (.%s) whole: the test tests nothing", ext)
			}
		}
		for _, ext := range []string{bridge.ExtOutput, bridge.ExtResult} {
			if data, err := os.ReadFile(filepath.Join(p.toAgent(), id+"."+ext)); err == nil && len(data) > 0 {
				t.Fatalf("the power cut left the published %s whole: the test tests nothing", ext)
			}
		}
	}

	// What the crash left.
	crashed := p.entry(t, id)
	if crashed.State != want.crashedState {
		t.Fatalf("after the crash the ledger holds %s, want %s:\n%s", crashed.State, want.crashedState, c.LogText())
	}
	staged, _ := os.ReadFile(p.host.Path("results", p.agent.Config.ID, id+"."+bridge.ExtResult))
	left := crashFolderFiles(t, p, id)
	var wantLeft []string
	switch at {
	case "published-output":
		wantLeft = []string{id + "." + bridge.ExtOutput}
	case "published", "recorded":
		wantLeft = []string{id + "." + bridge.ExtOutput, id + "." + bridge.ExtResult}
	}
	if !powerCut && strings.Join(left, " ") != strings.Join(wantLeft, " ") { // a cut may take names
		t.Fatalf("after a crash at %s the folder holds %q, want %q", at, left, wantLeft)
	}
	switch at {
	case "kept", "published-output", "published", "recorded": // the private copies are kept before the publish
		if staged == nil {
			t.Fatalf("a crash at %s left no sealed result", at)
		}
	default:
		if staged != nil {
			t.Fatalf("a crash at %s left a sealed result", at)
		}
	}
	var published []byte
	if at == "published" && !powerCut { // the cut tore the folder's copy: the agent waits on
		// The agent already has its answer, though the ledger is not final.
		pub, err := p.client.Result(id)
		if err != nil {
			t.Fatalf("the published result before recovery: %v", err)
		}
		published = pub.Manifest
	}
	if at == "published" {
		// The private copies are kept: recovery publishes them again,
		// whatever the folder holds by then. A folder writer garbles the
		// published result meanwhile (the red team's way to turn a
		// finished run uncertain, when the folder's copy was the only one);
		// a power cut has emptied it already.
		if !powerCut {
			if err := os.WriteFile(filepath.Join(p.toAgent(), id+"."+bridge.ExtResult), []byte("junk"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	// One clean restart, once the crashed daemon's lock is free: the
	// kernel releases it when the last descriptor of the dead process's
	// lock file closes, which on a loaded machine can lag its exit status
	// (seen once in CI: "locked by another process" at once after it).
	testkit.WaitLockFree(t, p.host)
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	out := p.wait(t, id)
	if op.child {
		// Never an answer while a process of the run lives.
		for _, pid := range testkit.OpChildren(t, countFile, id) {
			if testkit.Alive(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("answered %s while a child (%d) of a run lived", out.Receipt.Status, pid)
			}
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the ledger to record the result", func() bool {
		e := p.entry(t, id)
		return e.ResultSHA256 != "" && (e.State.Terminal() || e.State == ledger.StateUncertain)
	})
	p.stop(t)

	if out.Receipt.Status != want.status {
		t.Fatalf("status %s (%s: %s), want %s", out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail, want.status)
	}
	if string(out.Receipt.Reason) != want.reason {
		t.Errorf("%s with reason %q (%s), want %q", out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail, want.reason)
	}
	switch {
	case want.reason == "reconciled":
		if out.Receipt.ExitCode != 0 || string(out.Stdout) != "seen-"+id+"\n" {
			t.Errorf("reconciled with exit %d and stdout %q, want the reconcile command's seen-%s", out.Receipt.ExitCode, out.Stdout, id)
		}
	case want.status == bridge.StatusDone:
		wantErr := ""
		if op.exit != 0 {
			wantErr = "err-" + id + "\n"
		}
		if out.Receipt.ExitCode != op.exit || string(out.Stdout) != "started-"+id+"\nout-"+id+"\n" || string(out.Stderr) != wantErr {
			t.Errorf("done with exit %d, stdout %q and stderr %q; want %d, started-%s out-%s and %q", out.Receipt.ExitCode, out.Stdout, out.Stderr, op.exit, id, id, wantErr)
		}
	}
	if staged != nil && !bytes.Equal(out.Manifest, staged) {
		t.Error("the result sealed before the crash was not the one published")
	}
	if published != nil && !bytes.Equal(out.Manifest, published) {
		t.Error("the result published before the crash was replaced by another")
	}
	starts, ends := testkit.Count(t, countFile, "start-"+id), testkit.Count(t, countFile, "end-"+id)
	if starts < want.startsMin || starts > want.startsMax || ends != want.ends {
		t.Errorf("the op started %d and finished %d times; want %d..%d and %d", starts, ends, want.startsMin, want.startsMax, want.ends)
	}
	e := p.entry(t, id)
	if e.State != ledger.State(want.status) || e.ResultSHA256 != bridge.SHA256Hex(out.Manifest) || e.Runs != want.runs {
		t.Errorf("ledger: %s result %.12s runs %d; want %s result %.12s runs %d", e.State, e.ResultSHA256, e.Runs,
			ledger.State(want.status), bridge.SHA256Hex(out.Manifest), want.runs)
	}
	if kept, err := os.ReadFile(operator.KeptManifestPath(p.host, p.agent.Config.ID, id, bridge.ExtManifest)); (err != nil || bridge.SHA256Hex(kept) != e.ManifestSHA256) &&
		!(powerCut && crashed.State.Terminal()) {
		// The evidence a lost ledger would leave: made whole again by
		// recovery after a power cut emptied it. (One that came after
		// the answer leaves the sealed result as the evidence: the record
		// no longer carries the manifest. The private copy's check below.)
		t.Errorf("the kept manifest is not whole after recovery (%v)", err)
	}
	if carries := e.Manifest != nil; carries != (e.State == ledger.StateUncertain) {
		// An uncertain request is reloaded from its record (reconcile, a
		// rerun) when its kept copy is gone (a power cut); an answered one never.
		t.Errorf("ledger: a %s record carries its manifest: %v", e.State, carries)
	}
	if files := crashFolderFiles(t, p, id); strings.Join(files, " ") != id+"."+bridge.ExtOutput+" "+id+"."+bridge.ExtResult {
		t.Errorf("the folder holds %q for the request, want its one result pair", files)
	}
	private, err := os.ReadFile(p.host.Path("results", p.agent.Config.ID, id+"."+bridge.ExtResult))
	if err != nil || !bytes.Equal(private, out.Manifest) {
		t.Errorf("the host's private copy differs from the published result (%v)", err)
	}
	if powerCut && want.crashedState == "" && at != "kept-output" {
		// The cut lost its record with its answer kept: a request new to
		// the ledger that this host answered before (record-lost, and the
		// answer adopted), not a result recorded after a run. (At
		// kept-output its manifest was still staged, which is no evidence:
		// it is answered afresh, nothing having been published.)
		if ev := crashAuditEvents(t, p, id, "record-lost"); len(ev) != 1 {
			t.Errorf("audit: %d record-lost events (%+v), want one", len(ev), ev)
		}
	} else if ev := crashAuditEvents(t, p, id, "result"); len(ev) != 1 || ev[0].Status != want.status {
		t.Errorf("audit: %d result events (%+v), want one %s", len(ev), ev, want.status)
	}
	// Acked, the request's files leave the folder: the next case starts
	// with nothing of this one left to evaluate.
	if err := p.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	result := out.Receipt.Status
	if out.Receipt.Reason != "" {
		result += "/" + string(out.Receipt.Reason)
	}
	outcome := fmt.Sprintf("%s→%s runs=%d starts=%d", crashed.State, result, e.Runs, starts)
	if staged != nil || published != nil {
		outcome += " adopted"
	}
	return outcome
}

// crashGCStep is the gc step of TestCrashAtEveryDurableStep: each op on a
// pair of its own, all at once. Each waits out its request's life and a
// second more (3-4 s), which one after another made this step the
// package's last 44 s under the race detector.
func crashGCStep(t *testing.T, record func(step, op, outcome string)) {
	for i, op := range crashOps {
		at := "gc"
		if i%2 == 1 {
			at = "gc#2" // after both files are gone, before the collection is recorded
		}
		t.Run(op.name, func(t *testing.T) {
			t.Parallel()
			record("gc", op.name, "FAILED")
			p := newPair(t, crashLoopPolicy)
			outcome := crashInGC(t, p, at, op, filepath.Join(t.TempDir(), "count"))
			if t.Failed() {
				outcome = "FAILED: " + outcome
			}
			record("gc", op.name, outcome)
		})
	}
}

// crashInGC runs and acks one request with a clean daemon, then lets a
// daemon process crash while collecting its result (the collection is
// ordered with a grace of 1 ns, as `bridge gc --grace 1ns` would), restarts
// a clean daemon, orders the collection again and checks it completes.
func crashInGC(t *testing.T, p *pair, at string, op crashOp, countFile string) string {
	// An acked result is collected once its request expired too: a short
	// life, and a small skew. The daemon is up before the request is
	// written, so that its life is not spent on a start slowed by a loaded
	// machine (it expired before a start of 2.6 s once, beside the whole
	// package's tests).
	p.skew = time.Millisecond
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	s, err := p.client.Submit(agent.SubmitOptions{Op: op.name, TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id := s.ID
	out := p.wait(t, id)
	if err := p.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the ledger to record the result", func() bool { return p.entry(t, id).ResultSHA256 != "" })
	p.stop(t)
	time.Sleep(time.Until(time.Unix(s.Expires, 0).Add(time.Second)))
	want := wantAfterCrash(at, op)
	if out.Receipt.Status != want.status {
		t.Fatalf("status %s (%s), want %s", out.Receipt.Status, out.Receipt.Reason, want.status)
	}

	c := startCrashProc(t, p, at, countFile, false)
	c.WaitReady(t)
	if _, err := host.GC(p.host, host.GCOptions{Grace: time.Nanosecond}); !errors.Is(err, operator.ErrQueued) {
		t.Fatalf("gc beside a running daemon: %v, want operator.ErrQueued", err)
	}
	c.WaitCrash(t, at)
	left := crashFolderFiles(t, p, id)
	wantLeft := []string{id + "." + bridge.ExtResult} // the output goes first, the manifest last
	if at == "gc#2" {
		wantLeft = nil
	}
	if strings.Join(left, " ") != strings.Join(wantLeft, " ") {
		t.Fatalf("after a crash at %s the folder holds %q, want %q", at, left, wantLeft)
	}

	p.start(t, map[string]string{"COUNT_FILE": countFile})
	if _, err := host.GC(p.host, host.GCOptions{Grace: time.Nanosecond}); !errors.Is(err, operator.ErrQueued) {
		t.Fatalf("gc beside a running daemon: %v, want operator.ErrQueued", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(crashFolderFiles(t, p, id)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	p.stop(t)
	after := crashFolderFiles(t, p, id)
	if len(after) > 0 {
		t.Errorf("after a crash at %s and a second collection the folder still holds %q", at, after)
	}
	if ev := crashAuditEvents(t, p, id, "collected"); len(ev) > 1 {
		t.Errorf("audit: the result was collected %d times", len(ev))
	}
	// The agent kept its verified copy; nothing ran again.
	if res, err := p.client.Result(id); err != nil || res.Receipt.Status != want.status {
		t.Errorf("the agent's kept result after gc: %v", err)
	}
	starts, ends := testkit.Count(t, countFile, "start-"+id), testkit.Count(t, countFile, "end-"+id)
	if starts != want.startsMin || ends != want.ends {
		t.Errorf("the op started %d and finished %d times; want %d and %d", starts, ends, want.startsMin, want.ends)
	}
	// The request expired: a collection that finds its result gone also
	// forgets its entry; until then the entry keeps its result.
	if e := p.entry(t, id); e.ID != "" && (e.State != ledger.State(want.status) || e.ResultSHA256 != bridge.SHA256Hex(out.Manifest)) {
		t.Errorf("ledger after gc: %s result %.12s", e.State, e.ResultSHA256)
	}
	return fmt.Sprintf("%s: left %s; next gc: %s", at, crashLeft(left), crashLeft(after))
}

// crashLeft names what is left of a result pair: "output", "output+result" or
// "none".
func crashLeft(names []string) string {
	var out []string
	for _, n := range names {
		out = append(out, filepath.Ext(n)[1:])
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "+")
}
