package host

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/trust"
)

func TestEndToEndEcho(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	out := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	if out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != "hi\n" || out.Receipt.ExitCode != 0 {
		t.Fatalf("status %s reason %s stdout %q exit %d detail %s", out.Receipt.Status, out.Receipt.Reason, out.Stdout, out.Receipt.ExitCode, out.Receipt.Detail)
	}
	out = p.run(t, agent.SubmitOptions{Op: "secret"})
	if out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "not-allowed" {
		t.Fatalf("disallowed op: status %s reason %s", out.Receipt.Status, out.Receipt.Reason)
	}
}

// A folder writer without keys puts junk where a result will go: the host
// replaces what it did not sign, and the agent keeps waiting for the real
// result instead of giving up on the junk.
func TestResultSquatIsReplaced(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	id, manifest, payload := p.sealManual(t, "echo", map[string]string{"msg": "mine"}, nil)
	os.WriteFile(filepath.Join(p.toAgent(), id+".result"), []byte("BRR1junk"), 0o644)
	os.WriteFile(filepath.Join(p.toAgent(), id+".output"), []byte("junk"), 0o644)
	os.WriteFile(filepath.Join(p.toHost(), id+".payload"), payload, 0o644)
	os.WriteFile(filepath.Join(p.toHost(), id+".manifest"), manifest, 0o644)
	p.start(t, nil)
	out := p.wait(t, id)
	if out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != "mine\n" {
		t.Fatalf("status %s stdout %q", out.Receipt.Status, out.Stdout)
	}
	// And a squat after publication is repaired on the next rescan.
	os.WriteFile(filepath.Join(p.toAgent(), id+".result"), []byte("BRR1junk again"), 0o644)
	testkit.WaitFor(t, 5*time.Second, "the result to be repaired", func() bool {
		out, err := p.client.Result(id)
		return err == nil && string(out.Stdout) == "mine\n"
	})
}

// A lost output (the manifest still there) is re-published, not left for
// the agent to wait on forever (found by the sync simulator: rclone 1.60
// conflict handling renames a file away on both sides).
func TestLostOutputIsRepublished(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "again"}})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(t, s.ID)
	settleRescans(t, p.daemon)
	os.Remove(filepath.Join(p.toAgent(), s.ID+".output"))
	testkit.WaitFor(t, 5*time.Second, "the output to be re-published", func() bool {
		out, err := p.client.Result(s.ID)
		return err == nil && string(out.Stdout) == "again\n"
	})
}

// An op's stdin arrives whole both ways the host spools it: in memory for a
// small payload, in a file of the home's spool/ for a large one, which is
// gone afterwards.
func TestStdinSpools(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy+`
[ops.cat]
argv = ["cat"]
max_output = "4MiB"
max_stdin = "4MiB"
`)
	policy, _ := os.ReadFile(p.host.Path(trust.PolicyName))
	policy = bytes.Replace(policy, []byte(`ops = ["echo", "count"`), []byte(`ops = ["cat", "echo", "count"`), 1)
	if err := os.WriteFile(p.host.Path(trust.PolicyName), policy, 0o600); err != nil {
		t.Fatal(err)
	}
	p.start(t, nil)
	for _, n := range []int{0, 10 << 10, memSpoolMax, memSpoolMax + 1, 3 << 20} {
		in := make([]byte, n)
		rand.Read(in)
		out := p.run(t, agent.SubmitOptions{Op: "cat", Stdin: bytes.NewReader(in)})
		if out.Receipt.Status != bridge.StatusDone || !bytes.Equal(out.Stdout, in) {
			t.Fatalf("%d bytes: status %s (%s), %d bytes back, equal %v", n, out.Receipt.Status, out.Receipt.Detail, len(out.Stdout), bytes.Equal(out.Stdout, in))
		}
	}
	p.stop(t) // a run's input goes as its goroutine ends, after the answer
	left, err := os.ReadDir(p.host.Path("spool"))
	if err != nil || len(left) != 0 {
		t.Fatalf("spool/ after the runs and the stop: %v, %v", left, err)
	}
}

