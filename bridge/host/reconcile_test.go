package host

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
)

// The op's reconcile command decides after a crash (SIGKILL of a real daemon
// process while the op runs): exit 0 → done without running again; exit 3 →
// run exactly once more; no reconcile command → uncertain.
func TestReconcileCommandAfterCrash(t *testing.T) {
	t.Parallel()
	policy := `
[ops.happened]
argv = ["sh", "-c", "echo happened-$0 >> \"$COUNT_FILE\"; while [ -f \"$COUNT_FILE.block\" ]; do sleep 0.05; done", "{request_id}"]
reconcile = ["sh", "-c", "echo checked; exit 0"]
env = ["PATH", "COUNT_FILE"]

[ops.nothappened]
argv = ["sh", "-c", "echo nothappened-$0 >> \"$COUNT_FILE\"; while [ -f \"$COUNT_FILE.block\" ]; do sleep 0.05; done", "{request_id}"]
reconcile = ["sh", "-c", "echo not there; exit 3"]
env = ["PATH", "COUNT_FILE"]

[ops.unknown]
argv = ["sh", "-c", "echo unknown-$0 >> \"$COUNT_FILE\"; while [ -f \"$COUNT_FILE.block\" ]; do sleep 0.05; done", "{request_id}"]
env = ["PATH", "COUNT_FILE"]

[agents.cloud-1]
ops = ["happened", "nothappened", "unknown"]
`
	p := newPair(t, policy)
	countFile := filepath.Join(t.TempDir(), "count")
	os.WriteFile(countFile+".block", nil, 0o644)
	env := "COUNT_FILE=" + countFile
	ids := map[string]string{}
	for _, op := range []string{"happened", "nothappened", "unknown"} {
		s, err := p.client.Submit(agent.SubmitOptions{Op: op})
		if err != nil {
			t.Fatal(err)
		}
		ids[op] = s.ID
	}
	d := startDaemonProcess(t, p, env)
	testkit.WaitFor(t, 15*time.Second, "all three ops to start", func() bool { return len(testkit.Lines(t, countFile)) == 3 })
	d.Kill()
	os.Remove(countFile + ".block")
	startDaemonProcess(t, p, env)
	outs := map[string]*agent.Outcome{}
	for op, id := range ids {
		outs[op] = p.wait(t, id)
	}
	if o := outs["happened"]; o.Receipt.Status != bridge.StatusDone || o.Receipt.Reason != "reconciled" || string(o.Stdout) != "checked\n" {
		t.Errorf("reconcile exit 0: %s (%s) %q", o.Receipt.Status, o.Receipt.Reason, o.Stdout)
	}
	if o := outs["nothappened"]; o.Receipt.Status != bridge.StatusDone || o.Receipt.Reason != "" {
		t.Errorf("reconcile exit 3: %s (%s): %s", o.Receipt.Status, o.Receipt.Reason, o.Receipt.Detail)
	}
	if o := outs["unknown"]; o.Receipt.Status != bridge.StatusUncertain {
		t.Errorf("no reconcile command: %s (%s)", o.Receipt.Status, o.Receipt.Reason)
	}
	if n := testkit.Count(t, countFile, "happened-"+ids["happened"]); n != 1 {
		t.Errorf("the op whose reconcile said it happened ran %d times", n)
	}
	if n := testkit.Count(t, countFile, "nothappened-"+ids["nothappened"]); n != 2 {
		t.Errorf("the op whose reconcile said it did not happen ran %d times, want 2 (once more)", n)
	}
	if n := testkit.Count(t, countFile, "unknown-"+ids["unknown"]); n != 1 {
		t.Errorf("the op without reconcile ran %d times", n)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to settle", func() bool { return p.entry(t, ids["nothappened"]).State == ledger.StateDone })
	if e := p.entry(t, ids["nothappened"]); e.Runs != 2 {
		t.Errorf("ledger runs for the re-run op: %d", e.Runs)
	}
	if e := p.entry(t, ids["unknown"]); e.State != ledger.StateUncertain {
		t.Errorf("ledger for the op without reconcile: %s", e.State)
	}
}

// A drain waits for a reconcile command that checks an op a crash
// interrupted as it waits for a running op: the agents are told the host
// is stopping (draining), not left with a serving stamp going stale, and
// the check's answer is published before the stop.
func TestDrainWaitsForAReconcileCheck(t *testing.T) {
	t.Parallel()
	policy := `
[ops.checked]
argv = ["sh", "-c", "echo run-$0 >> \"$COUNT_FILE\"; while [ -f \"$COUNT_FILE.block\" ]; do sleep 0.05; done", "{request_id}"]
reconcile = ["sh", "-c", "echo check >> \"$COUNT_FILE\"; while [ -f \"$COUNT_FILE.hold\" ]; do sleep 0.05; done; echo checked"]
env = ["PATH", "COUNT_FILE"]

[agents.cloud-1]
ops = ["checked"]
`
	p := newPair(t, policy)
	countFile := filepath.Join(t.TempDir(), "count")
	must(t, os.WriteFile(countFile+".block", nil, 0o644))
	s, err := p.client.Submit(agent.SubmitOptions{Op: "checked"})
	if err != nil {
		t.Fatal(err)
	}
	crashed := startDaemonProcess(t, p, "COUNT_FILE="+countFile)
	testkit.WaitFor(t, 15*time.Second, "the op to start", func() bool { return testkit.Count(t, countFile, "run-"+s.ID) == 1 })
	crashed.Kill()
	must(t, os.Remove(countFile+".block"))
	must(t, os.WriteFile(countFile+".hold", nil, 0o644))
	d := runDaemon(t, p.host, DaemonOptions{Rescan: 500 * time.Millisecond, Grace: 100 * time.Millisecond,
		Env: envWith(map[string]string{"COUNT_FILE": countFile})})
	testkit.WaitFor(t, 15*time.Second, "the reconcile command to run", func() bool { return testkit.Count(t, countFile, "check") == 1 })
	closed := stopWithin(d, time.Minute)
	p.eventuallyStamp(t, "said draining", func(st *bridge.LivenessStamp) bool { return st.State == bridge.LivenessDraining })
	must(t, os.Remove(countFile+".hold"))
	<-closed
	if st := p.readStamp(t); st.State != bridge.LivenessStopped {
		t.Errorf("the stamp after the stop says %q, want stopped", st.State)
	}
	out, err := p.client.Result(s.ID)
	if err != nil {
		t.Fatalf("no answer from the check the drain waited for: %v", err)
	}
	if out.Receipt.Status != bridge.StatusDone || out.Receipt.Reason != "reconciled" {
		t.Errorf("answer: %s (%s), want done (reconciled)", out.Receipt.Status, out.Receipt.Reason)
	}
	if n := testkit.Count(t, countFile, "run-"+s.ID); n != 1 {
		t.Errorf("the op ran %d times", n)
	}
}
