package systest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/doctor"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/syncsafe"
)

// TestUnisonEndToEnd runs host and agent on two folders kept in step by a
// real Unison (fixtures/clients/unison.prf, repeat = 1); see
// loopClientEndToEnd for what it does and requires.
func TestUnisonEndToEnd(t *testing.T) {
	// In parallel with the other real sync clients' tests and the crash
	// loop's steps: they mostly wait on processes of their own.
	t.Parallel()
	if testing.Short() {
		t.Skip("a system suite: -short leaves it out (docs/TESTING.md, \"Running\")")
	}
	loopClientEndToEnd(t, startUnison(t), "never (conflict_on_2020-01-01).manifest", nil)
}

// TestRcloneBisyncEndToEnd runs host and agent on two folders kept in step by
// fixtures/clients/rclone-loop.sh: rclone bisync every second, local to
// local. With Debian's rclone 1.60 a file the bridge writes while bisync runs
// locks bisync out ("Must run --resync") and the loop's --resync recovers;
// see loopClientEndToEnd for the rest.
func TestRcloneBisyncEndToEnd(t *testing.T) {
	// In parallel with the other real sync clients' tests and the crash
	// loop's steps: they mostly wait on processes of their own.
	t.Parallel()
	if testing.Short() {
		t.Skip("a system suite: -short leaves it out (docs/TESTING.md, \"Running\")")
	}
	c := startRclone(t)
	lockedOut := false
	loopClientEndToEnd(t, c, "never.manifest..path1", func(p *pair) {
		lockedOut = rcloneLockout(t, c, p)
	})
	// The loop recovered: doctor finds nothing stuck any more.
	for _, f := range host.Doctor(c.p.host, doctor.Options{RcloneWorkdirs: []string{c.rcloneWorkdir()}}) {
		if f.Check == "rclone" && f.Severity != doctor.SeverityOK {
			t.Errorf("doctor after the loop recovered: %s: %s", f.Severity, f.Message)
		}
	}
	t.Logf("a real lockout was made and recovered from: %v", lockedOut)
	// How often the loop had to recover (a count, not a requirement: it
	// depends on timing, and on 1.66 it should be none).
	b, _ := os.ReadFile(filepath.Join(c.base, c.name+".log"))
	t.Logf("rclone-loop ran --resync %d times (the first run always does)", strings.Count(string(b), "rclone-loop: bisync needs --resync"))
}

