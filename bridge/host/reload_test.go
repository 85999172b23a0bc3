package host

import (
	"context"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/trust"
)

// newOpPolicy is edgePolicy with one more op for cloud-1.
var newOpPolicy = strings.Replace(edgePolicy, `ops = ["missing", "block", "blockidem", "chatty", "gated"]`,
	`ops = ["missing", "block", "blockidem", "chatty", "gated", "fresh"]`, 1) + `
[ops.fresh]
argv = ["sh", "-c", "echo fresh-$0 >> \"$RUNS\"", "{request_id}"]
env = ["PATH", "RUNS"]
`

func (e *edge) writePolicy(t *testing.T, text string) {
	t.Helper()
	// Through a rename, as editors and `cp` to a temp then `mv` do; the
	// reload also settles in-place writes, which TestPolicyEditInPlace
	// covers.
	tmp := e.host.Path(trust.PolicyName) + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, e.host.Path(trust.PolicyName)); err != nil {
		t.Fatal(err)
	}
}

func (e *edge) catalogOps(t *testing.T) []string {
	t.Helper()
	cat, err := e.client.Ops("")
	if err != nil {
		return nil
	}
	var names []string
	for _, op := range cat.Ops {
		names = append(names, op.Name)
	}
	return names
}

// An edited policy is served without a restart: an op it adds runs, the
// catalog names it, the agent gets a notice, and the audit log records it.
func TestPolicyReloadsLive(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	d := e.daemon(t)
	before := d.pol().SHA256
	if out := e.wait(t, e.submit(t, "fresh")); out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "not-allowed" {
		t.Fatalf("an op not in the policy yet: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	e.writePolicy(t, newOpPolicy)
	testkit.WaitFor(t, 10*time.Second, "the catalog to name the new op", func() bool { return slices.Contains(e.catalogOps(t), "fresh") })
	id := e.submit(t, "fresh")
	if out := e.wait(t, id); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the op the edited policy adds: %s (%s: %s)", out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail)
	}
	if n := e.starts(t, "fresh", id); n != 1 {
		t.Fatalf("ran %d times", n)
	}
	if d.pol().SHA256 == before {
		t.Fatal("the daemon still names the old policy")
	}
	// The notice is posted after the catalog, by the reload's goroutine: a
	// round trip of the new op can come first on a loaded machine (CI).
	testkit.WaitFor(t, 20*time.Second, "a policy-changed notice in the agent's inbox", func() bool {
		items, err := e.client.Inbox()
		return err == nil && slices.ContainsFunc(items, func(it agent.InboxItem) bool { return it.Note.Event == bridge.EventPolicyChanged })
	})
	log, _ := os.ReadFile(e.host.Path("audit.log"))
	if !strings.Contains(string(log), `"policy-reload"`) {
		t.Fatal("the audit log does not record the reload")
	}
}

// A policy edit that does not load leaves the one in force serving, and a
// later good edit is taken.
func TestBrokenPolicyEditKeepsTheOld(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	d := e.daemon(t)
	before := d.pol().SHA256
	e.writePolicy(t, edgePolicy+"\n[ops.broken\n")
	// The daemon read it and refused it: its audit line says so (the
	// event, counted, never a time).
	testkit.WaitFor(t, 30*time.Second, "the refused reload in the audit log", func() bool {
		data, _ := os.ReadFile(e.host.Path("audit.log"))
		return strings.Contains(string(data), `"policy-reload"`) && strings.Contains(string(data), "refused")
	})
	if d.pol().SHA256 != before {
		t.Fatal("a policy that does not load replaced the one in force")
	}
	if out := e.wait(t, e.submit(t, "blockidem")); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("an op of the policy in force, after a broken edit: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	e.writePolicy(t, newOpPolicy)
	testkit.WaitFor(t, 10*time.Second, "the good edit to be served", func() bool { return slices.Contains(e.catalogOps(t), "fresh") })
}

// A policy written in place in several steps is not read half-way: a
// changed file is loaded once it kept its version for one control tick.
func TestPolicyReloadWaitsForTheFileToSettle(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.toml")
	write := func(text string) version {
		t.Helper()
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		return versionOf(fi)
	}
	inForce := write(edgePolicy)
	var s settle
	if s.settled(inForce, inForce) {
		t.Fatal("an unchanged file counts as changed")
	}
	half := write(newOpPolicy[:len(newOpPolicy)/2])
	if s.settled(half, inForce) {
		t.Fatal("a file changed since the last check was taken at once")
	}
	whole := write(newOpPolicy)
	if s.settled(whole, inForce) {
		t.Fatal("a file still changing was taken")
	}
	if !s.settled(whole, inForce) {
		t.Fatal("a file that kept its version for a check was not taken")
	}
}

// Row "refuse" from claimed: a request that waited for a slot of its op
// while the policy changed what that op runs is answered rejected
// (policy-changed) and never starts; one whose op the edit left as it was
// runs.
func TestQueuedRequestJudgedByTheNewPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, policy string
		want         string
	}{
		{"op changed", strings.Replace(edgePolicy, `echo out", "{request_id}"]
env = ["PATH", "RUNS"]
concurrency = 1`, `echo changed", "{request_id}"]
env = ["PATH", "RUNS"]
concurrency = 1`, 1), bridge.StatusRejected},
		{"op removed", strings.Replace(edgePolicy, `"missing", "block", "blockidem"`, `"missing", "blockidem"`, 1), bridge.StatusRejected},
		{"another op changed", newOpPolicy, bridge.StatusDone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.policy == edgePolicy {
				t.Fatal("the edit changes nothing")
			}
			e := newEdge(t)
			e.block()
			d := e.daemon(t)
			before := d.pol().SHA256
			first := e.submit(t, "block")
			testkit.WaitFor(t, 10*time.Second, "the first to run", func() bool { return e.starts(t, "block", first) == 1 })
			queued := e.submit(t, "block")
			testkit.WaitFor(t, 10*time.Second, "the second to wait for the slot", func() bool { return e.entry(t, queued).State == ledger.StateClaimed })
			e.writePolicy(t, tc.policy)
			testkit.WaitFor(t, 10*time.Second, "the reload", func() bool { return d.pol().SHA256 != before })
			e.unblock()
			out := e.wait(t, queued)
			if out.Receipt.Status != tc.want {
				t.Fatalf("queued request: %s (%s: %s), want %s", out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail, tc.want)
			}
			starts := e.starts(t, "block", queued)
			if tc.want == bridge.StatusRejected {
				if out.Receipt.Reason != ReasonPolicyChanged || starts != 0 {
					t.Fatalf("reason %s, started %d times", out.Receipt.Reason, starts)
				}
			} else if starts != 1 {
				t.Fatalf("started %d times", starts)
			}
			if out := e.wait(t, first); out.Receipt.Status != bridge.StatusDone {
				t.Fatalf("the run that started before the edit: %s", out.Receipt.Status)
			}
		})
	}
}

