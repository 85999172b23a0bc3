package host

// One test per invariant of DESIGN §3 (docs/DESIGN.md names them). Each
// runs the real daemon and agent client on real directories.

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// fileState is what a snapshot records of one entry.
type fileState struct {
	mode  fs.FileMode
	size  int64
	mtime time.Time
	ino   uint64
	data  string
}

// snapshot records every entry under root (relative path → state).
func snapshot(t *testing.T, root string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		st := fileState{mode: fi.Mode(), size: fi.Size(), mtime: fi.ModTime()}
		if s, ok := fi.Sys().(*syscall.Stat_t); ok {
			st.ino = s.Ino
		}
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			st.data = string(b)
		}
		out[rel] = st
		return nil
	})
	return out
}

func sameTree(t *testing.T, what string, before, after map[string]fileState) {
	t.Helper()
	for p, b := range before {
		a, ok := after[p]
		if !ok {
			t.Errorf("%s: %s was removed", what, p)
		} else if a != b {
			t.Errorf("%s: %s was changed", what, p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s: %s was created", what, p)
		}
	}
}

func (p *pair) toHost() string {
	return filepath.Join(p.folder, bridge.ToHostDir(p.host.Config.ID, p.agent.Config.ID))
}

func (p *pair) toAgent() string {
	return filepath.Join(p.folder, bridge.ToAgentDir(p.host.Config.ID, p.agent.Config.ID))
}

func (p *pair) entry(t *testing.T, id string) ledger.Entry {
	t.Helper()
	return testkit.Entry(t, p.host, id)
}

// sealManual builds a request without publishing it, so tests can deliver
// its files the way a sync client would. The agent remembers it.
func (p *pair) sealManual(t *testing.T, op string, args map[string]string, tweak func(*bridge.NewRequest)) (id string, manifest, payload []byte) {
	t.Helper()
	return testkit.SealManual(t, p.client, p.agent, p.host.Config.ID, op, args, tweak)
}

func (p *pair) wait(t *testing.T, id string) *agent.Outcome {
	t.Helper()
	return testkit.Wait(t, p.client, id, p.waitFailed)
}

// settleRescans waits until d has dispatched three more full rescans: a test of
// what did not happen waits for counted events, never a time a slow
// machine can outrun (issue 28: settleFor proved absence by sleeping).
func settleRescans(t *testing.T, d *Daemon) {
	t.Helper()
	waitDaemonRescans(t, d, 3)
}

// waitDaemonRescans waits until d has dispatched n more full rescans.
func waitDaemonRescans(t *testing.T, d *Daemon, n int) {
	t.Helper()
	count := func() int {
		d.fin.mu.Lock()
		defer d.fin.mu.Unlock()
		return d.fin.rescans
	}
	want := count() + n
	for deadline := time.Now().Add(60 * time.Second); count() < want; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d rescans in a minute", count()-want+n, n)
		}
	}
}