// loopClientEndToEnd drives one client through what the real-Syncthing test
// does, in fewer requests: round trips one at a time (logged: the figure in
// OPERATIONS.md), requests in flight together, a SIGKILL and restart of the
// daemon process with requests sent while it is down, a keyed retry, a
// conflict on a request file (a second writer on the host's side while the
// client is stopped; the agent retries with its key, which re-delivers the
// manifest if the client took the real name away), a delete racing a change
// (the agent removes a finished request while the host's side changes it),
// and a valid request whose manifest exists only under the client's
// conflict-copy name (never). It requires: every request answered (done, or
// uncertain for a run the kill cut off), none run twice, the conflict copies
// never admitted, the daemon's log naming each copy as the client's, and
// `doctor` listing them.
func loopClientEndToEnd(t *testing.T, c *loopClient, neverName string, whileStopped func(*pair)) {
	t0 := time.Now()
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf("[%6.2fs] "+format, append([]any{time.Since(t0).Seconds()}, args...)...)
	}
	p := loopHomes(t, c)
	c.p = p
	base := t.TempDir()
	hostID, agentID := p.host.Config.ID, p.agent.Config.ID
	toHostA := filepath.Join(c.A, filepath.FromSlash(bridge.ToHostDir(hostID, agentID)))
	toHostB := filepath.Join(c.B, filepath.FromSlash(bridge.ToHostDir(hostID, agentID)))
	countFile := filepath.Join(base, "count")
	env := "COUNT_FILE=" + countFile
	daemon := startDaemonProcess(t, p, env)
	daemonLogs := []string{daemon.Log.Name()}
	logf("%s: homes initialised through the sync; daemon started", c.name)

	var ids []string
	send := func(o agent.SubmitOptions) string {
		t.Helper()
		o.Op = "count"
		s, err := p.client.Submit(o)
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		return s.ID
	}
	submit := func(o agent.SubmitOptions) string {
		t.Helper()
		id := send(o)
		ids = append(ids, id)
		return id
	}
	result := func(id string, timeout time.Duration) *agent.Outcome {
		t.Helper()
		var out *agent.Outcome
		deadline := time.Now().Add(timeout)
		for {
			var err error
			if out, err = p.client.Result(id); err == nil {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("no result for %s after %s: %v%s", id, timeout, err, c.logTail())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	executed := func() int { return len(testkit.Lines(t, countFile)) }

	// Round trips, one request at a time.
	var rtts []time.Duration
	for i := 0; i < 3; i++ {
		start := time.Now()
		result(submit(agent.SubmitOptions{}), 60*time.Second)
		rtts = append(rtts, time.Since(start))
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	logf("%s round trip, one request at a time: median %s (of %v)", c.name, rtts[1].Round(10*time.Millisecond), rtts)

	// Requests in flight together; SIGKILL the daemon while it works on
	// them, send more while it is down, restart it.
	for i := 0; i < 12; i++ {
		submit(agent.SubmitOptions{})
	}
	before := executed()
	testkit.WaitFor(t, 90*time.Second, "the daemon to run part of the wave", func() bool { return executed() >= before+2 })
	daemon.Kill()
	logf("daemon SIGKILLed with %d executed", executed())
	for i := 0; i < 4; i++ {
		submit(agent.SubmitOptions{})
	}
	daemon = startDaemonProcess(t, p, env)
	daemonLogs = append(daemonLogs, daemon.Log.Name())
	logf("daemon restarted")

	// A keyed retry: the same id, answered from the first run.
	keyed := submit(agent.SubmitOptions{Key: "retry"})
	first := result(keyed, 90*time.Second)
	if again := send(agent.SubmitOptions{Key: "retry"}); again != keyed {
		t.Fatalf("keyed retry: id %s, want %s", again, keyed)
	}
	if out := result(keyed, time.Second); out.Receipt.Finished != first.Receipt.Finished || out.Receipt.ID != first.Receipt.ID {
		t.Errorf("keyed retry: a different result")
	}
	logf("keyed retry answered from the first run")

	// A conflict on a request file and a delete racing a change, made while
	// the client is stopped so both sides change before it looks. The
	// delete: the agent removes a finished request's manifest (its own
	// file, as after an ack) while a second writer on the host's side
	// changes it.
	victim := ids[0]
	victimName := victim + "." + bridge.ExtManifest
	c.stop()
	junk := []byte("not the agent's manifest\n")
	conflicted, err := p.agent.KeyedRequestID(hostID, "count", map[string]string{}, "conflict")
	if err != nil {
		t.Fatal(err)
	}
	testkit.PlantFile(t, base, filepath.Join(toHostA, conflicted+"."+bridge.ExtManifest), junk, time.Now().Add(-time.Hour))
	submit(agent.SubmitOptions{Key: "conflict"})
	if err := os.Remove(filepath.Join(toHostB, victimName)); err != nil {
		t.Fatal(err)
	}
	testkit.PlantFile(t, base, filepath.Join(toHostA, victimName), []byte("a second writer's change\n"), time.Now())
	// A valid request whose manifest is only under a conflict-copy name.
	never, manifest, payload := p.sealManual(t, "count", nil, nil)
	neverName = strings.Replace(neverName, "never", never, 1)
	testkit.PlantFile(t, base, filepath.Join(toHostB, never+"."+bridge.ExtPayload), payload, time.Now())
	testkit.PlantFile(t, base, filepath.Join(toHostB, neverName), manifest, time.Now())
	if whileStopped != nil {
		whileStopped(p)
	}
	resyncs := func() int {
		b, _ := os.ReadFile(filepath.Join(c.base, c.name+".log"))
		return strings.Count(string(b), "rclone-loop: bisync needs --resync")
	}
	resyncsBefore := resyncs()
	c.start()
	c.waitSame(60 * time.Second)
	// A --resync over the conflict (after a lockout) takes the union of
	// both sides and makes no conflict copy of its own.
	resyncedOverConflict := resyncs() > resyncsBefore
	// The retry re-delivers the manifest if the client took the real name
	// away (rclone before 1.66 renames both sides of a conflict).
	if again := send(agent.SubmitOptions{Key: "conflict"}); again != conflicted {
		t.Fatalf("keyed retry of the conflicted request: id %s, want %s", again, conflicted)
	}
	logf("conflict and delete-versus-change made; client restarted")
	for i := 0; i < 6; i++ {
		submit(agent.SubmitOptions{})
	}

	// Every request answered.
	outcomes := map[string]*agent.Outcome{}
	deadline := time.Now().Add(2 * time.Minute)
	for len(outcomes) < len(ids) {
		for _, id := range ids {
			if outcomes[id] != nil {
				continue
			}
			if out, err := p.client.Result(id); err == nil {
				outcomes[id] = out
			} else if !errors.Is(err, agent.ErrNoResult) {
				logf("result %s: %v (waiting for another version)", id, err)
			}
		}
		if len(outcomes) == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			var missing []string
			for _, id := range ids {
				if outcomes[id] == nil {
					missing = append(missing, id)
				}
			}
			tail, _ := os.ReadFile(daemonLogs[len(daemonLogs)-1])
			if len(tail) > 3000 {
				tail = tail[len(tail)-3000:]
			}
			t.Fatalf("%d of %d requests unanswered after 2 minutes: %v\nA: %v\nB: %v%s\n--- daemon log (tail) ---\n%s",
				len(missing), len(ids), missing, listDir(toHostA), listDir(toHostB), c.logTail(), tail)
		}
		time.Sleep(100 * time.Millisecond)
	}
	logf("all %d requests answered", len(ids))
	c.waitSame(60 * time.Second)
	daemon.WaitRescans(t, 5) // a late admission would show

	// At most once; done, or uncertain for a run the kill cut off.
	seen := map[string]int{}
	for _, l := range testkit.Lines(t, countFile) {
		seen[l]++
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	uncertain := 0
	for _, id := range ids {
		rc := outcomes[id].Receipt
		switch {
		case rc.Status == bridge.StatusDone && seen[id] == 1:
		case rc.Status == bridge.StatusUncertain && rc.Reason == "crashed" && seen[id] <= 1:
			uncertain++
		default:
			t.Errorf("request %s ended %s (%s) and ran %d times", id, rc.Status, rc.Reason, seen[id])
		}
	}
	for id, n := range seen {
		if !want[id] || n > 1 {
			t.Errorf("the count file names %s %d times (submitted at its real name: %v)", id, n, want[id])
		}
	}
	if uncertain > syncthingOpConcurrency {
		t.Errorf("%d requests uncertain after one kill; at most %d runs were in flight", uncertain, syncthingOpConcurrency)
	}
	entries, err := operator.LedgerEntries(p.host)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Runs > 1 || !want[e.ID] {
			t.Errorf("ledger: %s %s started %d times (submitted: %v)", e.ID, e.State, e.Runs, want[e.ID])
		}
	}
	if _, err := p.client.Result(never); !errors.Is(err, agent.ErrNoResult) {
		t.Errorf("the request whose manifest is only under a conflict name: result %v, want none", err)
	}

	// The client's own copies: on the host's side, each logged by the daemon
	// as this client's conflict copy, and listed by doctor.
	var copies []string
	for _, e := range listDir(toHostA) {
		if cl := syncsafe.Classify(e); cl.Kind == syncsafe.KindConflict {
			copies = append(copies, e)
			if cl.Client != c.name {
				t.Errorf("%q is classified as %s's, not %s's", e, cl.Client, c.name)
			}
		}
	}
	switch {
	case len(copies) < 1:
		t.Errorf("no conflict copy on the host's side, want at least the planted one: %v", listDir(toHostA))
	case len(copies) < 2 && !resyncedOverConflict:
		t.Errorf("%d conflict copies on the host's side, want the planted one and the client's own: %v", len(copies), listDir(toHostA))
	case len(copies) < 2:
		t.Logf("the client made no conflict copy of its own: a --resync ran over the conflict")
	}
	var logs strings.Builder
	for _, f := range daemonLogs {
		b, _ := os.ReadFile(f)
		logs.Write(b)
	}
	for _, name := range copies {
		found := false
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, name) && strings.Contains(l, "kind=conflict client="+c.name) {
				found = true
			}
		}
		if !found {
			t.Errorf("the daemon's log does not show %q ignored as a %s conflict copy", name, c.name)
		}
	}
	var conflictsFinding string
	for _, f := range host.Doctor(p.host, doctor.Options{}) {
		if f.Check == "conflicts" {
			conflictsFinding = f.Message
		}
	}
	for _, name := range copies {
		if !strings.Contains(conflictsFinding, name) {
			t.Errorf("doctor's conflicts finding does not name %q: %s", name, conflictsFinding)
		}
	}
	logf("%d requests: %d uncertain, %d executions; conflict copies %q never run", len(ids), uncertain, len(testkit.Lines(t, countFile)), copies)
}

