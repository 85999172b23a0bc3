package host

import (
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge/agent"
)

// A request dated in the host's future (this agent's clock an hour ahead)
// is refused not-yet-valid with both clocks in its detail, so that the
// agent can say which clock is off and by how much (issue 27, wrong item 3).
func TestNotYetValidNamesTheClocks(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	runDaemon(t, p.host, DaemonOptions{Rescan: 500 * time.Millisecond, Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	out := p.wait(t, s.ID)
	if out.Receipt.Reason != "not-yet-valid" || !strings.Contains(out.Receipt.Detail, "ahead of the host's clock") ||
		!strings.Contains(out.Receipt.Detail, "1h0m0s ahead") && !strings.Contains(out.Receipt.Detail, "59m59s ahead") {
		t.Fatalf("refusal: %s (%s): %s", out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail)
	}
}
