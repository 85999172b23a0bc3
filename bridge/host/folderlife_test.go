package host

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/doctor"
	"github.com/syncbridge/bridge/bridge/trust"
)

// The daemon's life on a folder someone else controls (issue 13): no folder
// state ends `serve`, and what it watches and creates is the layout's own.

// alive fails the test if the daemon's Run returned.
func (p *pair) alive(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.done:
		p.cancel = nil
		t.Fatalf("serve ended by itself: %v", err)
	default:
	}
}

func (p *pair) echo(t *testing.T, msg string) {
	t.Helper()
	out := p.run(t, agent.SubmitOptions{Host: "laptop", Op: "echo", Args: map[string]string{"msg": msg}})
	if out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != msg+"\n" {
		t.Fatalf("echo %s: %s %q", msg, out.Receipt.Status, out.Stdout)
	}
}

// TestServeFollowsReplacedRequestsDir: a sync client applies a remote
// rename of to-host as a rename away and a copy back, or deletes it and
// brings it back. The daemon must notice, say so, and go on serving.
func TestServeFollowsReplacedRequestsDir(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	var logs testkit.LockedBuffer
	p.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p.start(t, nil)
	p.echo(t, "before")
	root := filepath.Join(p.folder, bridge.ToHostRoot(p.host.Config.ID))

	// Moved away and copied back.
	gone := func() int { return strings.Count(logs.String(), "cannot watch the requests directory") }
	must(t, os.Rename(root, root+".away"))
	testkit.WaitFor(t, 20*time.Second, "the daemon to see the directory gone", func() bool { return gone() == 1 })
	if out, err := exec.Command("cp", "-a", root+".away", root).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	must(t, os.RemoveAll(root+".away"))
	p.echo(t, "after a rename")
	p.alive(t)

	// Deleted, past several rescans, and made again.
	must(t, os.RemoveAll(root))
	testkit.WaitFor(t, 20*time.Second, "the daemon to see the directory gone again", func() bool { return gone() == 2 })
	// Past three more looks for it, each counted in the debug log.
	looks := func() int { return strings.Count(logs.String(), "the requests directory is still not watchable") }
	n := looks()
	testkit.WaitFor(t, time.Minute, "three more looks for the directory", func() bool { return looks() >= n+3 })
	p.alive(t)
	must(t, os.MkdirAll(root, 0o755))
	p.echo(t, "after a delete")
	p.alive(t)
	// Each time it went, said once; each time it came back, too.
	back := strings.Count(logs.String(), "the requests directory is back")
	if n := gone(); n != 2 || back != 2 {
		t.Errorf("gone reported %d times and back %d times, want 2 and 2:\n%s", n, back, logs.String())
	}
}

// TestServeWatchesOnlyLayoutDirs: junk directories in a trusted agent's
// directory and at the top of to-host cost no kernel watch.
//
// Not in parallel: it counts the inotify watches of the whole process.
func TestServeWatchesOnlyLayoutDirs(t *testing.T) {
	p := newPair(t, testPolicy)
	p.start(t, nil)
	p.echo(t, "warm")
	base := inotifyWatches(t)
	for i := range 200 {
		must(t, os.MkdirAll(filepath.Join(p.toHost(), "junk", string(rune('a'+i%26))+string(rune('a'+i/26)), "deeper"), 0o755))
		must(t, os.MkdirAll(filepath.Join(filepath.Dir(p.toHost()), "nobody"+string(rune('a'+i%26))+string(rune('a'+i/26))), 0o755))
	}
	settleRescans(t, p.daemon) // a few rescans
	p.echo(t, "after")
	if got := inotifyWatches(t) - base; got > 0 {
		t.Errorf("400 junk directories cost %d more kernel watches", got)
	}
}

// TestServeNeverFollowsPlantedLink: hosts/<host> replaced by a link before
// `serve` starts must not make the daemon create or watch anything where
// the link points.
//
// Not in parallel: it counts the inotify watches of the whole process.
func TestServeNeverFollowsPlantedLink(t *testing.T) {
	p := newPair(t, testPolicy)
	outside := t.TempDir()
	hostDir := filepath.Join(p.folder, "hosts", p.host.Config.ID)
	must(t, os.RemoveAll(hostDir))
	must(t, os.MkdirAll(filepath.Dir(hostDir), 0o755))
	must(t, os.Symlink(outside, hostDir))
	before := inotifyWatches(t)
	p.start(t, nil)
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the daemon created %d entries where the planted link points", len(ents))
	}
	if fi, err := os.Lstat(hostDir); err != nil || !fi.IsDir() {
		t.Fatalf("hosts/<host> is not a directory of the folder: %v %v", fi, err)
	}
	// The daemon also watches its home (the control loop's hints), which
	// is not in the folder.
	home := []string{p.host.Dir, p.host.Path(trust.PeersDir), p.host.Path("control")}
	if got := inotifyWatches(t) - before - inotifyWatchesOn(t, home...); got > 2 {
		t.Errorf("%d kernel watches in the folder, want only the requests directory's and its parent's", got)
	}
	p.echo(t, "served")
}

