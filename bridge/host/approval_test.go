package host

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
)

// A request waiting for approval stays manageable after its agent rotated
// its keys with no overlap (the key that signed it is expired now): it can
// be denied and approved, and is answered. Re-verifying the kept manifest
// with only the keys valid now stranded it in awaiting-approval.
// gatedPolicy is testPolicy with an op "gated" that waits for approval.
func gatedPolicy() string {
	return strings.Replace(testPolicy, `ops = ["echo", "count"`, `ops = ["gated", "echo", "count"`, 1) + `
[ops.gated]
argv = ["echo", "gated"]
approve = true
`
}

func TestApprovalSurvivesAgentRotation(t *testing.T) {
	t.Parallel()
	p := newPair(t, gatedPolicy())
	p.start(t, nil)
	var ids []string
	for range 2 {
		s, err := p.client.Submit(agent.SubmitOptions{Op: "gated", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
		testkit.WaitFor(t, 5*time.Second, "the request to wait for approval", func() bool {
			return p.entry(t, s.ID).State == ledger.StateAwaitingApproval
		})
	}
	if _, err := p.agent.Rotate(0); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the host to follow the rotation", func() bool {
		peer, _, _ := p.host.Peer(p.agent.Config.ID)
		return len(peer.Keys) == 2
	})
	// As the order loop does: a busy request (a sweep holds it, or no
	// place is free yet) is tried again (CI, session 16).
	decide := func(id string, approve bool, why string) error {
		var err error
		testkit.WaitFor(t, 10*time.Second, "the decision to be taken", func() bool {
			err = p.daemon.decide(p.agent.Config.ID+"/"+id, approve, why)
			return err != errBusy
		})
		return err
	}
	if err := decide(ids[0], false, "not now"); err != nil {
		t.Fatalf("deny after the rotation: %v", err)
	}
	if out := p.wait(t, ids[0]); out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "denied" {
		t.Fatalf("denied: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	if err := decide(ids[1], true, ""); err != nil {
		t.Fatalf("approve after the rotation: %v", err)
	}
	if out := p.wait(t, ids[1]); out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != "gated\n" {
		t.Fatalf("approved: %s (%s) %q", out.Receipt.Status, out.Receipt.Reason, out.Stdout)
	}
}

// A request whose own validity ends while it waits for approval is answered
// expired by the next sweep, not left waiting (a red team's side note).
func TestApprovalWaitEndsAtExpiry(t *testing.T) {
	t.Parallel()
	p := newPair(t, gatedPolicy())
	p.start(t, nil)
	s, err := p.client.Submit(agent.SubmitOptions{Op: "gated", TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	out := p.wait(t, s.ID)
	if out.Receipt.Status != bridge.StatusExpired || out.Receipt.Reason != "past-expiry" {
		t.Fatalf("a request that expired waiting for approval: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
}

// The desktop notifier is found as an op's program is: a notify-send that
// another user put in a PATH directory they may write never runs as the
// daemon's user (issue 26, the red team of the PATH fix: it ran with text
// an agent chose at every approval).
//
// Not in parallel: t.Setenv changes the environment of every test of the
// process.
func TestDesktopNotifierNotFromOthersDirectory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("notify-send is looked up on Linux")
	}
	open := t.TempDir()
	must(t, os.Chmod(open, 0o777))
	marker := filepath.Join(t.TempDir(), "ran")
	script := "#!/bin/sh\necho \"$@\" > " + marker + "\n"
	must(t, os.WriteFile(filepath.Join(open, "notify-send"), []byte(script), 0o755))
	// The same program where only this user may write: it runs, so the
	// test can tell "not run" from "not looked up".
	safe := t.TempDir()
	done := filepath.Join(t.TempDir(), "done")
	must(t, os.WriteFile(filepath.Join(safe, "notify-send"), []byte("#!/bin/sh\necho \"$@\" > "+done+"\n"), 0o755))
	t.Setenv("PATH", open+":"+safe)
	desktopNotify("bridge: approval needed", "agent asks to run deploy")
	testkit.WaitFor(t, 10*time.Second, "the safe notify-send to run", func() bool {
		b, err := os.ReadFile(done)
		return err == nil && len(b) > 0
	})
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the notify-send from a directory others may write ran")
	}
}

// An approval given while the agent runs as many ops as its max_concurrent
// allows waits for a place, and runs: it is not refused "ceiling", which
// would throw the human's decision away (red team of the presets, whose
// agent runs one op at a time).
func TestApprovalWaitsForTheAgentsCeiling(t *testing.T) {
	t.Parallel()
	pol := strings.Replace(gatedPolicy(), "[agents.cloud-1]\n", "[agents.cloud-1]\nmax_concurrent = 1\n", 1)
	p := newPair(t, pol)
	count := filepath.Join(t.TempDir(), "count")
	p.start(t, map[string]string{"COUNT_FILE": count})
	gated, err := p.client.Submit(agent.SubmitOptions{Op: "gated", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the request to wait for approval", func() bool {
		return p.entry(t, gated.ID).State == ledger.StateAwaitingApproval
	})
	slow, err := p.client.Submit(agent.SubmitOptions{Op: "slow", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the slow op to run", func() bool {
		data, _ := os.ReadFile(count)
		return strings.Contains(string(data), "started")
	})
	w0 := p.daemon.probe.N(probe.ControlWakes)
	if _, err := operator.Approve(p.host, gated.ID); err != nil {
		t.Fatal(err)
	}
	// While the slow op holds the agent's one place, the approval waits:
	// the order stays, the request awaits approval, nothing is refused
	// (two control ticks, each trying the order).
	testkit.WaitFor(t, 10*time.Second, "two ticks to try the order", func() bool { return p.daemon.probe.N(probe.ControlWakes) >= w0+2 })
	if st := p.entry(t, gated.ID).State; st != ledger.StateAwaitingApproval {
		t.Fatalf("approved while the agent's place was taken: %s", st)
	}
	if err := p.client.Cancel(slow.ID); err != nil {
		t.Fatal(err)
	}
	if out := p.wait(t, gated.ID); out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != "gated\n" {
		t.Fatalf("the approved request: %s (%s) %q", out.Receipt.Status, out.Receipt.Reason, out.Stdout)
	}
}
