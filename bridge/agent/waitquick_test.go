package agent

import (
	"context"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
)

// A host beside the agent answers within milliseconds: Wait sees that
// answer by its quick looks at the result's name, without arming a watch
// on the result directory (a cost that grows with the files there). The
// result lands only once Wait is in its quick looks, which are set to
// outlast the test: nothing but them can have seen it.
func TestWaitSeesAQuickAnswerWithoutAWatch(t *testing.T) {
	h := newHomes(t)
	h.client.quickFor = time.Hour
	s, err := h.client.Submit(SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	type waited struct {
		out *Outcome
		err error
	}
	done := make(chan waited, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		out, err := h.client.Wait(ctx, s.ID, nil)
		done <- waited{out, err}
	}()
	waitUntil(t, "a quick look", func() bool { return h.client.waits.quick.Load() > 0 })
	h.publishResult(t, s, bridge.StatusDone)
	w := <-done
	if w.err != nil {
		t.Fatalf("wait: %v", w.err)
	}
	defer w.out.Close()
	if w.out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("status %s, want done", w.out.Receipt.Status)
	}
	if n := h.client.waits.watches.Load(); n != 0 {
		t.Fatalf("%d watches armed for an answer the quick looks saw; want none", n)
	}
}

// An answer that takes longer than the quick looks (through a sync client)
// is waited for with the watch: it is armed once they are over, and the
// answer that lands after it is seen.
func TestWaitArmsItsWatchAfterTheQuickLooks(t *testing.T) {
	h := newHomes(t)
	h.client.quickFor = 5 * time.Millisecond
	s, err := h.client.Submit(SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	type waited struct {
		out *Outcome
		err error
	}
	done := make(chan waited, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		out, err := h.client.Wait(ctx, s.ID, nil)
		done <- waited{out, err}
	}()
	waitUntil(t, "the watch", func() bool { return h.client.waits.watches.Load() > 0 })
	h.publishResult(t, s, bridge.StatusDone)
	w := <-done
	if w.err != nil {
		t.Fatalf("wait: %v", w.err)
	}
	defer w.out.Close()
	if n := h.client.waits.quick.Load(); n == 0 {
		t.Fatal("no quick look before the watch")
	}
	if n := h.client.waits.watches.Load(); n != 1 {
		t.Fatalf("%d watches armed; want 1", n)
	}
}