// TestServeStartsBesideALinkAtHosts: a link at hosts/ (everyone's, which
// the daemon never clears) when `serve` starts must neither stop it nor be
// followed: it says it waits for its requests directory, and serves once a
// directory is there.
func TestServeStartsBesideALinkAtHosts(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	var logs testkit.LockedBuffer
	p.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	outside := t.TempDir()
	hosts := filepath.Join(p.folder, "hosts")
	must(t, os.Rename(hosts, hosts+".away"))
	must(t, os.Symlink(outside, hosts))
	p.start(t, nil)
	for _, line := range []string{"cannot make the requests directory", "cannot watch the requests directory"} {
		testkit.WaitFor(t, 20*time.Second, "the log line "+line, func() bool { return strings.Contains(logs.String(), line) })
	}
	// Past two more looks for it, each counted in the debug log.
	looks := func() int { return strings.Count(logs.String(), "the requests directory is still not watchable") }
	n := looks()
	testkit.WaitFor(t, time.Minute, "two more looks for the directory", func() bool { return looks() >= n+2 })
	p.alive(t)
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the daemon created %d entries where the planted link points", len(ents))
	}
	must(t, os.Remove(hosts))
	must(t, os.Rename(hosts+".away", hosts))
	p.echo(t, "served")
	p.alive(t)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// inotifyWatches counts the kernel watches this process holds.
func inotifyWatches(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	n := 0
	for _, fd := range fds {
		b, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", fd.Name()))
		if err == nil {
			n += bytes.Count(b, []byte("inotify wd:"))
		}
	}
	return n
}

// inotifyWatchesOn counts this process's inotify watches on the given
// directories (by inode).
func inotifyWatchesOn(t *testing.T, dirs ...string) int {
	t.Helper()
	inos := map[string]bool{}
	for _, d := range dirs {
		var st syscall.Stat_t
		if syscall.Stat(d, &st) == nil {
			inos[fmt.Sprintf("ino:%x ", st.Ino)] = true
		}
	}
	fds, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	n := 0
	for _, fd := range fds {
		b, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", fd.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "inotify wd:") {
				continue
			}
			for ino := range inos {
				if strings.Contains(line, ino) {
					n++
				}
			}
		}
	}
	return n
}

// TestUntrustedAgentSaidOnce: requests from an agent the host does not
// trust are never read, and the log says so once, not never and not at
// every rescan.
func TestUntrustedAgentSaidOnce(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	var logs testkit.LockedBuffer
	p.log = slog.New(slog.NewTextHandler(&logs, nil))
	stranger := bridge.NewRequestID() // an id-shaped name nobody paired
	dir := filepath.Join(filepath.Dir(p.toHost()), stranger)
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, bridge.NewRequestID()+"."+bridge.ExtManifest), []byte("x"), 0o644))
	p.start(t, nil)
	settleRescans(t, p.daemon) // several rescans
	p.echo(t, "still serving")
	if n := bytes.Count([]byte(logs.String()), []byte("agent="+stranger)); n != 1 {
		t.Errorf("the untrusted agent was mentioned %d times, want once:\n%s", n, logs.String())
	}
}

// plantJunk writes n manifests of random bytes at request names of the
// trusted agent's directory, as a folder writer without keys can, last
// changed an hour ago (a fresh file is marked refused only once it has
// settled, refused.go).
func (p *pair) plantJunk(t *testing.T, n int, payloads bool) []string {
	return p.plantJunkAt(t, n, payloads, time.Now().Add(-time.Hour))
}

// budget returns a change of the daemon's line budget to lines an hour.
func budget(lines int) func(*limits) { return func(l *limits) { l.budgetLines = lines } }

