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
	if n := h.client.waits.open.Load(); n != 0 {
		t.Fatalf("%d watches still armed after the wait returned", n)
	}
}

// A wait whose context ends within its quick looks still answers as one
// would have before them: a host that no longer accepts this agent is said
// so (a NotAcceptedError, not a timeout), as `bridge wait --timeout` and an
// MCP call with no wait rely on. The context ends once a quick look was
// counted, and the quick looks last until then: a 20 ms deadline, as here
// before, ended a wait on a loaded CI machine before its first quick look.
func TestWaitEndingInItsQuickLooksTellsNotAccepted(t *testing.T) {
	h, s := submitEcho(t, time.Hour)
	h.client.quickFor = time.Hour
	h.stamp(t, bridge.LivenessStamp{Time: time.Now().Unix(), Accepts: []string{}, Trusted: false}, h.host.Identity())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.client.Wait(ctx, s.ID, nil)
		done <- err
	}()
	waitUntil(t, "a quick look", func() bool { return h.client.waits.quick.Load() > 0 })
	cancel()
	err := <-done
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

// A result's file renamed over while it is being opened (a rerun's answer
// replacing the uncertain one, a sync client's new version) is no result
// yet, not a refused one: the next look reads what replaced it. Here the
// manifest, then the output, of a verified result is renamed over itself
// again and again: every look finds the result, or meets the file replaced
// and says no result yet, until looks of both kinds were seen. The race is
// the machine's: one that never came within 20 s is a skip, not a pass.
func TestResultRenamedOverWhileOpenedIsNoResultYet(t *testing.T) {
	for _, ext := range []string{bridge.ExtResult, bridge.ExtOutput} {
		t.Run(ext, func(t *testing.T) {
			h, s := submitEcho(t, 0)
			h.publishResult(t, s, bridge.StatusDone)
			dir := filepath.Join(h.folder, bridge.ToAgentDir(s.Host, h.agent.Config.ID))
			path := filepath.Join(dir, s.ID+"."+ext)
			data, err := os.ReadFile(path)
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
						os.Rename(tmp, path)
					}
				}
			}()
			defer func() { close(stop); <-renamed }()
			found, replaced := 0, 0
			for end := time.Now().Add(20 * time.Second); found == 0 || replaced == 0; {
				if time.Now().After(end) {
					t.Skipf("in 20 s, %d looks found the result and %d met it replaced: the race did not come", found, replaced)
				}
				out, err := h.client.Result(s.ID)
				switch {
				case err == nil:
					out.Close()
					found++
				case errors.Is(err, ErrNoResult):
					replaced++
				default:
					t.Fatalf("a look at a result whose %s is renamed over: %v; want the result or no result yet", ext, err)
				}
			}
		})
	}
}

// `bridge wait` of requests whose answers are already there arms no watch
// (WaitAll looks first); one still unanswered after that look is waited
// for with its host's watch, and the answer that lands then is taken.
func TestWaitAllArmsAWatchOnlyForWhatIsUnanswered(t *testing.T) {
	h, s := submitEcho(t, 0)
	s2, err := h.client.Submit(SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	h.publishResult(t, s, bridge.StatusDone)
	h.publishResult(t, s2, bridge.StatusDone)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	take := func(_ string, out *Outcome, err error) {
		if err != nil {
			t.Errorf("wait: %v", err)
			return
		}
		out.Close()
	}
	if left, err := h.client.WaitAll(ctx, []string{s.ID, s2.ID}, take, nil); err != nil || len(left) != 0 {
		t.Fatalf("wait for two answers there: %v left, %v", left, err)
	}
	if n := h.client.waits.watches.Load(); n != 0 {
		t.Fatalf("%d watches armed for answers already there; want none", n)
	}

	s3, err := h.client.Submit(SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		left, err := h.client.WaitAll(ctx, []string{s.ID, s3.ID}, take, nil)
		if err == nil && len(left) != 0 {
			err = errors.New("unanswered: " + left[0])
		}
		done <- err
	}()
	waitUntil(t, "the watch", func() bool { return h.client.waits.watches.Load() > 0 })
	h.publishResult(t, s3, bridge.StatusDone)
	if err := <-done; err != nil {
		t.Fatalf("wait for one answer to come: %v", err)
	}
	if n := h.client.waits.watches.Load(); n != 1 {
		t.Fatalf("%d watches armed; want 1", n)
	}
	if n := h.client.waits.open.Load(); n != 0 {
		t.Fatalf("%d watches still armed after the wait returned", n)
	}

	// A wait whose context has ended arms nothing.
	s4, err := h.client.Submit(SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	ended, end := context.WithCancel(context.Background())
	end()
	if left, err := h.client.WaitAll(ended, []string{s4.ID}, take, nil); !errors.Is(err, context.Canceled) || len(left) != 1 {
		t.Fatalf("wait with an ended context: %v left, %v", left, err)
	}
	if n := h.client.waits.watches.Load(); n != 1 {
		t.Fatalf("%d watches armed in all; want still 1", n)
	}
}
