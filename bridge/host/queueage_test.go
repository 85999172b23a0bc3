package host

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
)

// A request waiting for its op's slot is answered as expired once it has
// waited MaxQueueAge, while the op ahead of it still runs: the agent learns
// at the deadline, not when the slot frees (here 30 s later).
func TestMaxQueueAgeAnsweredAtItsDeadline(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	runDaemon(t, p.host, DaemonOptions{Rescan: 500 * time.Millisecond, Grace: 200 * time.Millisecond,
		MaxQueueAge: 2 * time.Second, Env: envWith(map[string]string{"COUNT_FILE": countFile})})
	first, err := p.client.Submit(agent.SubmitOptions{Op: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); testkit.Count(t, countFile, "started") == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first request never started")
		}
	}
	second, err := p.client.Submit(agent.SubmitOptions{Op: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	// Well under the 30 s the first runs, well over the 2 s age.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	waited := time.Now()
	out, err := p.client.Wait(ctx, second.ID, nil)
	t.Logf("answered after %v", time.Since(waited))
	if err != nil {
		t.Fatalf("the queued request got no answer while the op ahead ran: %v", err)
	}
	if out.Receipt.Status != bridge.StatusExpired || !strings.Contains(out.Receipt.Detail, "waited on the host for more than 2s") {
		t.Fatalf("queued request: %s %q, want expired after waiting", out.Receipt.Status, out.Receipt.Detail)
	}
	if st := p.entry(t, first.ID).State; st != ledger.StateRunning {
		t.Fatalf("the first request is %s, want still running", st)
	}
	if n := testkit.Count(t, countFile, "started"); n != 1 {
		t.Fatalf("started %d times, want once (the expired request never ran)", n)
	}
	if err := p.client.Cancel(first.ID); err != nil { // so the daemon stops at once
		t.Fatal(err)
	}
	if _, err := p.client.Wait(ctx, first.ID, nil); err != nil {
		t.Fatal(err)
	}
}