// A concurrency limit raised by a reload lets a request waiting for its
// op's slot start at once, while the run ahead of it still runs.
func TestRaisedConcurrencyFreesWaiters(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	e.block()
	d := e.daemon(t)
	before := d.pol().SHA256
	first := e.submit(t, "block")
	testkit.WaitFor(t, 10*time.Second, "the first to run", func() bool { return e.starts(t, "block", first) == 1 })
	queued := e.submit(t, "block")
	testkit.WaitFor(t, 10*time.Second, "the second to wait for the slot", func() bool { return e.entry(t, queued).State == ledger.StateClaimed })
	e.writePolicy(t, strings.Replace(edgePolicy, "concurrency = 1", "concurrency = 2", 1))
	testkit.WaitFor(t, 10*time.Second, "the reload", func() bool { return d.pol().SHA256 != before })
	testkit.WaitFor(t, 10*time.Second, "the waiter to start beside the first", func() bool { return e.starts(t, "block", queued) == 1 })
	e.unblock()
	for _, id := range []string{first, queued} {
		if out := e.wait(t, id); out.Receipt.Status != bridge.StatusDone || e.starts(t, "block", id) != 1 {
			t.Fatalf("%s: %s, started %d times", id, out.Receipt.Status, e.starts(t, "block", id))
		}
	}
}

// A lowered limit counts the runs that hold their slots already: nothing
// more starts until enough of them end.
func TestLoweredConcurrencyCountsRunningOnes(t *testing.T) {
	t.Parallel()
	s := newScheduler(&base{})
	waiters := func() (busy, n int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.slots["op"].busy, len(s.slots["op"].waiters)
	}
	ctx := context.Background()
	r1, r2 := s.acquire(ctx, "op", 2), s.acquire(ctx, "op", 2)
	got := make(chan func(), 1)
	go func() { got <- s.acquire(ctx, "op", 1) }()
	testkit.WaitFor(t, 5*time.Second, "the third to wait", func() bool { _, n := waiters(); return n == 1 })
	r1()
	// A slot is granted under the scheduler's lock as the release gives
	// it back: had the waiter been let in, it would no longer wait.
	if busy, n := waiters(); n != 1 || busy != 1 {
		t.Fatalf("under a limit lowered to 1, after one of two runs ended: %d busy, %d waiting; want 1 and 1", busy, n)
	}
	r2()
	select {
	case r3 := <-got:
		r3()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never got its slot")
	}
	ctx2, cancel := context.WithCancel(ctx)
	hold := s.acquire(ctx, "op", 1)
	go func() { got <- s.acquire(ctx2, "op", 1) }()
	testkit.WaitFor(t, 5*time.Second, "a waiter", func() bool { _, n := waiters(); return n == 1 })
	cancel()
	if r := <-got; r != nil {
		t.Fatal("a cancelled wait got a slot")
	}
	hold()
	if busy, n := waiters(); busy != 0 || n != 0 {
		t.Fatalf("slots leak: %d busy, %d waiting", busy, n)
	}
}

