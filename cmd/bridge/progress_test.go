package main

import (
	"bytes"
	"errors"
	"github.com/syncbridge/bridge/bridge/syncthing"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// A wait whose host never published a liveness stamp for this agent says
// so once, after noStampAfter (a new user who forgot `bridge pair` on the
// host otherwise saw only "still waiting" until the timeout), and the
// timeout's error carries that verdict.
func TestProgressSaysNoStampOnce(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out, "0123456789abcdef0123456789abcdef")
	p.liveness = func() *agent.Liveness {
		return &agent.Liveness{Verdict: agent.LivenessNoStamp, HostName: "laptop", Message: "host \"laptop\" has published no liveness stamp"}
	}
	for s := range 25 {
		p.tick(time.Duration(s) * time.Second)
		if said := strings.Contains(out.String(), "no liveness stamp"); said != (time.Duration(s)*time.Second >= noStampAfter) {
			t.Fatalf("after %d s: said %v:\n%s", s, said, out.String())
		}
	}
	if n := strings.Count(out.String(), "no liveness stamp"); n != 1 {
		t.Errorf("said %d times, want once:\n%s", n, out.String())
	}
	if lv := p.alarm(); lv == nil || lv.Verdict != agent.LivenessNoStamp {
		t.Errorf("alarm: %+v, want the no-stamp verdict", lv)
	}
}

// A wait whose host's results go where this side does not read them
// (`syncthing setup --share-results` on one side only; the detection
// itself runs against real Syncthings in TestHalfDoneFastPath) says so
// once, routeAfter into the wait, with the fix, and its time-out names it
// as the cause.
func TestProgressSaysTheResultsRouteOnce(t *testing.T) {
	var out bytes.Buffer
	id := "0123456789abcdef0123456789abcdef"
	p := newProgress(&out, id)
	asked := 0
	p.route = func() []syncthing.RouteProblem {
		asked++
		return []syncthing.RouteProblem{{Folder: "bridge-results-x", Message: "host \"laptop\"'s Syncthing shares its results as folder bridge-results-x\x1b[2J", Hint: "run `bridge syncthing setup --share-results` here"}}
	}
	if routeTimeout(p, id, time.Second) != nil {
		t.Fatal("a time-out names a route problem before any was found")
	}
	for ms := 0; ms <= 5000; ms += 500 {
		p.tick(time.Duration(ms) * time.Millisecond)
		if said := strings.Contains(out.String(), "shares its results"); said != (time.Duration(ms)*time.Millisecond >= routeAfter) {
			t.Fatalf("after %d ms: said %v:\n%s", ms, said, out.String())
		}
	}
	if asked != 1 || strings.Count(out.String(), "bridge: hint: run `bridge syncthing setup --share-results` here\n") != 1 || strings.Contains(out.String(), "\x1b") {
		t.Fatalf("asked %d times, said:\n%q", asked, out.String())
	}
	err := routeTimeout(p, id, 2*time.Minute)
	var ce *codeError
	if !errors.As(err, &ce) || ce.code != exitWaitTime || !strings.Contains(err.Error(), "no result for "+id+" after 2m0s: host \"laptop\"'s Syncthing shares") {
		t.Fatalf("time-out: %v", err)
	}
	var he *bridge.HintError
	if !errors.As(err, &he) || !strings.Contains(he.Hint, "--share-results` here") || !strings.Contains(he.Hint, "bridge wait "+id) {
		t.Fatalf("time-out's hint: %v", err)
	}
}

// A request the host cannot read (a later format) is answered rejected
// unknown-version: the hint names the host as the side behind, in the CLI
// and in MCP's words alike (docs/OPERATIONS.md, "Upgrading").
func TestHintForUnknownVersion(t *testing.T) {
	rc := &bridge.Receipt{ID: "0123456789abcdef0123456789abcdef", Status: bridge.StatusRejected, Reason: "unknown-version"}
	if h := hintFor(rc, "cloud-1"); !strings.Contains(h, "it runs an older bridge than this agent; upgrade the host") {
		t.Fatalf("hint: %q", h)
	}
}

