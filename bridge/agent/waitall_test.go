package agent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
)

// WaitAll takes each answer once, as it comes, while results land beside
// it: the folder's events reach it on the watch's goroutines and its own
// loop looks at the requests they name (the race detector runs this; the
// CLI scripts that wait for many ids do not run under it). An id sent
// twice is waited for once, an id never sent is refused at once, and a
// request still unanswered when the wait is given up is what it returns.
func TestWaitAllTakesEachAnswerOnce(t *testing.T) {
	h := newHomes(t)
	var sent []*Sent
	for range 20 {
		s, err := h.client.Submit(SubmitOptions{Op: "echo"})
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, s)
	}
	ids := []string{"0123456789abcdef0123456789abcdef"} // never sent
	for _, s := range sent {
		ids = append(ids, s.ID)
	}
	ids = append(ids, sent[0].ID) // twice

	var (
		mu    sync.Mutex
		got   = map[string]int{}
		bad   []string
		ticks int
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type end struct {
		left []string
		err  error
	}
	done := make(chan end, 1)
	go func() {
		left, err := h.client.WaitAll(ctx, ids, func(id string, out *Outcome, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				bad = append(bad, id)
				return
			}
			if out.Receipt.Status != bridge.StatusDone {
				t.Errorf("%s: status %s", id, out.Receipt.Status)
			}
			out.Close()
			got[id]++
		}, func(time.Duration) {
			mu.Lock()
			ticks++
			mu.Unlock()
		})
		done <- end{left, err}
	}()
	// All but the last answered, a few milliseconds apart, as a sync
	// client lands them.
	for _, s := range sent[:len(sent)-1] {
		h.publishResult(t, s, bridge.StatusDone)
		time.Sleep(2 * time.Millisecond)
	}
	last := sent[len(sent)-1].ID
	waitUntil(t, "the answers published so far", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(sent)-1
	})
	cancel()
	e := <-done
	if !errors.Is(e.err, context.Canceled) || !slices.Equal(e.left, []string{last}) {
		t.Errorf("given up: left %v, err %v; want [%s], context.Canceled", e.left, e.err, last)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range got {
		if n != 1 {
			t.Errorf("%s taken %d times, want once", id, n)
		}
	}
	if got[last] != 0 {
		t.Errorf("the unanswered %s was taken", last)
	}
	if !slices.Equal(bad, []string{ids[0]}) {
		t.Errorf("refused %v, want only the id never sent, %s", bad, ids[0])
	}
	if ticks == 0 {
		t.Error("no tick after a full look")
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
