package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
)

// submitEcho submits an echo request from fresh homes whose client's quick
// looks last quickFor.
func submitEcho(t *testing.T, quickFor time.Duration) (*homes, *Sent) {
	t.Helper()
	h := newHomes(t)
	h.client.quickFor = quickFor
	s, err := h.client.Submit(SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	return h, s
}

type waited struct {
	out *Outcome
	err error
}

// waitInBackground waits for s's answer, for at most a minute, in a
// goroutine of its own.
func waitInBackground(t *testing.T, h *homes, s *Sent) <-chan waited {
	done := make(chan waited, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	go func() {
		out, err := h.client.Wait(ctx, s.ID, nil)
		done <- waited{out, err}
	}()
	return done
}

// doneAnswer is the wait's answer, which must be done.
func doneAnswer(t *testing.T, done <-chan waited) {
	t.Helper()
	w := <-done
	if w.err != nil {
		t.Fatalf("wait: %v", w.err)
	}
	defer w.out.Close()
	if w.out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("status %s, want done", w.out.Receipt.Status)
	}
}

// A host beside the agent answers within milliseconds: Wait sees that
// answer by its quick looks at the result's name, without arming a watch
// on the result directory (a cost that grows with the files there). The
// result lands only once Wait is in its quick looks, which are set to
// outlast the test: nothing but them can have seen it.
func TestWaitSeesAQuickAnswerWithoutAWatch(t *testing.T) {
	h, s := submitEcho(t, time.Hour)
	done := waitInBackground(t, h, s)
	waitUntil(t, "a quick look", func() bool { return h.client.waits.quick.Load() > 0 })
	h.publishResult(t, s, bridge.StatusDone)
	doneAnswer(t, done)
	if n := h.client.waits.watches.Load(); n != 0 {
		t.Fatalf("%d watches armed for an answer the quick looks saw; want none", n)
	}
}

// An answer that takes longer than the quick looks (through a sync client)
// is waited for with the watch: it is armed once they are over, and the
// answer that lands after it is seen.
func TestWaitArmsItsWatchAfterTheQuickLooks(t *testing.T) {
	h, s := submitEcho(t, 5*time.Millisecond)
	done := waitInBackground(t, h, s)
	waitUntil(t, "the watch", func() bool { return h.client.waits.watches.Load() > 0 })
	h.publishResult(t, s, bridge.StatusDone)
	doneAnswer(t, done)
	if n := h.client.waits.quickBeforeWatch.Load(); n == 0 {
		t.Fatal("no quick look before the watch was armed")
	}
	if n := h.client.waits.watches.Load(); n != 1 {
		t.Fatalf("%d watches armed; want 1", n)
	}
}

// A wait whose deadline ends within its quick looks still answers as one
// would have before them: a host that no longer accepts this agent is said
// so (a NotAcceptedError, not a timeout), as `bridge wait --timeout` and an
// MCP call with no wait rely on.
func TestWaitEndingInItsQuickLooksTellsNotAccepted(t *testing.T) {
	h, s := submitEcho(t, time.Hour)
	h.stamp(t, bridge.LivenessStamp{Time: time.Now().Unix(), Accepts: []string{}, Trusted: false}, h.host.Identity())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := h.client.Wait(ctx, s.ID, nil)
	var na *NotAcceptedError
	if !errors.As(err, &na) {
		t.Fatalf("wait: %v, want a NotAcceptedError", err)
	}
	if h.client.waits.quick.Load() == 0 {
		t.Fatal("the wait ended before its quick looks began: the test tested nothing")
	}
	if n := h.client.waits.watches.Load(); n != 0 {
		t.Fatalf("%d watches armed after the deadline; want none", n)
	}
}

// An uncertain answer a human's rerun will replace stands at the result's
// name while the agent waits: the quick looks end when the new answer
// replaces it, not at once on seeing a file there.
func TestWaitQuickLooksSeeARerunsAnswer(t *testing.T) {
	h, s := submitEcho(t, time.Hour)
	h.publishResult(t, s, bridge.StatusUncertain)
	dir := filepath.Join(h.folder, bridge.ToAgentDir(s.Host, h.agent.Config.ID))
	uncertain, err := os.ReadFile(filepath.Join(dir, s.ID+"."+bridge.ExtResult))
	if err != nil {
		t.Fatal(err)
	}
	// The host's notice that a human ordered the rerun, naming that answer.
	signed, m, err := bridge.SealMessage(bridge.NewMessage{Host: h.host.Identity(), HostID: h.host.Config.ID, Agent: h.agent.Config.ID,
		AgentBoxPub: h.agent.Identity().BoxPublic(), Seq: 1, Created: time.Now(),
		Note: bridge.Note{Kind: bridge.NoteNotice, Event: bridge.EventRerunOrdered, Request: s.ID, Supersedes: bridge.SHA256Hex(uncertain), Text: "run again"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, m.ID+"."+bridge.ExtMessage), signed, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := h.client.Result(s.ID); err != nil || !h.client.RerunOrdered(out) {
		t.Fatalf("the uncertain answer is not taken for one a rerun replaces: %v", err)
	}
	done := waitInBackground(t, h, s)
	waitUntil(t, "a few quick looks", func() bool { return h.client.waits.quick.Load() >= 3 })
	h.publishResult(t, s, bridge.StatusDone)
	doneAnswer(t, done) // the rerun's
	if n := h.client.waits.watches.Load(); n != 0 {
		t.Fatalf("%d watches armed; want none", n)
	}
}

// A result file renamed over while it is being opened (a rerun's answer
// replacing the uncertain one, a sync client's new version) is no result
// yet, not a refused one: the next look reads what replaced it. Here the
// same verified result is renamed over itself again and again; every look
// finds it, or finds it replaced and says no result yet, and at least one
// look must have met a replacement.
func TestResultRenamedOverWhileOpenedIsNoResultYet(t *testing.T) {
	h, s := submitEcho(t, 0)
	h.publishResult(t, s, bridge.StatusDone)
	dir := filepath.Join(h.folder, bridge.ToAgentDir(s.Host, h.agent.Config.ID))
	res := filepath.Join(dir, s.ID+"."+bridge.ExtResult)
	data, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	renamed := make(chan struct{})
	go func() {
		defer close(renamed)
		tmp := filepath.Join(dir, ".tmp-again")
		for {
			select {
			case <-stop:
				return
			default:
			}
			if os.WriteFile(tmp, data, 0o644) == nil {
				os.Rename(tmp, res)
			}
		}
	}()
	defer func() { close(stop); <-renamed }()
	replaced := 0
	for end := time.Now().Add(time.Minute); replaced == 0; {
		if time.Now().After(end) {
			t.Fatal("no look met a replaced file in a minute: the test tested nothing")
		}
		out, err := h.client.Result(s.ID)
		switch {
		case err == nil:
			out.Close()
		case errors.Is(err, ErrNoResult):
			replaced++
		default:
			t.Fatalf("a look at a result renamed over: %v; want the result or no result yet", err)
		}
	}
}
