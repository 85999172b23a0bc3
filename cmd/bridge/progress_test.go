package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

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
