package host

import (
	"context"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
)

// uncertainAhead answers a request uncertain (a drain cut short) while the
// host's clock runs ten minutes ahead, then corrects the clock: the answer
// in the folder carries a later time than anything the host makes next.
func uncertainAhead(t *testing.T) (*edge, string) {
	e := newEdge(t)
	e.block()
	ahead := func() time.Time { return time.Now().Add(10 * time.Minute) }
	d := runDaemon(t, e.host, DaemonOptions{Rescan: 300 * time.Millisecond, Grace: 100 * time.Millisecond, Env: envWith(e.env), Now: ahead})
	id := e.submit(t, "block")
	testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, "block", id) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	stopDaemon(d, ctx)
	cancel()
	if out := e.wait(t, id); out.Receipt.Status != bridge.StatusUncertain {
		t.Fatalf("first answer %s, want uncertain", out.Receipt.Status)
	}
	e.unblock()
	return e, id
}

// answerReaches waits until both the ledger and the agent have status.
func (e *edge) answerReaches(t *testing.T, id string, state ledger.State) {
	t.Helper()
	testkit.WaitFor(t, 15*time.Second, "the answer "+string(state)+" in the ledger and at the agent", func() bool {
		out, err := e.client.Result(id)
		return e.entry(t, id).State == state && err == nil && out.Receipt.Status == string(state)
	})
}

// TestClockStepBackRerun: a human's rerun after the clock stepped back
// makes an answer older, by its signed time, than the uncertain one it
// replaces; it must reach the agent all the same (a red team found it
// refused for ever as "a newer result of this host").
func TestClockStepBackRerun(t *testing.T) {
	t.Parallel()
	e, id := uncertainAhead(t)
	e.daemon(t)
	if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err != nil {
		t.Fatal(err)
	}
	e.answerReaches(t, id, ledger.StateDone)
	if n := e.starts(t, "block", id); n != 2 {
		t.Errorf("%d runs, want 2 (the first and the rerun)", n)
	}
}

// TestClockStepBackSettle: the same for a human settling it as done.
func TestClockStepBackSettle(t *testing.T) {
	t.Parallel()
	e, id := uncertainAhead(t)
	e.daemon(t)
	if _, err := Reconcile(e.host, "cloud-1/"+id, "done"); err != nil {
		t.Fatal(err)
	}
	e.answerReaches(t, id, ledger.StateDone)
}