// A limit a reload sets on an op that had none counts the runs going
// already: under a new limit of 1, nothing more starts while two run.
func TestLimitSetByReloadCountsRunningOnes(t *testing.T) {
	t.Parallel()
	par := `
[ops.par]
argv = ["sh", "-c", "echo par-$0 >> \"$RUNS\"; while [ -f \"$RUNS.block\" ]; do sleep 0.05; done", "{request_id}"]
env = ["PATH", "RUNS"]
idempotent = true
concurrency = %d
`
	withPar := func(n int) string {
		return strings.Replace(edgePolicy, `"chatty", "gated"]`, `"chatty", "gated", "par"]`, 1) + fmt.Sprintf(par, n)
	}
	e := newEdge(t)
	e.writePolicy(t, withPar(0))
	e.block()
	d := e.daemon(t)
	a, b := e.submit(t, "par"), e.submit(t, "par")
	testkit.WaitFor(t, 10*time.Second, "two runs at once", func() bool { return e.starts(t, "par", a) == 1 && e.starts(t, "par", b) == 1 })
	before := d.pol().SHA256
	e.writePolicy(t, withPar(1))
	testkit.WaitFor(t, 10*time.Second, "the reload", func() bool { return d.pol().SHA256 != before })
	c := e.submit(t, "par")
	testkit.WaitFor(t, 10*time.Second, "the third to be claimed", func() bool {
		st := e.entry(t, c).State
		return st == ledger.StateClaimed || st == ledger.StateRunning
	})
	settleRescans(t, d)
	if n := e.starts(t, "par", c); n != 0 {
		t.Fatalf("a third run started under a limit of 1 with two running")
	}
	e.unblock()
	if out := e.wait(t, c); out.Receipt.Status != bridge.StatusDone || e.starts(t, "par", c) != 1 {
		t.Fatalf("the third: %s, started %d times", out.Receipt.Status, e.starts(t, "par", c))
	}
}

// A request an agent sent before the host paired it is answered once the
// host pairs it, without waiting for the next rescan (here an hour): the
// first op after pairing took up to --rescan (30 s) on a local folder.
//
// Not in parallel: it counts on one notify event with no rescan to fall back
// on, and the process's tests share one notify instance, which drops events
// when flooded.
func TestRequestOfANewlyTrustedAgentIsReadAtOnce(t *testing.T) {
	base := t.TempDir()
	folder := filepath.Join(base, "folder")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := trust.InitHome(filepath.Join(base, "host"), "host", "laptop", folder)
	if err != nil {
		t.Fatal(err)
	}
	a, err := trust.InitHome(filepath.Join(base, "agent"), "agent", "cloud-1", folder)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Trust(h.BundleText(), "laptop"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.Path(trust.PolicyName), []byte(testPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := agent.OpenClient(a)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d := runDaemon(t, h, DaemonOptions{Rescan: time.Hour})
	s, err := c.Submit(agent.SubmitOptions{Op: bridge.PingOp})
	if err != nil {
		t.Fatal(err)
	}
	// The daemon sees it, and ignores it: cloud-1 is not trusted. (Its
	// log-once note is the counted event; with no rescan in the hour, only
	// the trust's reload can take the request up after it.)
	testkit.WaitFor(t, 20*time.Second, "the daemon to ignore the untrusted agent's request", func() bool {
		n := &d.notes
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.seen == nil {
			return false // no note yet, and no seed to hash with (it panics)
		}
		return n.seen[maphash.String(n.seed, "agent:"+a.Bundle().ID)]
	})
	if _, err := h.Trust(a.BundleText(), "cloud-1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := c.Wait(ctx, s.ID, nil)
	if err != nil {
		t.Fatalf("a request sent before the pairing waited for the next rescan: %v", err)
	}
	if out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("answer: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
}