// Invariant 1: one writer per file and per tree. The host writes nothing in
// the agent's to-host tree and the agent nothing in the host's to-agent tree.
func TestInvariant1OneWriterPerTree(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	var ids []string
	for _, msg := range []string{"a", "b", "c"} {
		s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": msg}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	s, err := p.client.Submit(agent.SubmitOptions{Op: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, s.ID)
	if err := p.client.Cancel(ids[2]); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, p.toHost())
	p.start(t, nil)
	for _, id := range ids {
		p.wait(t, id)
	}
	settleRescans(t, p.daemon)
	sameTree(t, "host in the agent's tree", before, snapshot(t, p.toHost()))

	results := snapshot(t, p.toAgent())
	if len(results) < 2*len(ids) {
		t.Fatalf("expected %d result files, found %d", 2*len(ids), len(results))
	}
	for _, id := range ids {
		if _, err := p.client.Status(id); err != nil {
			t.Fatal(err)
		}
		out, err := p.client.Result(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.client.Ack(out); err != nil {
			t.Fatal(err)
		}
	}
	sameTree(t, "agent in the host's tree", results, snapshot(t, p.toAgent()))
}

// Invariant 2: complete means hash-complete. A payload at its final name that
// is a prefix, or of the right length with other bytes, is pending arrival;
// the request runs once, when the bytes match the signed pin.
func TestInvariant2CompleteMeansHashComplete(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	id, manifest, payload := p.sealManual(t, "count", nil, nil)
	dir := p.toHost()
	if err := os.WriteFile(filepath.Join(dir, id+".manifest"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the manifest to be seen", func() bool { return p.entry(t, id).State == ledger.StatePending })
	steps := [][]byte{
		payload[:len(payload)/2],                             // a growing file (rclone < 1.63, in-place writers)
		append(bytes.Repeat([]byte{0}, len(payload)-1), 'x'), // pre-sized, not yet written (Syncthing temp style)
		// An intermediate complete-looking version: the last byte another
		// (a fixed 0 was the payload's own one time in 256, and it ran).
		append(append([]byte{}, payload[:len(payload)-1]...), payload[len(payload)-1]^0xff),
	}
	ppath := filepath.Join(dir, id+".payload")
	for i, s := range steps {
		if err := os.WriteFile(ppath, s, 0o644); err != nil {
			t.Fatal(err)
		}
		settleRescans(t, p.daemon)
		if e := p.entry(t, id); e.State != ledger.StatePending || e.Runs != 0 {
			t.Fatalf("step %d: state %s runs %d; want pending, 0", i, e.State, e.Runs)
		}
		if n := testkit.Count(t, countFile, "run"); n != 0 {
			t.Fatalf("step %d: the op ran %d times on an incomplete payload", i, n)
		}
	}
	if err := os.WriteFile(ppath, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	out := p.wait(t, id)
	if out.Receipt.Status != bridge.StatusDone || testkit.Count(t, countFile, "run") != 1 {
		t.Fatalf("status %s, runs %d", out.Receipt.Status, testkit.Count(t, countFile, "run"))
	}
}

// Invariant 3: ledger before effect. While the op runs, the ledger already
// says running (the op reads the ledger file itself); once a result is
// visible to the agent, the host has published it before recording done.
func TestInvariant3LedgerBeforeEffect(t *testing.T) {
	t.Parallel()
	policy := testPolicy + `
[ops.ledger]
argv = ["sh", "-c", "cat \"$LEDGER_FILE\""]
env = ["PATH", "LEDGER_FILE"]
[agents.probe]
ops = ["ledger"]
`
	policy = strings.Replace(policy, `ops = ["echo", "count", "slow", "slowidem", "env"]`, `ops = ["echo", "count", "slow", "slowidem", "env", "ledger"]`, 1)
	p := newPair(t, policy)
	p.start(t, map[string]string{"LEDGER_FILE": p.host.Path("ledger", "ledger.db")})
	out := p.run(t, agent.SubmitOptions{Op: "ledger"})
	if out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("status %s: %s", out.Receipt.Status, out.Receipt.Detail)
	}
	// The last record of this id the op could see must be "running".
	var last string
	for _, line := range strings.Split(string(out.Stdout), "\n") {
		if strings.Contains(line, out.Receipt.ID) && strings.Contains(line, `"state"`) {
			last = line
		}
	}
	if !strings.Contains(last, `"state":"running"`) {
		t.Fatalf("while the op ran, the ledger's last record of it was not running: %q", last)
	}
	// Every finished entry has its result in the folder and a private copy.
	testkit.WaitFor(t, 5*time.Second, "the ledger to record done", func() bool { return p.entry(t, out.Receipt.ID).State == ledger.StateDone })
	e := p.entry(t, out.Receipt.ID)
	res, err := os.ReadFile(filepath.Join(p.toAgent(), e.ID+".result"))
	if err != nil || bridge.SHA256Hex(res) != e.ResultSHA256 {
		t.Fatalf("done entry without its published result: %v", err)
	}
}

// Invariant 4: an id runs at most once, whatever the file name: redelivery,
// resurrection after the agent removed its files, conflict copies, a lost
// result, and the same id with other content.
func TestInvariant4IDRunsAtMostOnce(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	id, manifest, payload := p.sealManual(t, "count", nil, nil)
	dir := p.toHost()
	os.WriteFile(filepath.Join(dir, id+".payload"), payload, 0o644)
	os.WriteFile(filepath.Join(dir, id+".manifest"), manifest, 0o644)
	out := p.wait(t, id)
	if err := p.client.Ack(out); err != nil { // removes manifest and payload
		t.Fatal(err)
	}
	// Resurrection: the sync client brings both files back.
	os.WriteFile(filepath.Join(dir, id+".payload"), payload, 0o644)
	os.WriteFile(filepath.Join(dir, id+".manifest"), manifest, 0o644)
	// Conflict copies in several clients' styles.
	for _, name := range []string{
		id + ".sync-conflict-20260101-120000-ABCDEFG.manifest",
		id + " (laptop's conflicted copy 2026-01-01).manifest",
		id + "-laptop.manifest",
		id + ".manifest..path1",
	} {
		os.WriteFile(filepath.Join(dir, name), manifest, 0o644)
	}
	settleRescans(t, p.daemon)
	// A lost result is re-published, not re-run.
	os.Remove(filepath.Join(p.toAgent(), id+".result"))
	os.Remove(filepath.Join(p.toAgent(), id+".output"))
	testkit.WaitFor(t, 5*time.Second, "the lost result to be re-published", func() bool {
		_, err := os.Stat(filepath.Join(p.toAgent(), id+".result"))
		return err == nil
	})
	// The same id with other content (a forgery or a bug) is refused.
	_, other, otherPayload := p.sealManual(t, "count", nil, func(n *bridge.NewRequest) { n.ID = id; n.Created = n.Created.Add(-time.Second) })
	os.Remove(filepath.Join(dir, id+".manifest"))
	os.Remove(filepath.Join(dir, id+".payload"))
	os.WriteFile(filepath.Join(dir, id+".payload"), otherPayload, 0o644)
	os.WriteFile(filepath.Join(dir, id+".manifest"), other, 0o644)
	settleRescans(t, p.daemon)
	if n := testkit.Count(t, countFile, "run"); n != 1 {
		t.Fatalf("the op ran %d times", n)
	}
	if e := p.entry(t, id); e.State != ledger.StateDone || e.Runs != 1 {
		t.Fatalf("ledger: %s, runs %d", e.State, e.Runs)
	}
	audit, _ := os.ReadFile(p.host.Path("audit.log"))
	if !strings.Contains(string(audit), `"reason":"replay"`) {
		t.Fatalf("the same id with other content was not refused as a replay:\n%s", audit)
	}
	if !strings.Contains(string(audit), `"event":"republished"`) {
		t.Fatalf("the lost result was not re-published:\n%s", audit)
	}
}

// Invariant 6: watch events are hints; the listing is the truth. Requests
// that were there before the daemon started are found by its first scan,
// and evaluating one id many times at once runs it once.
func TestInvariant6ListingIsTheTruth(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	var ids []string
	for i := 0; i < 5; i++ {
		s, err := p.client.Submit(agent.SubmitOptions{Op: "count"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	for _, id := range ids {
		p.wait(t, id)
	}
	// Hammer one new id with evaluations asked for at once, every way the
	// daemon has: the queue (which folds repeats), and what a worker, a
	// sweep or an operator's decision does, taking the request's key first
	// (one of them works on it at a time; the others pass).
	id, manifest, payload := p.sealManual(t, "count", nil, nil)
	os.WriteFile(filepath.Join(p.toHost(), id+".payload"), payload, 0o644)
	os.WriteFile(filepath.Join(p.toHost(), id+".manifest"), manifest, 0o644)
	key := p.agent.Config.ID + "/" + id
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(2)
		go func() { defer wg.Done(); p.daemon.sched.schedule(p.agent.Config.ID, id) }()
		go func() {
			defer wg.Done()
			if p.daemon.sched.take(key) && !p.daemon.evaluate(p.agent.Config.ID, id) {
				p.daemon.sched.release(key)
			}
		}()
	}
	wg.Wait()
	p.wait(t, id)
	settleRescans(t, p.daemon)
	if n := testkit.Count(t, countFile, "run"); n != 6 {
		t.Fatalf("6 requests ran %d times", n)
	}
}

// Invariant 8: no shell, no inherited secrets. The child sees only the
// variables the policy names; an argument is one argv element, never
// interpreted.
//
// Not in parallel: t.Setenv changes the environment of every test of the
// process.
func TestInvariant8NoShellNoInheritedSecrets(t *testing.T) {
	policy := testPolicy + `
[ops.lit]
argv = ["printf", "%s", "{v}"]
env = ["PATH"]
[ops.lit.args.v]
type = "string"
pattern = "[ -~]{1,64}"
`
	policy = strings.Replace(policy, `ops = ["echo", "count", "slow", "slowidem", "env"]`, `ops = ["echo", "count", "slow", "slowidem", "env", "lit"]`, 1)
	p := newPair(t, policy)
	t.Setenv("BRIDGE_TEST_SECRET", "hunter2")
	p.start(t, map[string]string{"AWS_SECRET_ACCESS_KEY": "shh"})
	out := p.run(t, agent.SubmitOptions{Op: "env"})
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(out.Stdout)), "\n") {
		k, _, _ := strings.Cut(l, "=")
		names = append(names, k)
	}
	// PATH is what the policy names; the two BRIDGE_ variables carry the
	// request id, which the daemon always supplies (SPEC §7.2).
	if strings.Join(names, " ") != "PATH BRIDGE_REQUEST_ID BRIDGE_IDEMPOTENCY_KEY" {
		t.Fatalf("the op saw these variables: %v (want only PATH and the request id)", names)
	}
	for _, v := range []string{"$(id)", "`id`", "a; rm -rf /", "$HOME", "*"} {
		out := p.run(t, agent.SubmitOptions{Op: "lit", Args: map[string]string{"v": v}})
		if string(out.Stdout) != v {
			t.Fatalf("argument %q came out as %q", v, out.Stdout)
		}
	}
}

// hostileFiles drops one file of each hostile kind into the agent's tree and
// returns the request ids whose refusal must be audited.
func hostileFiles(t *testing.T, p *pair) []string {
	t.Helper()
	dir := p.toHost()
	var audited []string
	put := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	newID := func() string { return bridge.NewRequestID() }
	// Garbage where a manifest belongs.
	g := newID()
	put(g+".manifest", []byte("this is not a manifest, just some text that arrived\n"))
	audited = append(audited, g)
	// A truncated manifest (pending arrival, never an error) and a flipped signature.
	id, m, pl := p.sealManual(t, "count", nil, nil)
	put(id+".manifest", m[:len(m)-20])
	put(id+".payload", pl)
	audited = append(audited, id)
	id2, m2, pl2 := p.sealManual(t, "count", nil, nil)
	bad := bytes.Clone(m2)
	bad[len(bad)-1] ^= 1
	put(id2+".manifest", bad)
	put(id2+".payload", pl2)
	audited = append(audited, id2)
	// A symlink to a valid manifest, and a FIFO.
	id3, m3, pl3 := p.sealManual(t, "count", nil, nil)
	outside := filepath.Join(t.TempDir(), "m")
	os.WriteFile(outside, m3, 0o644)
	put(id3+".payload", pl3)
	if err := os.Symlink(outside, filepath.Join(dir, id3+".manifest")); err != nil {
		t.Fatal(err)
	}
	audited = append(audited, id3)
	id4 := newID()
	if err := syscall.Mkfifo(filepath.Join(dir, id4+".manifest"), 0o644); err != nil {
		t.Fatal(err)
	}
	audited = append(audited, id4)
	// A directory where a manifest belongs.
	id5 := newID()
	os.Mkdir(filepath.Join(dir, id5+".manifest"), 0o755)
	audited = append(audited, id5)
	// A 2 GiB sparse manifest and a 2 GiB sparse payload under a valid manifest.
	id6 := newID()
	f, _ := os.Create(filepath.Join(dir, id6+".manifest"))
	f.Truncate(2 << 30)
	f.Close()
	audited = append(audited, id6)
	id7, m7, _ := p.sealManual(t, "count", nil, nil)
	f, _ = os.Create(filepath.Join(dir, id7+".payload"))
	f.Truncate(2 << 30)
	f.Close()
	put(id7+".manifest", m7)
	audited = append(audited, id7)
	// A valid request addressed to another host.
	other, _ := bcrypto.GenerateIdentity(nil)
	ob, _ := other.SignBundle(bcrypto.Bundle{Role: "host", Name: "other", ID: other.SignKid()})
	otherBundle, _ := bcrypto.ParseBundle(ob)
	id8, m8, pl8 := p.sealManual(t, "count", nil, func(n *bridge.NewRequest) { n.Host = otherBundle })
	put(id8+".payload", pl8)
	put(id8+".manifest", m8)
	audited = append(audited, id8)
	// Conflict copies of a valid manifest, and sync-client litter.
	id9, m9, _ := p.sealManual(t, "count", nil, nil)
	put(id9+".sync-conflict-20260101-120000-ABCDEFG.manifest", m9)
	put(id9+" (conflicted copy 2026-01-01 120000).manifest", m9)
	put(".syncthing."+id9+".manifest.tmp", m9)
	put("~$"+id9+".manifest.tmp", m9)
	put(".DS_Store", []byte{0, 0, 0, 1})
	put("desktop.ini", []byte("[.ShellClassInfo]"))
	// A manifest whose file name is not its signed id.
	id10, m10, pl10 := p.sealManual(t, "count", nil, nil)
	wrong := newID()
	put(wrong+".manifest", m10)
	put(wrong+".payload", pl10)
	_ = id10
	audited = append(audited, wrong)
	return audited
}

// Invariant 7: nothing from the folder is trusted before verification.
// Each hostile file is refused with a reason in the audit log; nothing runs.
func TestInvariant7NothingTrustedBeforeVerification(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	audited := hostileFiles(t, p)
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	settleRescans(t, p.daemon)
	audit, _ := os.ReadFile(p.host.Path("audit.log"))
	for _, id := range audited {
		found := false
		for _, line := range strings.Split(string(audit), "\n") {
			// Refused for good, or (a truncated manifest, a payload of
			// the wrong size) waiting with its reason until the host's
			// pending timeout turns it into a signed rejection.
			if strings.Contains(line, id) && (strings.Contains(line, `"event":"refused"`) || strings.Contains(line, `"event":"waiting"`)) && strings.Contains(line, `"reason":`) {
				found = true
			}
		}
		if !found {
			t.Errorf("no refusal with a reason in the audit log for %s", id)
		}
	}
	if n := testkit.Count(t, countFile, "run"); n != 0 {
		t.Fatalf("a hostile file ran %d times", n)
	}
	if t.Failed() {
		t.Logf("audit log:\n%s", audit)
	}
}

// Invariant 9: bad input never stops the queue. With every kind of hostile
// file present, a valid request still runs, and so does one after each.
func TestInvariant9BadInputNeverStopsTheQueue(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	hostileFiles(t, p)
	for i := 0; i < 3; i++ {
		out := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "still here"}})
		if out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != "still here\n" {
			t.Fatalf("valid request %d after hostile files: %s %q", i, out.Receipt.Status, out.Stdout)
		}
		hostileFiles(t, p)
	}
	if n := testkit.Count(t, countFile, "run"); n != 0 {
		t.Fatalf("a hostile file ran %d times", n)
	}
}