// The finished-requests cache survives a restart, and a result lost while
// the daemon was down is still re-published: the cache skips verification
// only while the result files are as they were recorded. A damaged cache is
// ignored.
func TestFinishedCacheAcrossRestart(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	var ids []string
	for _, msg := range []string{"one", "two"} {
		s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": msg}})
		if err != nil {
			t.Fatal(err)
		}
		p.wait(t, s.ID)
		ids = append(ids, s.ID)
	}
	settleRescans(t, p.daemon)
	p.stop(t)
	cache, err := os.ReadFile(p.host.Path(finishedName))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !bytes.Contains(cache, []byte("/"+id+" ")) {
			t.Fatalf("cache lacks %s:\n%s", id, cache)
		}
	}
	os.Remove(filepath.Join(p.toAgent(), ids[0]+".result"))
	os.Remove(filepath.Join(p.toAgent(), ids[0]+".output"))
	p.start(t, nil)
	if got := p.finishedCount(); got < 1 {
		t.Fatalf("the restarted daemon loaded %d finished entries", got)
	}
	testkit.WaitFor(t, 5*time.Second, "the lost result to be re-published", func() bool {
		out, err := p.client.Result(ids[0])
		return err == nil && string(out.Stdout) == "one\n"
	})
	p.stop(t)

	if err := os.WriteFile(p.host.Path(finishedName), []byte(finishedHeader+"\nnot a line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true}); err != nil {
		t.Fatal(err)
	} else if d.fin.load(); len(d.fin.done.m) != 0 {
		t.Fatalf("a damaged cache gave %d entries", len(d.fin.done.m))
	}
	os.Remove(filepath.Join(p.toAgent(), ids[1]+".result"))
	p.start(t, nil)
	testkit.WaitFor(t, 5*time.Second, "the lost result to be re-published", func() bool {
		out, err := p.client.Result(ids[1])
		return err == nil && string(out.Stdout) == "two\n"
	})
}

func (p *pair) finishedCount() int {
	p.daemon.fin.mu.Lock()
	defer p.daemon.fin.mu.Unlock()
	return len(p.daemon.fin.done.m)
}

// A keyed retry re-delivers the very manifest first sent when the folder
// lost it, from the agent's one private record of the request.
func TestKeyedRetryRedeliversManifest(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	first, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "k"}, Key: "retry"})
	if err != nil {
		t.Fatal(err)
	}
	mpath := filepath.Join(p.toHost(), first.ID+".manifest")
	sent, err := os.ReadFile(mpath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.agent.Path("requests", first.ID+".manifest")); err == nil {
		t.Fatal("a second private file for the manifest was written")
	}
	os.Remove(mpath)
	again, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "k"}, Key: "retry"})
	if err != nil || again.ID != first.ID {
		t.Fatalf("keyed retry: %v, id %s vs %s", err, again.ID, first.ID)
	}
	if back, err := os.ReadFile(mpath); err != nil || !bytes.Equal(back, sent) {
		t.Fatalf("re-delivered manifest: equal %v, %v", bytes.Equal(back, sent), err)
	}
	p.start(t, nil)
	if out := p.wait(t, first.ID); out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != "k\n" {
		t.Fatalf("after re-delivery: %s %q", out.Receipt.Status, out.Stdout)
	}
}

// The publish temporaries a crash left among an agent's results are swept
// once the start-up scan is done, and one written since the start (a
// publish under way) is not; in the home's staging directory, an old one
// goes at the start and one another command is staging stays.
func TestCrashTemporariesSweptAfterTheStart(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	// In the home's staging directory, shared with the host's other
	// commands: an old one goes at Open, one being staged stays.
	must(t, os.MkdirAll(p.host.Path("staging"), 0o700))
	stagedOld := p.host.Path("staging", "~$"+strings.Repeat("c", 32)+".result.0011223344556677.tmp")
	stagedNow := p.host.Path("staging", "~$"+strings.Repeat("d", 32)+".result.8899aabbccddeeff.tmp")
	must(t, os.WriteFile(stagedOld, []byte("torn"), 0o600))
	must(t, os.WriteFile(stagedNow, []byte("being staged"), 0o600))
	left := filepath.Join(p.toAgent(), "~$"+strings.Repeat("a", 32)+".result.tmp")
	fresh := filepath.Join(p.toAgent(), "~$"+strings.Repeat("b", 32)+".result.tmp")
	must(t, os.MkdirAll(p.toAgent(), 0o755))
	must(t, os.WriteFile(left, []byte("torn"), 0o600))
	old := time.Now().Add(-2 * time.Hour)
	must(t, os.Chtimes(left, old, old))
	must(t, os.Chtimes(stagedOld, old, old))
	d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true, Rescan: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d.probe.Opened = func() { must(t, os.WriteFile(fresh, []byte("being written"), 0o600)) }
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	serveOpened(t, d)
	testkit.WaitFor(t, 20*time.Second, "the sweep after the start-up scan", func() bool { return d.probe.N(probe.TempSweeps) >= 1 })
	if _, err := os.Lstat(left); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a crash's temporary is still there: %v", err)
	}
	if _, err := os.Lstat(fresh); err != nil {
		t.Errorf("a temporary written since the start was swept: %v", err)
	}
	if _, err := os.Lstat(stagedOld); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an old staged temporary is still there: %v", err)
	}
	if _, err := os.Lstat(stagedNow); err != nil {
		t.Errorf("a file another command is staging was swept at the start: %v", err)
	}
}