// A wait whose host is told to stop says so once when its stamp turns to
// draining, again when it turns to stopped, and that it serves again when
// it is back; the time-out names the drain.
func TestProgressFollowsADrain(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out, "0123456789abcdef0123456789abcdef")
	verdict := agent.LivenessOK
	p.liveness = func() *agent.Liveness {
		return &agent.Liveness{Verdict: verdict, HostName: "laptop", Message: "host \"laptop\" is " + verdict}
	}
	s := 0
	tick := func(n int) {
		for range n {
			p.tick(time.Duration(s) * time.Second)
			s++
		}
	}
	tick(3)
	verdict = agent.LivenessDraining
	tick(3)
	if lv := p.alarm(); lv == nil || lv.Verdict != agent.LivenessDraining {
		t.Errorf("alarm while draining: %+v", lv)
	}
	verdict = agent.LivenessStopped
	tick(3)
	verdict = agent.LivenessOK
	tick(3)
	for _, want := range []string{"is draining", "is stopped", "is serving again"} {
		if n := strings.Count(out.String(), want); n != 1 {
			t.Errorf("%q said %d times, want once:\n%s", want, n, out.String())
		}
	}
}

// The hint for a request with no answer past its expiry: none before it;
// a host whose clock lags this one's (by up to the skew it allows) may
// still start it and answers it `expired` within twice the skew; past
// that, a host that sees it only then answers nothing, and one that saw or
// started it in time still does (the agent cannot tell which from the
// folder: red team findings). One whose progress shows it runs answers.
func TestPastExpiryHint(t *testing.T) {
	t.Parallel()
	id := "0123456789abcdef0123456789abcdef"
	at := func(d time.Duration) *agent.Sent { return &agent.Sent{ID: id, Expires: time.Now().Add(d).Unix()} }
	if h := pastExpiry(at(time.Minute), id, false); h != "" {
		t.Errorf("before its expiry: %q, want none", h)
	}
	if h := pastExpiry(nil, id, false); h != "" {
		t.Errorf("a request not known here: %q, want none", h)
	}
	// Within twice the skew: a host whose clock lags may still start it,
	// and answers it expired; sending again is safe only after the skew.
	for _, d := range []time.Duration{time.Minute, bridge.DefaultSkew + time.Minute} {
		h := pastExpiry(at(-d), id, false)
		if !strings.Contains(h, "unless its clock runs behind this one's") || !strings.Contains(h, "answers it `expired` if it sees it within 10m0s of the expiry by its own clock") ||
			!strings.Contains(h, "nothing if it sees it later") || !strings.Contains(h, "send it again after") {
			t.Errorf("%v past its expiry: %q", d, h)
		}
	}
	// Past twice the skew a host that sees it only then answers nothing;
	// one that saw or started it in time still does: the hint says both,
	// and never that no answer will come.
	h := pastExpiry(at(-2*bridge.DefaultSkew-time.Minute), id, false)
	if !strings.Contains(h, "refuses it without an answer") || !strings.Contains(h, "an answer still comes if the host saw or started it in time") ||
		!strings.Contains(h, "`bridge cancel "+id+" --forget`") || strings.Contains(h, "answers it `expired`") || strings.Contains(h, "no answer will come") {
		t.Errorf("past its expiry by more than twice the skew: %q", h)
	}
	// Started in time: its answer comes; nothing is offered to cancel or send again.
	h = pastExpiry(at(-2*bridge.DefaultSkew-time.Minute), id, true)
	if !strings.Contains(h, "its answer comes once the host has finished it") || strings.Contains(h, "cancel") || strings.Contains(h, "send it again") {
		t.Errorf("running past its expiry: %q", h)
	}
}