// Invariant 10: polling is a pure read. Status, Wait, Result, List and Ops
// change nothing in the folder.
func TestInvariant10PollingIsPureRead(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	pendingID, _, _ := p.sealManual(t, "echo", map[string]string{"msg": "never sent"}, nil)
	p.start(t, nil)
	p.wait(t, s.ID)
	settleRescans(t, p.daemon)
	before := snapshot(t, p.folder)
	for i := 0; i < 3; i++ {
		for _, id := range []string{s.ID, pendingID} {
			p.client.Status(id)
			p.client.Result(id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		p.client.Wait(ctx, pendingID, nil)
		cancel()
		p.client.Wait(context.Background(), s.ID, nil)
		p.client.List()
		p.client.Ops("")
		p.client.Inbox()
	}
	sameTree(t, "polling", before, snapshot(t, p.folder))
}

// A payload that never arrives complete ends, after the host's pending
// timeout, as a signed rejection the agent can read, not as silence.
func TestPendingTimeoutRejectsIncomplete(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	id, manifest, payload := p.sealManual(t, "count", nil, nil)
	os.WriteFile(filepath.Join(p.toHost(), id+".manifest"), manifest, 0o644)
	os.WriteFile(filepath.Join(p.toHost(), id+".payload"), payload[:len(payload)/2], 0o644)
	runDaemon(t, p.host, DaemonOptions{Rescan: 200 * time.Millisecond, PendingTimeout: 500 * time.Millisecond})
	out := p.wait(t, id)
	if out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "incomplete" {
		t.Fatalf("status %s reason %s", out.Receipt.Status, out.Receipt.Reason)
	}
}