// plantJunkAt is plantJunk with the files' modification time.
func (p *pair) plantJunkAt(t *testing.T, n int, payloads bool, old time.Time) []string {
	t.Helper()
	var names []string
	for range n {
		id := bridge.NewRequestID()
		name := id + "." + bridge.ExtManifest
		files := []string{name}
		if payloads {
			files = append(files, id+"."+bridge.ExtPayload)
		}
		for _, f := range files {
			path := filepath.Join(p.toHost(), f)
			must(t, os.WriteFile(path, []byte(bridge.NewRequestID()+bridge.NewRequestID()+bridge.NewRequestID()), 0o644))
			must(t, os.Chtimes(path, old, old))
		}
		names = append(names, name)
	}
	return names
}

func (p *pair) auditCount(t *testing.T, event string) int {
	t.Helper()
	evs, err := ReadAudit(p.host, 0)
	must(t, err)
	n := 0
	for _, e := range evs {
		if e.Event == event {
			n++
		}
	}
	return n
}

// TestRefusedFileReadOnce: a refused manifest costs nothing until it
// changes: no rescan reads it or logs it again, even when the log-once set
// is far smaller than the junk (it forgets), and a changed one is looked
// at again.
func TestRefusedFileReadOnce(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.limit(noSettle)
	p.limit(func(l *limits) { l.noted = 50 })
	names := p.plantJunk(t, 300, false)
	p.start(t, nil)
	p.echo(t, "first")
	settleRescans(t, p.daemon) // three rescans
	p.echo(t, "second")
	if n := p.auditCount(t, "refused"); n != 300 {
		t.Fatalf("300 junk manifests made %d refused lines over several rescans, want 300", n)
	}
	must(t, os.WriteFile(filepath.Join(p.toHost(), names[0]), []byte("changed, and still junk"), 0o644))
	settleRescans(t, p.daemon)
	if n := p.auditCount(t, "refused"); n != 301 {
		t.Errorf("a changed junk manifest: %d refused lines, want 301", n)
	}
}

// TestFolderLinesBounded: however much junk the folder holds, the lines it
// makes the daemon write are bounded per agent directory and hour.
func TestFolderLinesBounded(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.limit(budget(100))
	p.plantJunk(t, 400, false)
	p.start(t, nil)
	settleRescans(t, p.daemon)
	p.echo(t, "served")
	if n := p.auditCount(t, "refused"); n > 100 {
		t.Errorf("400 junk manifests made %d refused lines, want at most the budget of 100", n)
	}
}

// TestLineBudget: the budget refills steadily and says what it left out.
func TestLineBudget(t *testing.T) {
	t.Parallel()
	var b lineBudget
	lines, every := defaultLimits.budgetLines, defaultLimits.budgetEvery
	take := func(dir string, now time.Time) (bool, int) { return b.take(dir, now, lines, every) }
	now := time.Unix(1_700_000_000, 0)
	for i := range lines {
		if ok, _ := take("a", now); !ok {
			t.Fatalf("line %d refused within the budget", i)
		}
	}
	for range 5 {
		if ok, _ := take("a", now); ok {
			t.Fatal("a line over the budget was allowed")
		}
	}
	if ok, _ := take("b", now); !ok {
		t.Error("another directory's budget was spent by the first")
	}
	later := now.Add(every / time.Duration(lines))
	if ok, left := take("a", later); !ok || left != 5 {
		t.Errorf("after a refill: ok=%v left out=%d, want true and 5", ok, left)
	}
}

// TestDoctorShowsUntrustedAgents: doctor names the directories of agents
// the host does not trust, whose requests are never read.
func TestDoctorShowsUntrustedAgents(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	stranger := bridge.NewRequestID()
	dir := filepath.Join(filepath.Dir(p.toHost()), stranger)
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, bridge.NewRequestID()+"."+bridge.ExtManifest), []byte("x"), 0o644))
	var found bool
	for _, f := range Doctor(p.host, doctor.Options{}) {
		if f.Check == "untrusted-agents" {
			found = strings.Contains(f.Message, stranger) && strings.Contains(f.Message, "1 file")
		}
		if f.Check == "untrusted-agents" && strings.Contains(f.Message, p.agent.Config.ID) {
			t.Errorf("the trusted agent listed: %s", f.Message)
		}
	}
	if !found {
		t.Error("doctor does not name the untrusted agent's directory")
	}
}

// TestDoctorShowsLinkedRequestsDir: a link planted at hosts/<host> (the
// daemon clears it at its start) is named by doctor meanwhile.
func TestDoctorShowsLinkedRequestsDir(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	hostDir := filepath.Join(p.folder, "hosts", p.host.Config.ID)
	must(t, os.RemoveAll(hostDir))
	must(t, os.Symlink(t.TempDir(), hostDir))
	for _, f := range Doctor(p.host, doctor.Options{}) {
		if f.Check == "folder" && strings.Contains(f.Message, "link") {
			return
		}
	}
	t.Error("doctor does not say the requests directory is behind a link")
}