// listDir lists the names in dir.
func listDir(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// rcloneLockout brings the stopped loop's bisync session into the state
// rclone before 1.66 leaves after a file changed while it ran: one bisync
// run, with the loop's workdir and filters, while files in the folder
// change under it. It requires doctor to report the lockout, and reports
// whether one was made (1.66 and later may not lock out).
func rcloneLockout(t *testing.T, c *loopClient, p *pair) bool {
	t.Helper()
	storm := filepath.Join(c.A, "storm")
	if err := os.MkdirAll(storm, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(storm)
	for try := 0; try < 5; try++ {
		stop := make(chan struct{})
		stormDone := make(chan struct{})
		go func() {
			defer close(stormDone)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				os.WriteFile(filepath.Join(storm, fmt.Sprintf("f%d", i)), []byte("x"), 0o644)
				os.Remove(filepath.Join(storm, fmt.Sprintf("f%d", i-3)))
				time.Sleep(5 * time.Millisecond)
			}
		}()
		time.Sleep(100 * time.Millisecond)
		cmd := c.command()
		cmd.Args = []string{"rclone", "bisync", c.B, c.A, "--workdir", c.rcloneWorkdir(), "--filters-file", filepath.Join(c.base, "filters.txt")}
		cmd.Path, _ = exec.LookPath("rclone")
		out, err := cmd.CombinedOutput()
		close(stop)
		<-stormDone
		if err == nil || !strings.Contains(string(out), "Must run --resync") {
			continue
		}
		var found []string
		for _, f := range host.Doctor(p.host, doctor.Options{RcloneWorkdirs: []string{c.rcloneWorkdir()}}) {
			if f.Check == "rclone" && f.Severity == doctor.SeverityProblem && strings.Contains(f.Message, "locked out") {
				found = append(found, f.Message)
			}
		}
		if len(found) == 0 {
			t.Errorf("bisync locked out (%v; workdir %v) but doctor does not say so", err, listDir(c.rcloneWorkdir()))
		}
		return true
	}
	if !rcloneResilient(t) {
		t.Errorf("rclone before 1.66 did not lock out in 5 runs with files changing under it")
	}
	return false
}

// rcloneResilient reports whether the rclone in PATH has bisync --resilient
// (1.66 and later).
func rcloneResilient(t *testing.T) bool {
	out, _ := exec.Command("rclone", "bisync", "--help").CombinedOutput()
	return strings.Contains(string(out), "--resilient")
}
