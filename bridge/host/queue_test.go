package host

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
)

// Requests for an op beyond what its concurrency and the waiting bound
// allow are left unclaimed, not claimed and spooled to wait; each runs
// once, as a run of the op ends.
func TestOpQueueIsBounded(t *testing.T) {
	t.Parallel()
	policy := strings.Replace(testPolicy, `ops = ["echo", "count"`, `ops = ["queued", "echo", "count"`, 1) + `
[ops.queued]
argv = ["sh", "-c", "sleep 0.2; echo run >> \"$COUNT_FILE\"; echo queued"]
env = ["PATH", "COUNT_FILE"]
concurrency = 1
`
	p := newPair(t, policy)
	const waiting = 2 // at most 3 claimed: 1 running, 2 waiting
	p.limit(func(l *limits) { l.waitingPerSlot = waiting })
	countFile := filepath.Join(t.TempDir(), "count")
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	const n = 12
	var ids []string
	for range n {
		s, err := p.client.Submit(agent.SubmitOptions{Op: "queued", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	most, done := 0, 0
	deadline := time.Now().Add(30 * time.Second)
	for done < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d done after 30 s", done, n)
		}
		// One read of the ledger: entries read one by one could count a
		// request claimed just before it ended, beside its successor.
		inFlight, err := p.daemon.ledger.InState(ledger.StateClaimed, ledger.StateRunning)
		if err != nil {
			t.Fatal(err)
		}
		finished, err := p.daemon.ledger.InState(ledger.StateDone)
		if err != nil {
			t.Fatal(err)
		}
		most, done = max(most, len(inFlight)), len(finished)
		time.Sleep(20 * time.Millisecond)
	}
	if most > 1+waiting {
		t.Fatalf("%d requests were claimed at once; want at most %d", most, 1+waiting)
	}
	if most < 1+waiting {
		// Twelve requests for an op that runs one at a time keep its queue
		// full for seconds: a bound never reached shows nothing.
		t.Fatalf("at most %d requests were claimed at once; the bound %d was never reached", most, 1+waiting)
	}
	if runs := testkit.Count(t, countFile, "run"); runs != n {
		t.Fatalf("%d runs for %d requests", runs, n)
	}
	for _, id := range ids {
		if out := p.wait(t, id); out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != "queued\n" {
			t.Fatalf("%s: %s %q", id, out.Receipt.Status, out.Stdout)
		}
	}
}