// TestRefusedManifestNotReadForItsPayload: a payload beside a refused
// manifest must not have the manifest read again at every rescan (a red
// team measured 2 GiB read every 30 s from 50,000 such pairs).
func TestRefusedManifestNotReadForItsPayload(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.limit(noSettle)
	p.plantJunk(t, 50, true)
	p.start(t, nil)
	p.echo(t, "first")
	before := p.daemon.probe.N(probe.ManifestReads)
	settleRescans(t, p.daemon) // three rescans
	p.echo(t, "second")
	if n := p.daemon.probe.N(probe.ManifestReads) - before; n > 5 {
		t.Errorf("%d manifest reads over three rescans beside 50 refused manifests with payloads, want about 1 (the echo's)", n)
	}
}

// TestUntrustedNamesShareOneBudget: id-shaped directories a folder writer
// makes at the top of to-host share one line budget, not one each.
func TestUntrustedNamesShareOneBudget(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.limit(budget(50))
	top := filepath.Dir(p.toHost())
	for range 200 {
		must(t, os.Mkdir(filepath.Join(top, bridge.NewRequestID()), 0o755))
	}
	var logs testkit.LockedBuffer
	p.log = slog.New(slog.NewTextHandler(&logs, nil))
	p.start(t, nil)
	settleRescans(t, p.daemon)
	if n := bytes.Count([]byte(logs.String()), []byte("does not trust")); n > 50 {
		t.Errorf("200 untrusted directories made %d lines, want at most the budget of 50", n)
	}
}

// TestRequestsDirFlapsWithinBudget: moving to-host away and back again and
// again makes no more lines than the budget allows.
func TestRequestsDirFlapsWithinBudget(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.limit(budget(10))
	var logs testkit.LockedBuffer
	p.log = slog.New(slog.NewTextHandler(&logs, nil))
	p.start(t, nil)
	root := filepath.Join(p.folder, bridge.ToHostRoot(p.host.Config.ID))
	for range 40 {
		must(t, os.Rename(root, root+".x"))
		time.Sleep(20 * time.Millisecond)
		must(t, os.Rename(root+".x", root))
		time.Sleep(30 * time.Millisecond)
	}
	p.echo(t, "still serving")
	text := logs.String()
	n := bytes.Count([]byte(text), []byte("requests directory"))
	if n > 10 {
		t.Errorf("40 flaps made %d lines about the requests directory, want at most the budget of 10", n)
	}
	if n := p.auditCount(t, "folder"); n > 10 {
		t.Errorf("40 flaps made %d audit lines, want at most 10", n)
	}
}

// TestRefusedFutureMtimeReadOnce: junk with a modification time in the
// future (a folder writer sets it; sync clients copy it) is remembered like
// any other: a red team had 20,000 such files read again at every rescan.
func TestRefusedFutureMtimeReadOnce(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.limit(noSettle)
	p.plantJunkAt(t, 50, false, time.Now().Add(365*24*time.Hour))
	p.start(t, nil)
	p.echo(t, "first")
	before := p.daemon.probe.N(probe.ManifestReads)
	settleRescans(t, p.daemon)
	p.echo(t, "second")
	if n := p.daemon.probe.N(probe.ManifestReads) - before; n > 5 {
		t.Errorf("%d manifest reads over three rescans beside 50 refused manifests from the future, want about 1", n)
	}
}

