package agent

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
)

// A request this home forgot (the user's decision: Forget) is no longer
// outstanding, unless an answer comes all the same; the others stay.
func TestForgottenIsNotOutstanding(t *testing.T) {
	t.Parallel()
	h := newHomes(t)
	var ids []*Sent
	for range 2 {
		s, err := h.client.Submit(SubmitOptions{Op: "echo"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s)
	}
	forgotten, kept := ids[0], ids[1]
	if err := h.client.Forget(forgotten.ID); err != nil {
		t.Fatal(err)
	}
	out, err := h.client.Outstanding()
	if err != nil || slices.Contains(out, forgotten.ID) || !slices.Contains(out, kept.ID) {
		t.Fatalf("outstanding: %v, %v; want %s only", out, err, kept.ID)
	}
	// Reopened: the mark is in the record.
	if out, _ := h.reopen(t).Outstanding(); slices.Contains(out, forgotten.ID) {
		t.Fatalf("outstanding after a reopen: %v", out)
	}
	// Junk at its result's name is no answer.
	dir := filepath.Join(h.folder, bridge.ToAgentDir(forgotten.Host, h.agent.Config.ID))
	if err := os.WriteFile(filepath.Join(dir, forgotten.ID+"."+bridge.ExtResult), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := h.client.Outstanding(); slices.Contains(out, forgotten.ID) {
		t.Fatalf("junk at a forgotten request's result name made it outstanding: %v", out)
	}
	os.Remove(filepath.Join(dir, forgotten.ID+"."+bridge.ExtResult))
	h.publishResult(t, forgotten, bridge.StatusDone)
	if out, _ := h.client.Outstanding(); !slices.Contains(out, forgotten.ID) {
		t.Fatalf("a forgotten request whose answer came is not outstanding: %v", out)
	}
}

// A keyed request sent again after it was forgotten is waited for again
// (the host answers the duplicate from its ledger, or never did); a
// request whose answer is acked here has nothing to forget.
func TestForgetAndKeyedResend(t *testing.T) {
	t.Parallel()
	h := newHomes(t)
	o := SubmitOptions{Op: "echo", Key: "k-forget"}
	s, err := h.client.Submit(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.client.Forget(s.ID); err != nil {
		t.Fatal(err)
	}
	again, err := h.client.Submit(o)
	if err != nil || again.ID != s.ID || !again.Earlier || again.Forgotten != 0 {
		t.Fatalf("keyed resend of a forgotten request: %+v, %v", again, err)
	}
	if out, _ := h.client.Outstanding(); !slices.Contains(out, s.ID) {
		t.Fatalf("a keyed request sent again is not outstanding: %v", out)
	}
	h.publishResult(t, s, bridge.StatusDone)
	res, err := h.client.Result(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if err := h.client.Ack(res); err != nil {
		t.Fatal(err)
	}
	if err := h.client.Forget(s.ID); err == nil || !strings.Contains(err.Error(), "acked") {
		t.Fatalf("forget of an acked request: %v, want a refusal", err)
	}
}

// The agent's gc removes the manifest and payload of a forgotten request
// only once no host would start it or answer it on sight (twice the skew
// past its expiry), never while a file stands at its result's name, and
// never its cancel.
func TestGCOfForgotten(t *testing.T) {
	t.Parallel()
	h := newHomes(t)
	submit := func(pastExpiry time.Duration) *Sent {
		t.Helper()
		s, err := h.client.Submit(SubmitOptions{Op: "echo", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.client.Cancel(s.ID); err != nil {
			t.Fatal(err)
		}
		if err := h.client.Forget(s.ID); err != nil {
			t.Fatal(err)
		}
		// Its time gone by: the record's expiry moved back.
		rec, err := h.client.readSent(s.ID)
		if err != nil {
			t.Fatal(err)
		}
		rec.Expires = time.Now().Add(-pastExpiry).Unix()
		if err := h.client.writeRecord(*rec, false); err != nil {
			t.Fatal(err)
		}
		return s
	}
	old := submit(2*bridge.DefaultSkew + time.Minute)
	recent := submit(bridge.DefaultSkew + time.Minute)
	junk := submit(2*bridge.DefaultSkew + time.Minute)
	dir := filepath.Join(h.folder, bridge.ToAgentDir(junk.Host, h.agent.Config.ID))
	if err := os.WriteFile(filepath.Join(dir, junk.ID+"."+bridge.ExtResult), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	// One the host's signed progress says started: its answer is to come.
	started := submit(2*bridge.DefaultSkew + time.Minute)
	chunk, err := bridge.SealProgress(bridge.Progress{V: 1, ID: started.ID, Host: started.Host, Agent: h.agent.Config.ID, Seq: 1},
		nil, nil, h.host.Identity(), h.agent.Identity().BoxPublic())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.folder, bridge.ProgressPath(started.Host, h.agent.Config.ID, started.ID, 1)), chunk, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.client.GC(false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s    *Sent
		gone bool
	}{{old, true}, {recent, false}, {junk, false}, {started, false}} {
		for _, ext := range []string{bridge.ExtManifest, bridge.ExtPayload} {
			_, err := os.Stat(filepath.Join(h.folder, bridge.RequestPath(c.s.Host, h.agent.Config.ID, c.s.ID, ext)))
			if gone := errors.Is(err, os.ErrNotExist); gone != c.gone {
				t.Errorf("%s's %s: removed %v, want %v", c.s.ID, ext, gone, c.gone)
			}
		}
		// The cancel stays: a host that recorded the request acts on it.
		if _, err := os.Stat(filepath.Join(h.folder, bridge.RequestPath(c.s.Host, h.agent.Config.ID, c.s.ID, bridge.ExtCancel))); err != nil {
			t.Errorf("%s's cancel: %v", c.s.ID, err)
		}
	}
}
