package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
)

const crashPolicy = `
[ops.once]
argv = ["sh", "-c", "echo once-started >> \"$COUNT_FILE\"; while [ -f \"$COUNT_FILE.block\" ]; do sleep 0.05; done; echo once-finished >> \"$COUNT_FILE\""]
env = ["PATH", "COUNT_FILE"]
idempotent = false

[ops.again]
argv = ["sh", "-c", "echo again-started >> \"$COUNT_FILE\"; while [ -f \"$COUNT_FILE.block\" ]; do sleep 0.05; done; echo again-finished >> \"$COUNT_FILE\""]
env = ["PATH", "COUNT_FILE"]
idempotent = true

[agents.cloud-1]
ops = ["once", "again"]
`

// daemonProcess is the test binary run as `bridge serve` for a pair's host.
type daemonProcess = testkit.Process

func startDaemonProcess(t *testing.T, p *pair, env ...string) *daemonProcess {
	t.Helper()
	return testkit.Start(t, p.hostHome, env...)
}

// startCrashingDaemon starts a daemon process that is to exit at a crash
// injected by env (BRIDGE_TEST_CRASH_AT): the crash may come before it says
// it is ready, when the request it crashes on was in the folder at its start
// (the start-up scan can reach the step first), which is no failure here.
func startCrashingDaemon(t *testing.T, p *pair, env ...string) *daemonProcess {
	t.Helper()
	d, err := testkit.Launch(t, p.hostHome, true, env...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// startCrashProc starts a daemon process that exits at step at ("": none),
// its ops counting in countFile.
func startCrashProc(t *testing.T, p *pair, at, countFile string) *daemonProcess {
	t.Helper()
	env := []string{"COUNT_FILE=" + countFile}
	if p.skew > 0 {
		env = append(env, "BRIDGE_TEST_SKEW="+p.skew.String())
	}
	return testkit.StartCrashing(t, p.hostHome, at, env...)
}

// TestInvariant5CrashLeavesNoSilentDoubleRun kills a real daemon process
// with SIGKILL while ops run, restarts it, and checks: the non-idempotent op
// is not run again and ends uncertain (the agent is told); the idempotent op
// is run again and completes once; nothing finished twice.
func TestInvariant5CrashLeavesNoSilentDoubleRun(t *testing.T) {
	t.Parallel()
	p := newPair(t, crashPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	os.WriteFile(countFile+".block", nil, 0o644)
	env := "COUNT_FILE=" + countFile
	// 1. The non-idempotent op starts; the daemon is killed.
	once, err := p.client.Submit(agent.SubmitOptions{Op: "once", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemonProcess(t, p, env)
	testkit.WaitFor(t, 15*time.Second, "the non-idempotent op to start", func() bool { return testkit.Count(t, countFile, "once-started") == 1 })
	d.Kill()
	// 2. The restarted daemon marks it uncertain; the idempotent op starts;
	// the daemon is killed again.
	again, err := p.client.Submit(agent.SubmitOptions{Op: "again"})
	if err != nil {
		t.Fatal(err)
	}
	d = startDaemonProcess(t, p, env)
	testkit.WaitFor(t, 15*time.Second, "the idempotent op to start", func() bool { return testkit.Count(t, countFile, "again-started") == 1 })
	d.Kill()
	// 3. Unblocked and restarted: the idempotent op runs again and finishes.
	os.Remove(countFile + ".block")
	startDaemonProcess(t, p, env)
	outOnce := p.wait(t, once.ID)
	outAgain := p.wait(t, again.ID)
	if outOnce.Receipt.Status != bridge.StatusUncertain || outOnce.Receipt.Reason != "crashed" {
		t.Fatalf("non-idempotent op after a crash: %s (%s); want uncertain", outOnce.Receipt.Status, outOnce.Receipt.Reason)
	}
	if n := testkit.Count(t, countFile, "once-started"); n != 1 {
		t.Fatalf("non-idempotent op started %d times", n)
	}
	if outAgain.Receipt.Status != bridge.StatusDone {
		t.Fatalf("idempotent op after a crash: %s (%s)", outAgain.Receipt.Status, outAgain.Receipt.Detail)
	}
	if s, f := testkit.Count(t, countFile, "again-started"), testkit.Count(t, countFile, "again-finished"); s != 2 || f != 1 {
		t.Fatalf("idempotent op started %d and finished %d times; want 2 and 1", s, f)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to settle", func() bool { return p.entry(t, again.ID).State == ledger.StateDone })
	if e := p.entry(t, once.ID); e.State != ledger.StateUncertain || e.Runs != 1 {
		t.Fatalf("ledger for the non-idempotent op: %s runs %d", e.State, e.Runs)
	}
	if e := p.entry(t, again.ID); e.Runs != 2 {
		t.Fatalf("ledger for the idempotent op: runs %d, want 2", e.Runs)
	}
	// A human settles the uncertain run while the daemon runs: the agent sees
	// the new result, and the op is not run again.
	if _, err := Reconcile(p.host, once.ID, "done"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the reconciled result", func() bool {
		out, err := p.client.Result(once.ID)
		return err == nil && out.Receipt.Status == bridge.StatusDone && out.Receipt.Reason == "reconciled"
	})
	if n := testkit.Count(t, countFile, "once-started"); n != 1 || testkit.Count(t, countFile, "once-finished") != 0 {
		t.Fatalf("reconcile ran the op: started %d times", n)
	}
	// (The answer is out a moment before the ledger records it: the
	// final state is written after the publish.)
	testkit.WaitFor(t, 5*time.Second, "the ledger to record the settlement", func() bool { return p.entry(t, once.ID).State == ledger.StateDone })
}

// An idempotent op interrupted by a crash is not run again when its agent
// cancelled it while the daemon was down (a red team's finding: the cancel
// was read only at the next rescan, after the re-run had started). It ran
// before, so it is answered uncertain (crashed), never cancelled (DESIGN
// §6), as when the cancel comes while its re-run waits for a slot.
func TestCancelledWhileDownIsNotRunAgain(t *testing.T) {
	t.Parallel()
	p := newPair(t, crashPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	os.WriteFile(countFile+".block", nil, 0o644)
	env := "COUNT_FILE=" + countFile
	s, err := p.client.Submit(agent.SubmitOptions{Op: "again"})
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemonProcess(t, p, env)
	testkit.WaitFor(t, 15*time.Second, "the idempotent op to start", func() bool { return testkit.Count(t, countFile, "again-started") == 1 })
	d.Kill()
	if err := p.client.Cancel(s.ID); err != nil {
		t.Fatal(err)
	}
	os.Remove(countFile + ".block")
	startDaemonProcess(t, p, env)
	out := p.wait(t, s.ID)
	if out.Receipt.Status != bridge.StatusUncertain || out.Receipt.Reason != bridge.ReasonCrashed || !strings.Contains(out.Receipt.Detail, "cancelled before it could run again") {
		t.Fatalf("an interrupted op cancelled while the daemon was down: %s (%s: %s); want uncertain (crashed), cancelled before it could run again", out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail)
	}
	if n := testkit.Count(t, countFile, "again-started"); n != 1 {
		t.Fatalf("the op started %d times; want once (not run again after its cancel)", n)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to settle", func() bool { return p.entry(t, s.ID).State == ledger.StateUncertain })
}
