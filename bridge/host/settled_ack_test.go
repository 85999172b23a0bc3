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

// The agent acks an uncertain result (as `run` and `result --ack` do), a
// human settles it with `reconcile --as done`, and the agent acks the
// settled result: the ack in the folder then names the settled result, and
// the host collects it once the grace passed and the request expired, not
// only at the retention.
func TestSettledResultCollectedAfterAck(t *testing.T) {
	t.Parallel()
	for _, serving := range []bool{true, false} {
		t.Run(map[bool]string{true: "settled while serving", false: "settled while stopped"}[serving], func(t *testing.T) {
			testSettledResultCollectedAfterAck(t, serving)
		})
	}
}

func testSettledResultCollectedAfterAck(t *testing.T, serving bool) {
	p := newPair(t, crashPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	os.WriteFile(countFile+".block", nil, 0o644)
	env := "COUNT_FILE=" + countFile
	s, err := p.client.Submit(agent.SubmitOptions{Op: "once"})
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemonProcess(t, p, env)
	testkit.WaitFor(t, 15*time.Second, "the op to start", func() bool { return testkit.Count(t, countFile, "once-started") == 1 })
	d.Kill()
	d = startDaemonProcess(t, p, env)
	uncertain := p.wait(t, s.ID)
	if uncertain.Receipt.Status != bridge.StatusUncertain {
		t.Fatalf("after the crash: %s, want uncertain", uncertain.Receipt.Status)
	}
	if err := p.client.Ack(uncertain); err != nil {
		t.Fatal(err)
	}
	if !serving {
		// The answer is out a moment before the ledger records it (the
		// private copies are kept first): killed in between, the ledger
		// still says running, and a stopped host's reconcile refuses it.
		testkit.WaitFor(t, 10*time.Second, "the ledger to record the uncertain answer", func() bool { return p.entry(t, s.ID).State == ledger.StateUncertain })
		d.Kill()
	}
	if _, err := Reconcile(p.host, s.ID, "done"); err != nil {
		t.Fatal(err)
	}
	var settled *agent.Outcome
	testkit.WaitFor(t, 10*time.Second, "the settled result", func() bool {
		settled, err = p.client.Result(s.ID)
		return err == nil && settled.Receipt.Status == bridge.StatusDone
	})
	if err := p.client.Ack(settled); err != nil {
		t.Fatal(err)
	}
	d.Kill()
	// The ack names the result in the folder now.
	resPath := filepath.Join(p.toAgent(), s.ID+".result")
	res, err := os.ReadFile(resPath)
	if err != nil {
		t.Fatal(err)
	}
	ackData, err := os.ReadFile(filepath.Join(p.toHost(), s.ID+".ack"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := bridge.OpenAck(ackData, s.ID, p.host.Config.ID, p.agent.Config.ID, [][]byte{p.agent.Identity().SignPublic()})
	if err != nil {
		t.Fatal(err)
	}
	if a.ResultSHA256 != bridge.SHA256Hex(res) {
		t.Fatalf("the ack names %s, not the settled result %s", a.ResultSHA256, bridge.SHA256Hex(res))
	}
	// Past the request's expiry (24 h) and the grace: collected as acked.
	later := func() time.Time { return time.Now().Add(25*time.Hour + bridge.DefaultSkew) }
	rep, err := gcAt(p.host, GCOptions{}, later)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Items) == 0 || rep.Items[0].What != "result" || rep.Items[0].ID != s.ID || rep.Items[0].Why != "acked" {
		t.Fatalf("gc after the ack of the settled result: %+v, want its result collected as acked", rep.Items)
	}
	if _, err := os.Stat(resPath); !os.IsNotExist(err) {
		t.Fatal("the settled result is still in the folder")
	}
}
