package host

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/trust"
)

// readStamp reads and verifies the stamp the daemon published for the
// pair's agent.
func (p *pair) readStamp(t *testing.T) *bridge.LivenessStamp {
	t.Helper()
	data, err := os.ReadFile(p.folder + "/" + bridge.LivenessPath(p.host.Config.ID, p.agent.Config.ID))
	if err != nil {
		t.Fatal(err)
	}
	st, err := bridge.OpenLiveness(data, p.host.Config.ID, p.agent.Config.ID, [][]byte{p.host.Identity().SignPublic()})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// eventuallyStamp waits, for what the daemon does on its next control tick,
// until the stamp satisfies ok.
func (p *pair) eventuallyStamp(t *testing.T, what string, ok func(*bridge.LivenessStamp) bool) *bridge.LivenessStamp {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st := p.readStamp(t); ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stamp never %s: %+v", what, p.readStamp(t))
		}
	}
}

// The daemon's stamp follows what the agent needs to know: serving and
// accepting its key from the start, refusing it once revoked, the policy
// in force after a reload, and "stopped" after a clean stop. The agent's
// client reads each as its verdict.
func TestLivenessStampFollowsTheHost(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	kid := p.agent.Identity().SignKid()
	st := p.readStamp(t)
	if st.State != bridge.LivenessServing || !slices.Equal(st.Accepts, []string{kid}) || st.AgentSeq != 0 ||
		st.Policy != p.daemon.pol().SHA256 || st.Interval != int64(bridge.DefaultLivenessInterval/time.Second) ||
		st.HostKid != p.host.Identity().SignKid() || !st.Trusted {
		t.Fatalf("stamp at start: %+v", st)
	}
	if lv, err := p.client.HostLiveness("laptop"); err != nil || lv.Verdict != agent.LivenessOK || !lv.Accepted {
		t.Fatalf("agent's verdict at start: %+v, %v", lv, err)
	}

	// A policy reload is in the stamp at once, not at the next interval.
	if err := os.WriteFile(p.host.Path(trust.PolicyName), []byte(testPolicy+"\n# changed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	was := st.Policy
	p.eventuallyStamp(t, "named the reloaded policy", func(s *bridge.LivenessStamp) bool { return s.Policy != was })

	// A revocation by `bridge keys revoke` (another process, the home).
	if _, err := p.host.Revoke(kid); err != nil {
		t.Fatal(err)
	}
	p.eventuallyStamp(t, "dropped the revoked key", func(s *bridge.LivenessStamp) bool { return len(s.Accepts) == 0 })
	lv, err := p.client.HostLiveness("")
	if err != nil || lv.Verdict != agent.LivenessNotAccepted {
		t.Fatalf("agent's verdict after the revocation: %+v, %v", lv, err)
	}

	// A clean stop says so.
	p.stop(t)
	if st := p.readStamp(t); st.State != bridge.LivenessStopped {
		t.Fatalf("stamp after a clean stop: %+v", st)
	}
}

// Quiet churn: a serving daemon rewrites its stamp once per interval, not
// on every control tick; a removed agent keeps being told it is refused.
func TestLivenessStampInterval(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	d := runDaemon(t, p.host, DaemonOptions{Rescan: 500 * time.Millisecond, Now: now, LivenessInterval: time.Minute})
	first, err := os.ReadFile(p.folder + "/" + bridge.LivenessPath(p.host.Config.ID, p.agent.Config.ID))
	if err != nil {
		t.Fatal(err)
	}
	st := p.readStamp(t)
	if st.Interval != 60 {
		t.Fatalf("interval %d, want 60", st.Interval)
	}
	// Several control ticks within the interval change nothing (each
	// one counted: an idle loop need not wake by itself for seconds).
	offset.Store(int64(50 * time.Second))
	for range 3 {
		w := d.probe.N(probe.ControlWakes)
		select {
		case d.controlPoke <- struct{}{}:
		default:
		}
		testkit.WaitFor(t, 10*time.Second, "a control tick", func() bool { return d.probe.N(probe.ControlWakes) > w })
	}
	again, _ := os.ReadFile(p.folder + "/" + bridge.LivenessPath(p.host.Config.ID, p.agent.Config.ID))
	if string(again) != string(first) {
		t.Fatal("the stamp was rewritten within its interval")
	}
	// Past the interval it is rewritten with the host's time.
	offset.Store(int64(70 * time.Second))
	p.eventuallyStamp(t, "was rewritten after its interval", func(s *bridge.LivenessStamp) bool { return s.Time >= st.Time+60 })

	// The agent is removed from the host: its stamp now accepts nothing.
	if _, err := p.host.Remove("cloud-1"); err != nil {
		t.Fatal(err)
	}
	p.eventuallyStamp(t, "refused the removed agent", func(s *bridge.LivenessStamp) bool { return len(s.Accepts) == 0 && !s.Trusted })
	// Its requests will never be answered: the agent's wait ends at once.
	s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "orphan"}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	if _, err := p.client.Wait(wctx, s.ID, nil); !errors.Is(err, agent.ErrNotAccepted) {
		t.Fatalf("wait on a host that removed the agent: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopDaemon(d, ctx)
	if st := p.readStamp(t); st.State != bridge.LivenessStopped || len(st.Accepts) != 0 {
		t.Fatalf("removed agent's stamp after the stop: %+v", st)
	}
}

// A control-loop round under way when the stop comes does not write
// serving over the draining stamp (red team of 1a2e763: a round past its
// stop check, paused here in refreshLiveness, wrote serving, and agents
// were told "serving" for the whole drain).
func TestDrainingStampIsNotOverwritten(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	var armed atomic.Bool
	blocked, release := make(chan struct{}), make(chan struct{})
	now := func() time.Time {
		if armed.Load() {
			buf := make([]byte, 8192)
			st := buf[:runtime.Stack(buf, false)]
			if bytes.Contains(st, []byte("refreshLiveness")) && !bytes.Contains(st, []byte("publishLiveness")) && armed.CompareAndSwap(true, false) {
				close(blocked)
				<-release
				return time.Now().Add(time.Hour) // past the interval: it publishes
			}
		}
		return time.Now()
	}
	d := p.runningSlowOp(t, DaemonOptions{Now: now})
	armed.Store(true)
	select {
	case d.controlPoke <- struct{}{}:
	default:
	}
	<-blocked // the control loop is in a round, past its stop check
	closed := stopWithin(d, 5*time.Second)
	p.eventuallyStamp(t, "said draining", func(s *bridge.LivenessStamp) bool { return s.State == bridge.LivenessDraining })
	close(release)
	// The round ends (its goroutine leaves controlLoop): a counted event.
	testkit.WaitFor(t, 20*time.Second, "the control loop to end", func() bool { return d.probe.N(probe.ControlEnds) >= 1 })
	select {
	case <-closed:
		t.Fatal("the drain ended before the check")
	default:
	}
	if st := p.readStamp(t); st.State != bridge.LivenessDraining {
		t.Errorf("the stamp during the drain says %q, want draining", st.State)
	}
	<-closed
	if st := p.readStamp(t); st.State != bridge.LivenessStopped {
		t.Errorf("the stamp after the stop says %q, want stopped", st.State)
	}
}

// runningSlowOp runs a daemon for the pair and an op that sleeps 30 s in
// it, and returns once the op started.
func (p *pair) runningSlowOp(t *testing.T, opt DaemonOptions) *Daemon {
	t.Helper()
	count := filepath.Join(t.TempDir(), "count")
	opt.Rescan, opt.Grace, opt.Env = 500*time.Millisecond, 100*time.Millisecond, envWith(map[string]string{"COUNT_FILE": count})
	d := runDaemon(t, p.host, opt)
	if _, err := p.client.Submit(agent.SubmitOptions{Op: "slow"}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the op to start", func() bool { b, _ := os.ReadFile(count); return len(b) > 0 })
	return d
}

// stopWithin stops d as a first signal does, with a drain of drain (then
// the op is stopped); the channel closes once it stopped.
func stopWithin(d *Daemon, drain time.Duration) <-chan struct{} {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		ctx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		stopDaemon(d, ctx)
	}()
	return closed
}

// A drain longer than the stamps' interval rewrites its draining stamp,
// or agents would call a host that drains as told "stale" (red team of
// 1a2e763).
func TestLongDrainRewritesItsStamp(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	closed := stopWithin(p.runningSlowOp(t, DaemonOptions{LivenessInterval: time.Second}), 6*time.Second)
	first := p.eventuallyStamp(t, "said draining", func(s *bridge.LivenessStamp) bool { return s.State == bridge.LivenessDraining })
	p.eventuallyStamp(t, "rewrote its draining stamp", func(s *bridge.LivenessStamp) bool {
		return s.State == bridge.LivenessDraining && s.Time > first.Time
	})
	<-closed
	if st := p.readStamp(t); st.State != bridge.LivenessStopped {
		t.Errorf("the stamp after the stop says %q, want stopped", st.State)
	}
}