// TestRefusedRewrittenInPlaceIsReadAgain: a refused manifest rewritten in
// place, at the same size, with its modification time put back (a client
// writing in place and copying the source's time) is a new version: the
// change time says so, and the real request runs.
func TestRefusedRewrittenInPlaceIsReadAgain(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.limit(noSettle)
	id, manifest, payload := p.sealManual(t, "echo", map[string]string{"msg": "inplace"}, nil)
	mpath := filepath.Join(p.toHost(), id+"."+bridge.ExtManifest)
	old := time.Now().Add(-time.Hour)
	must(t, os.WriteFile(mpath, bytes.Repeat([]byte{'x'}, len(manifest)), 0o644))
	must(t, os.Chtimes(mpath, old, old))
	p.start(t, nil)
	testkit.WaitFor(t, 10*time.Second, "the junk to be refused", func() bool { return p.auditCount(t, "refused") == 1 })
	f, err := os.OpenFile(mpath, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt(manifest, 0)
	must(t, err)
	must(t, f.Close())
	must(t, os.Chtimes(mpath, old, old))
	must(t, os.WriteFile(filepath.Join(p.toHost(), id+"."+bridge.ExtPayload), payload, 0o644))
	if out := p.wait(t, id); out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != "inplace\n" {
		t.Fatalf("the request: %s %q", out.Receipt.Status, out.Stdout)
	}
}

// TestRepublishLinesBounded: a folder writer removing a result as fast as
// the daemon puts it back makes a "republished" line each time; those lines
// too count against the agent directory's budget (found by the red team).
func TestRepublishLinesBounded(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.limit(budget(3))
	p.start(t, nil)
	out := p.run(t, agent.SubmitOptions{Host: "laptop", Op: "echo", Args: map[string]string{"msg": "once"}})
	res := filepath.Join(p.toAgent(), out.Receipt.ID+"."+bridge.ExtResult)
	for i := range 6 {
		must(t, os.Remove(res))
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("re-publish %d", i+1), func() bool { _, err := os.Stat(res); return err == nil })
	}
	if n := p.auditCount(t, "republished"); n < 1 || n > 3 {
		t.Errorf("6 re-publishes made %d republished lines, want 1 to the budget of 3", n)
	}
}

// TestJunkCancelsReadOnce: cancel files that are refused (junk, or signed
// by a key no longer valid) are read once per version, like manifests, and
// a cancel beside a finished request is skipped with it: a red team had
// 5,000 junk cancels read (twice each) at every rescan.
func TestJunkCancelsReadOnce(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.limit(noSettle)
	old := time.Now().Add(-time.Hour)
	for range 50 {
		f := filepath.Join(p.toHost(), bridge.NewRequestID()+"."+bridge.ExtCancel)
		must(t, os.WriteFile(f, []byte("BRA1 not a cancel"), 0o644))
		must(t, os.Chtimes(f, old, old))
	}
	p.start(t, nil)
	out := p.run(t, agent.SubmitOptions{Host: "laptop", Op: "echo", Args: map[string]string{"msg": "first"}})
	// A cancel beside the finished request: it changes nothing now.
	must(t, p.client.Cancel(out.Receipt.ID))
	settleRescans(t, p.daemon)
	before := p.daemon.probe.N(probe.CancelReads)
	settleRescans(t, p.daemon) // three rescans
	p.echo(t, "second")
	if n := p.daemon.probe.N(probe.CancelReads) - before; n > 3 {
		t.Errorf("%d cancel reads over three rescans beside 50 junk cancels and a finished request's cancel, want next to none", n)
	}
}

// waitRescans waits until the daemon has dispatched n more full rescans:
// a test of what did not happen waits for counted rescans, not a time.
func (p *pair) waitRescans(t *testing.T, n int) {
	t.Helper()
	waitDaemonRescans(t, p.daemon, n)
}

// TestJunkMemoryIsBounded: junk at request names in a trusted agent's
// directory (empty files, and random bytes) costs the daemon at most its
// bounded sets (refused marks, log-once notes) and nothing that stays from
// the burst of reading it (the queue's array and map); the request among
// the junk is served (issue 26, item 5; DESIGN "A folder writer").
func TestJunkMemoryIsBounded(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.limit(noSettle)
	p.limit(func(l *limits) { l.refusedMarks, l.noted = 100, 50 })
	p.plantJunk(t, 300, false)
	for range 300 {
		must(t, os.WriteFile(filepath.Join(p.toHost(), bridge.NewRequestID()+"."+bridge.ExtManifest), nil, 0o644))
	}
	p.start(t, nil)
	p.echo(t, "among the junk")
	p.waitRescans(t, 3)
	d := p.daemon
	d.refusals.mu.Lock()
	marks := len(d.refusals.marks)
	d.refusals.mu.Unlock()
	d.notes.mu.Lock()
	noted := len(d.notes.seen)
	d.notes.mu.Unlock()
	if marks != d.limits.refusedMarks {
		t.Errorf("%d refused marks for 600 junk files, want the bound %d", marks, d.limits.refusedMarks)
	}
	if noted > d.limits.noted {
		t.Errorf("%d log-once notes, over the bound %d", noted, d.limits.noted)
	}
	// Past the bound the junk is read again at each rescan; between two,
	// once the queue is empty, nothing of the burst is kept.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		d.sched.mu.Lock()
		n, c := len(d.sched.queue), cap(d.sched.queue)
		d.sched.mu.Unlock()
		if n == 0 {
			if c != 0 {
				t.Errorf("an empty queue keeps an array of %d", c)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queue never emptied")
		}
	}
	p.echo(t, "after the rescans")
}
