package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
)

// A request with no answer past its expiry by more than NoAnswerAfter, of
// which the host never said it started, will get none (the host refuses it
// without one, SPEC §8): a wait for it ends with a *NoAnswerError, and once
// settled it is no longer outstanding and gc removes its files. One with an
// answer, one the host said it started, and one only a minute past its
// expiry are waited for as before.
func TestNoAnswerComesPastExpiry(t *testing.T) {
	t.Parallel()
	h := newHomes(t)
	submit := func(pastExpiry time.Duration) *Sent {
		t.Helper()
		s, err := h.client.Submit(SubmitOptions{Op: "echo", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// Its time gone by: the record's expiry moved back (the host,
		// which would refuse it by now, plays no part here).
		rec, err := h.client.readSent(s.ID)
		if err != nil {
			t.Fatal(err)
		}
		rec.Expires = time.Now().Add(-pastExpiry).Unix()
		if err := h.client.writeRecord(*rec, false); err != nil {
			t.Fatal(err)
		}
		s.Expires = rec.Expires
		return s
	}
	none := submit(NoAnswerAfter + time.Minute)
	answered := submit(NoAnswerAfter + time.Minute)
	h.publishResult(t, answered, bridge.StatusDone)
	started := submit(NoAnswerAfter + time.Minute)
	chunk, err := bridge.SealProgress(bridge.Progress{V: 1, ID: started.ID, Host: started.Host, Agent: h.agent.Config.ID, Seq: 1},
		nil, nil, h.host.Identity(), h.agent.Identity().BoxPublic())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.folder, bridge.ProgressPath(started.Host, h.agent.Config.ID, started.ID, 1)), chunk, 0o644); err != nil {
		t.Fatal(err)
	}
	recent := submit(time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var na *NoAnswerError
	if _, err := h.client.Wait(ctx, none.ID, nil); !errors.As(err, &na) {
		t.Fatalf("wait for a request past its expiry with no answer: %v, want a NoAnswerError", err)
	}
	for _, s := range []*Sent{started, recent} {
		short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := h.client.Wait(short, s.ID, nil)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("wait for %s (started, or only a minute past its expiry): %v, want the deadline", s.ID, err)
		}
		if err := h.client.SettleNoAnswer(s.ID); err == nil {
			t.Errorf("%s settled as getting no answer, though it may still get one", s.ID)
		}
	}
	if err := h.client.SettleNoAnswer(answered.ID); err == nil {
		t.Error("a request with an answer settled as getting none")
	}
	got := map[string]error{}
	left, err := h.client.WaitAll(ctx, []string{none.ID, answered.ID}, func(id string, out *Outcome, err error) {
		if out != nil {
			out.Close()
		}
		got[id] = err
	}, nil)
	if err != nil || len(left) != 0 || !errors.As(got[none.ID], &na) || got[answered.ID] != nil || len(got) != 2 {
		t.Fatalf("wait for both: left %v, %v; got %v", left, err, got)
	}

	if out, _ := h.client.Outstanding(); !slices.Contains(out, none.ID) {
		t.Fatalf("outstanding before it is settled: %v", out)
	}
	if removed, _ := h.client.GC(true); slices.ContainsFunc(removed, func(p string) bool { return filepath.Base(p) == none.ID+"."+bridge.ExtManifest }) {
		t.Fatalf("gc would remove the files of a request not settled: %v", removed)
	}
	if err := h.client.SettleNoAnswer(none.ID); err != nil {
		t.Fatal(err)
	}
	if out, _ := h.client.Outstanding(); slices.Contains(out, none.ID) || !slices.Contains(out, recent.ID) || !slices.Contains(out, started.ID) {
		t.Fatalf("outstanding once settled: %v; want %s gone, %s and %s still there", out, none.ID, recent.ID, started.ID)
	}
	if _, err := h.client.GC(false); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{bridge.ExtManifest, bridge.ExtPayload} {
		if _, err := os.Stat(filepath.Join(h.folder, bridge.RequestPath(none.Host, h.agent.Config.ID, none.ID, ext))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("gc left the settled request's %s: %v", ext, err)
		}
		if _, err := os.Stat(filepath.Join(h.folder, bridge.RequestPath(recent.Host, h.agent.Config.ID, recent.ID, ext))); err != nil {
			t.Errorf("gc removed the %s of a request that may still get an answer: %v", ext, err)
		}
	}
}
