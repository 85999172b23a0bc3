package host

import (
	"fmt"
	"hash/fnv"
	"maps"
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
	"github.com/syncbridge/bridge/bridge/trust"
)

// openedDaemon is a daemon of p's host opened (its ledger, keys and
// rooms) but not run: no watcher, no control loop. Closed with the test.
func openedDaemon(t *testing.T, p *pair) *Daemon {
	t.Helper()
	d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.openCore(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.closeResources() })
	return d
}

// TestFinishedShareHash: a rescan checks the finished requests whose key
// hashes to its turn; fnv32a must be FNV-1a exactly as hash/fnv computes
// it, so that every key falls in one share and each is checked once every
// `shares` rescans.
// The system suites remove the finished cache by its name, as a SIGKILL
// can leave it behind the ledger: the name they use is the daemon's.
func TestFinishedCacheName(t *testing.T) {
	t.Parallel()
	if testkit.FinishedCache != finishedName {
		t.Fatalf("testkit.FinishedCache is %q, the daemon's cache is %q", testkit.FinishedCache, finishedName)
	}
}

func TestFinishedShareHash(t *testing.T) {
	t.Parallel()
	for i := range 1000 {
		key := bridge.NewRequestID()[:i%33] + "/" + bridge.NewRequestID()
		h := fnv.New32a()
		h.Write([]byte(key))
		if got, want := fnv32a(key), h.Sum32(); got != want {
			t.Fatalf("fnv32a(%q) = %d, want %d", key, got, want)
		}
	}
	if got := fnv32a(""); got != 2166136261 {
		t.Fatalf("fnv32a(\"\") = %d, want the offset basis", got)
	}
}

// TestLostOutputIsNotTakenForFinished: a result whose output the sync lost
// (or renamed away as a conflict) right after the publish is not recorded
// as in place; else no rescan would look at it again, and the agent would
// wait for ever for an output that no one publishes again (the simulator,
// seed 26 under load: an rclone conflict renamed the output on both sides).
func TestLostOutputIsNotTakenForFinished(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	out := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	p.stop(t)
	agentID, id := p.agent.Config.ID, out.Receipt.ID
	if err := os.Remove(filepath.Join(p.toAgent(), id+"."+bridge.ExtOutput)); err != nil {
		t.Fatal(err)
	}
	d := openedDaemon(t, p)
	d.markFinished(agentID, id)
	if _, ok := d.fin.done.get(agentID + "/" + id); ok {
		t.Fatal("a result without its output was taken for in place")
	}
}

// requestKeyOf, now the shape and then the digits, answers as the file-name
// parser does for every kind of path a rescan meets.
func TestRequestKeyOfMatchesParser(t *testing.T) {
	t.Parallel()
	const id = "0123456789abcdef0123456789abcdef"
	agent := strings.Repeat("ab", 16)
	var paths []string
	for _, name := range []string{
		id + ".manifest", id + ".payload", id + ".cancel", id + ".ack", id + ".result", id + ".manifest.tmp",
		id + ".", id, "0123456789abcdef0123456789abcdeF.manifest", "0123456789abcdef0123456789abcde.manifest",
		"0123456789abcdef0123456789abcdefa.manifest", "x" + id[1:] + ".payload", id + ".manifestx", id + "/manifest",
		"rotate-1.rotation", "", "~$" + id + ".manifest.1.tmp",
	} {
		paths = append(paths, agent+"/"+name, name, "/"+name, "a/b/"+name)
	}
	for _, p := range paths {
		want, wantOK := "", false
		if slash := strings.IndexByte(p, '/'); slash > 0 {
			if _, ext, ok := bridge.ParseToHostName(p[slash+1:]); ok && ext != bridge.ExtAck {
				want, wantOK = p[:slash+1+32], true
			}
		}
		if got, ok := requestKeyOf(p); got != want || ok != wantOK {
			t.Errorf("requestKeyOf(%q) = %q, %v; the parser says %q, %v", p, got, ok, want, wantOK)
		}
		if key, ok := requestKeyShape(p); wantOK && (!ok || key != want) {
			t.Errorf("requestKeyShape(%q) = %q, %v, for a request path", p, key, ok)
		}
	}
}

// The finished-requests cache reads back what save wrote, sizes of -1
// (an absent file) included, and any line not as save writes it discards
// the whole file.
func TestFinishedCacheReadsWhatItWrote(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]stamp{}
	for i := range 1000 {
		st := stamp{size: int64(i), mtime: int64(i) * 1e9, outSize: -1}
		if i%3 == 0 {
			st = stamp{size: -1, outSize: int64(i) << 20, outMtime: -int64(i)}
		}
		want[fmt.Sprintf("%032x/%032x", i%7, i)] = st
	}
	d.fin.done.replace(maps.Clone(want))
	if err := d.fin.save(); err != nil {
		t.Fatal(err)
	}
	d.fin.done.replace(map[string]stamp{})
	d.fin.load()
	if !maps.Equal(d.fin.done.m, want) {
		t.Fatalf("read back %d entries, differing from the %d written", len(d.fin.done.m), len(want))
	}
	good := fmt.Sprintf("%032x/%032x 1 2 3 4 5 6", 1, 2)
	for _, bad := range []string{
		good + " 7", good + " ", " " + good, strings.Replace(good, " 3", "  3", 1), strings.Replace(good, " 6", "", 1),
		strings.Replace(good, " 2", " x", 1), strings.Replace(good, " 2", " ", 1), fmt.Sprintf("/%032x 1 2 3 4 5 6", 2),
		fmt.Sprintf("%032x/%031x 1 2 3 4 5 6", 1, 2), fmt.Sprintf("%032x%032x 1 2 3 4 5 6", 1, 2), "", "not a line",
		strings.Replace(good, " 1 ", " 99999999999999999999 ", 1), "a\tb" + good[32:], "x" + good,
		fmt.Sprintf("%032x/%032x 1 2 3 4", 1, 2), // a v1 line
	} {
		if err := os.WriteFile(p.host.Path(finishedName), []byte(finishedHeader+"\n"+good+"\n"+bad+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		d.fin.done.replace(map[string]stamp{})
		d.fin.load()
		if len(d.fin.done.m) != 0 {
			t.Errorf("the line %q gave %d entries, want the file discarded", bad, len(d.fin.done.m))
		}
	}
	if err := os.WriteFile(p.host.Path(finishedName), []byte(finishedHeader+"\n"+good+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.fin.load()
	if st, _ := d.fin.done.get(fmt.Sprintf("%032x/%032x", 1, 2)); st != (stamp{size: 1, mtime: 2, ctime: 3, outSize: 4, outMtime: 5, outCtime: 6}) {
		t.Errorf("a good line read as %+v", st)
	}
}

// TestFinishedCacheIsWrittenOnlyWhenChanged: the periodic collection saves
// the finished set; a set unchanged since it was saved or loaded is not
// written again (a megabyte and an fsync every 10 minutes beside 10,000
// finished requests), and a changed one is, as is a file removed or
// written over since.
func TestFinishedCacheIsWrittenOnlyWhenChanged(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	file := p.host.Path(finishedName)
	ino := func() uint64 {
		t.Helper()
		fi, err := os.Lstat(file)
		if err != nil {
			t.Fatal(err)
		}
		return fileIno(fi) // a save writes a new file and renames it into place
	}
	key := fmt.Sprintf("%032x/%032x", 1, 2)
	d.fin.done.set(key, stamp{size: 1})
	must(t, d.fin.save())
	first := ino()
	must(t, d.fin.save())
	if ino() != first {
		t.Fatal("an unchanged finished set was written again")
	}
	d.fin.done.set(key, stamp{size: 2})
	must(t, d.fin.save())
	changed := ino()
	if changed == first {
		t.Fatal("a changed finished set was not written")
	}
	// Loaded at a start, the set is the file's: not written again either.
	d2, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	d2.fin.load()
	must(t, d2.fin.save())
	if ino() != changed {
		t.Fatal("a finished set just loaded was written again")
	}
	if st, _ := d2.fin.done.get(key); st != (stamp{size: 2}) {
		t.Fatalf("read back %+v", st)
	}
	// Removed or changed behind the daemon's back: written again.
	must(t, os.Remove(file))
	must(t, d2.fin.save())
	if _, err := os.Lstat(file); err != nil {
		t.Fatalf("a finished cache removed while the daemon ran was not written again: %v", err)
	}
	must(t, os.WriteFile(file, []byte(finishedHeader+"\n"), 0o600))
	must(t, d2.fin.save())
	d2.fin.done.replace(map[string]stamp{})
	d2.fin.load()
	if st, _ := d2.fin.done.get(key); st != (stamp{size: 2}) {
		t.Fatalf("a finished cache written over while the daemon ran was not written again: read back %+v", st)
	}
}

// A rescan of a folder whose finished requests are as they were at the
// rescan before finds them among that rescan's keys, with no look-up in the
// finished set; once the set changed (a request dropped from it, as a
// ledger repair or a lost result does), it looks up again, and the dropped
// request is evaluated again, not skipped (its answer is the one it had: it
// does not run twice).
func TestRescanReusesItsFinishedLookUps(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	d := p.daemon
	var ids []string
	for range 3 {
		out := p.run(t, agent.SubmitOptions{Host: "laptop", Op: "count"})
		ids = append(ids, out.Receipt.ID)
	}
	finished := func(key string) bool {
		d.fin.mu.Lock()
		defer d.fin.mu.Unlock()
		_, ok := d.fin.done.get(key)
		return ok
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = p.agent.Config.ID + "/" + id
		testkit.WaitFor(t, 10*time.Second, "request "+id+" recorded finished", func() bool { return finished(keys[i]) })
	}
	rescan := func() (lookups, reads int64) {
		t.Helper()
		d.fin.mu.Lock()
		n := d.fin.rescans
		d.fin.mu.Unlock()
		l0, r0 := d.probe.N(probe.FinishedLookups), d.probe.N(probe.ManifestReads)
		d.watcher.Walk()
		testkit.WaitFor(t, 10*time.Second, "a rescan", func() bool {
			d.fin.mu.Lock()
			defer d.fin.mu.Unlock()
			return d.fin.rescans > n
		})
		return d.probe.N(probe.FinishedLookups) - l0, d.probe.N(probe.ManifestReads) - r0
	}
	lastGen := func() uint64 {
		d.fin.mu.Lock()
		defer d.fin.mu.Unlock()
		return d.fin.lastGen
	}
	// The set may still change on its own at first (the first collection
	// records what the agent acked): the claim is for rescans between which
	// it did not, as the generation each took its keys at says.
	rescan()
	for i := 0; ; i++ {
		g := lastGen()
		l, r := rescan()
		if lastGen() != g {
			if i == 20 {
				t.Fatal("the finished set changed between every two rescans")
			}
			continue
		}
		if l != 0 || r != 0 {
			t.Fatalf("a rescan of an unchanged folder and set made %d look-ups and read %d manifests, want none", l, r)
		}
		break
	}
	d.fin.drop(keys[1])
	if l, _ := rescan(); l == 0 {
		t.Fatal("a rescan after the finished set changed made no look-up: it took a dropped request for finished")
	}
	testkit.WaitFor(t, 10*time.Second, "the dropped request evaluated and recorded finished again", func() bool { return finished(keys[1]) })
	if data, err := os.ReadFile(countFile); err != nil || strings.Count(string(data), "run\n") != 3 {
		t.Fatalf("the count op's runs: %q (%v), want 3", data, err)
	}
}

// TestSameRescanDispatchesWhatTheOneBeforeDid: a rescan of a folder whose
// names, refused marks and finished set are as they were at the rescan
// before takes what that rescan found, without going through the names
// again, and still dispatches what is not finished: a request waiting for
// its payload is looked at again at every such rescan, and runs once its
// payload is there; a refused manifest left out of the rescan before is
// read again once new keys may make it acceptable. A rotation statement's
// name beside them changes none of this, and is followed again only when
// the keys changed, or at one such rescan in ten.
func TestSameRescanDispatchesWhatTheOneBeforeDid(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.tune = func(l *limits) { l.markSettle = 0 }
	// Only the test's own walks: a periodic one between them could
	// dispatch the waiting request just before a counted walk, whose
	// dispatch then joins that evaluation, its manifest read before the
	// count (seen once in 30 runs, and in CI).
	p.rescan = time.Hour
	countFile := filepath.Join(t.TempDir(), "count")
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	d := p.daemon
	p.run(t, agent.SubmitOptions{Host: "laptop", Op: "count"})
	// A name of a rotation statement stays in the folder for good once an
	// agent rotated its keys: followed at each rescan, it must not keep
	// the rescans from taking the findings of the one before.
	must(t, os.WriteFile(filepath.Join(p.toHost(), bridge.RotationName(1)), []byte("not a statement"), 0o644))
	id, manifest, payload := p.sealManual(t, "count", nil, nil)
	// Whole, by a rename: with markSettle 0, a look that read it half
	// written would mark it refused at the version the rest of the write
	// gave it, and no rescan would read it again (seen once in CI).
	tmp := filepath.Join(t.TempDir(), "manifest")
	must(t, os.WriteFile(tmp, manifest, 0o644))
	must(t, os.Rename(tmp, filepath.Join(p.toHost(), id+"."+bridge.ExtManifest)))
	rescan := func() (same, reads, lookups int64) {
		t.Helper()
		d.fin.mu.Lock()
		n := d.fin.rescans
		d.fin.mu.Unlock()
		s0, r0, l0 := d.probe.N(probe.SameRescans), d.probe.N(probe.ManifestReads), d.probe.N(probe.FinishedLookups)
		d.watcher.Walk()
		testkit.WaitFor(t, 10*time.Second, "a rescan", func() bool {
			d.fin.mu.Lock()
			defer d.fin.mu.Unlock()
			return d.fin.rescans > n
		})
		// The rescan dispatched what it dispatches before it counted:
		// wait for the evaluations it asked for to end, not only to be
		// taken from the queue (sched.idle): a worker that took the key
		// had not read its manifest yet when CI's loaded machine looked.
		testkit.WaitFor(t, 10*time.Second, "the evaluations", func() bool {
			d.sched.mu.Lock()
			defer d.sched.mu.Unlock()
			return len(d.sched.queue) == 0 && len(d.sched.active) == 0
		})
		return d.probe.N(probe.SameRescans) - s0, d.probe.N(probe.ManifestReads) - r0, d.probe.N(probe.FinishedLookups) - l0
	}
	// At first the set may change between rescans (the first collection),
	// and the manifest's arrival is a change of the folder.
	sames := 0
	for i := 0; sames < 3; i++ {
		if i == 30 {
			t.Fatalf("%d of 30 rescans of an unchanged folder took the one before's findings", sames)
		}
		same, reads, lookups := rescan()
		if same == 0 {
			continue
		}
		sames++
		if lookups != 0 {
			t.Fatalf("a rescan that took the one before's findings made %d look-ups", lookups)
		}
		if reads == 0 {
			t.Fatal("a rescan that took the one before's findings did not look at the request waiting for its payload")
		}
	}
	// The statement is followed again (its directory listed, the junk
	// read) at one rescan in ten while the folder and the trusted keys
	// stay as they are.
	f0 := d.probe.N(probe.RotationFollows)
	for range maxUnfollowed + 1 {
		rescan()
	}
	if got := d.probe.N(probe.RotationFollows) - f0; got != 1 {
		t.Fatalf("%d unchanged rescans followed the rotation statement %d times, want once", maxUnfollowed+1, got)
	}
	// Written over in place with no event (through a link to it from
	// outside the watched directories, as a lost event would leave it):
	// the next rescan follows it, by its version.
	outside := filepath.Join(t.TempDir(), "statement")
	must(t, os.Link(filepath.Join(p.toHost(), bridge.RotationName(1)), outside))
	rescan()
	f0 = d.probe.N(probe.RotationFollows)
	must(t, os.WriteFile(outside, []byte("another statement, not one either"), 0o644))
	if rescan(); d.probe.N(probe.RotationFollows)-f0 != 1 {
		t.Fatal("a rescan after a rotation statement was written over in place did not follow it")
	}
	// A refused manifest, marked: rescans leave it out, unread, and take
	// the findings of the one before again once the marks stay as they are.
	p.plantJunk(t, 1, false)
	for i := 0; ; i++ {
		if i == 30 {
			t.Fatal("30 rescans beside a refused manifest read it again or went through the names again")
		}
		if same, reads, _ := rescan(); same == 1 && reads == 1 { // the waiting request's alone
			break
		}
	}
	// New keys (as a pairing brings): the mark no longer holds, and the
	// rescan that no longer leaves the manifest out must read it, though
	// the folder is as it was.
	agents := maps.Clone(d.agents())
	d.agentsP.Store(&agents)
	f0 = d.probe.N(probe.RotationFollows)
	if same, reads, _ := rescan(); same != 0 || reads != 2 {
		t.Fatalf("the rescan after new keys: took the one before's findings %d times, read %d manifests; want 0 and 2", same, reads)
	}
	if got := d.probe.N(probe.RotationFollows) - f0; got != 1 {
		t.Fatalf("the rescan after new keys followed the rotation statement %d times, want once", got)
	}
	if err := os.WriteFile(filepath.Join(p.toHost(), id+"."+bridge.ExtPayload), payload, 0o644); err != nil {
		t.Fatal(err)
	}
	p.wait(t, id)
	if data, err := os.ReadFile(countFile); err != nil || strings.Count(string(data), "run\n") != 2 {
		t.Fatalf("the count op's runs: %q (%v), want 2", data, err)
	}
}

// TestRedeliveredRequestFindsItsLostResultPublishedAgain: a finished
// request whose files and result were lost, delivered again while the
// result checks pause, has its result published again within a rescan or
// two however the folder's names come back (here a sync client's
// directory swap, which a full walk sees before any event of it is
// dispatched): keys found anew start the checks' rotation again.
func TestRedeliveredRequestFindsItsLostResultPublishedAgain(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.limit(func(l *limits) { l.resultDirTrust = -1 }) // a check begun after a change may trust it: no 2 s waits
	p.start(t, nil)
	d, agentID := p.daemon, p.agent.Config.ID
	finished := func(id string) bool {
		d.fin.mu.Lock()
		defer d.fin.mu.Unlock()
		_, ok := d.fin.done.get(agentID + "/" + id)
		return ok
	}
	publish := func(dir, id string, manifest, payload []byte) {
		must(t, os.WriteFile(filepath.Join(dir, id+"."+bridge.ExtPayload), payload, 0o644))
		must(t, os.WriteFile(filepath.Join(dir, id+"."+bridge.ExtManifest), manifest, 0o644))
	}
	keep, km, kp := p.sealManual(t, "echo", map[string]string{"msg": "kept"}, nil)
	lost, lm, lp := p.sealManual(t, "echo", map[string]string{"msg": "lost"}, nil)
	publish(p.toHost(), keep, km, kp)
	publish(p.toHost(), lost, lm, lp)
	testkit.WaitFor(t, 20*time.Second, "both requests finished", func() bool { return finished(keep) && finished(lost) })
	paused := func() {
		t.Helper()
		n := d.probe.N(probe.ResultSkips)
		testkit.WaitFor(t, 20*time.Second, "the result checks to pause", func() bool { return d.probe.N(probe.ResultSkips) > n })
	}
	paused()
	result := filepath.Join(p.toAgent(), lost+"."+bridge.ExtResult)
	for _, f := range []string{filepath.Join(p.toHost(), lost+"."+bridge.ExtManifest), filepath.Join(p.toHost(), lost+"."+bridge.ExtPayload),
		result, filepath.Join(p.toAgent(), lost+"."+bridge.ExtOutput)} {
		must(t, os.Remove(f))
	}
	paused()
	// Delivered again as a sync client restoring the directory: another
	// directory with both requests' files swapped in at its name.
	swap := p.toHost() + ".restored"
	must(t, os.Mkdir(swap, 0o755))
	publish(swap, keep, km, kp)
	publish(swap, lost, lm, lp)
	must(t, os.Rename(p.toHost(), p.toHost()+".old"))
	must(t, os.Rename(swap, p.toHost()))
	for i := 1; ; i++ {
		p.waitRescans(t, 1)
		if _, err := os.Lstat(result); err == nil {
			break
		}
		if i == 3 {
			t.Fatalf("the lost result is not published again %d rescans after its request came back", i)
		}
	}
}

// TestFollowingThatFailsIsReported: a following of rotation statements
// that fails for the home's reasons (here its peers gone from under it) is
// reported failed, so that a rescan of the same folder follows them again
// at once; a statement refused for what it is (junk) is not a failure,
// or a folder writer's junk would be read at every rescan.
func TestFollowingThatFailsIsReported(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	d := openedDaemon(t, p)
	must(t, os.MkdirAll(p.toHost(), 0o755))
	must(t, os.WriteFile(filepath.Join(p.toHost(), bridge.RotationName(1)), []byte("not a statement"), 0o644))
	stmt := p.agent.Config.ID + "/" + bridge.RotationName(1)
	if d.keys.followStatements([]string{stmt}) {
		t.Fatal("a junk statement refused counted as a failed following")
	}
	peers := p.host.Path(trust.PeersDir)
	must(t, os.Rename(peers, peers+".away"))
	must(t, os.Mkdir(peers, 0o700))
	if !d.keys.followStatements([]string{stmt}) {
		t.Fatal("a following that could not find the agent's record in the home was not reported failed")
	}
}

// A red team (session 30): a folder writer puts other bytes at a finished
// request's result name, at the same size, and sets the old modification
// time again (Syncthing carries times across). The rescans' result check
// compares stamps, not bytes: without the change time in the stamp, which
// nobody can set back, the host would never publish its answer again.
func TestSameSizeAndTimeAtAResultIsNotTakenForIt(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("Windows: the change time read is the modification time (syncsafe.ChangeTime; DESIGN §2)")
	}
	e := newEdge(t)
	d := e.daemon(t)
	id := e.submit(t, "blockidem")
	done := e.wait(t, id)
	path := filepath.Join(e.toAgent(), id+"."+bridge.ExtResult)
	testkit.WaitFor(t, 10*time.Second, "the request to be known finished", func() bool {
		d.fin.mu.Lock()
		defer d.fin.mu.Unlock()
		_, ok := d.fin.done.get(e.agent.Config.ID + "/" + id)
		return ok
	})
	fi, err := os.Stat(path)
	must(t, err)
	must(t, os.WriteFile(path, make([]byte, fi.Size()), 0o644))
	must(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
	testkit.WaitFor(t, 10*time.Second, "the answer published again", func() bool {
		got, err := os.ReadFile(path)
		return err == nil && string(got) == string(done.Manifest)
	})
}

// A finished-requests cache an earlier version wrote (v1: no change times)
// is read with the change times unknown, and a rescan's result check that
// finds the sizes and times as they were takes the change times it sees:
// the first start after an upgrade does not evaluate every finished
// request again (19 s beside 100,000, a red team measured), and the cache
// it saves next is v2.
func TestFinishedCacheV1IsAdopted(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	out := p.run(t, agent.SubmitOptions{Host: "laptop", Op: "count"})
	key := p.agent.Config.ID + "/" + out.Receipt.ID
	testkit.WaitFor(t, 10*time.Second, "the request recorded finished", func() bool {
		p.daemon.fin.mu.Lock()
		defer p.daemon.fin.mu.Unlock()
		_, ok := p.daemon.fin.done.get(key)
		return ok
	})
	p.stop(t)
	data := string(mustRead(t, p.host.Path(finishedName)))
	var v1 strings.Builder
	v1.WriteString(finishedHeaderV1 + "\n")
	for _, line := range strings.Split(strings.TrimSpace(data), "\n")[1:] {
		f := strings.Fields(line) // key size mtime ctime outsize outmtime outctime
		fmt.Fprintf(&v1, "%s %s %s %s %s\n", f[0], f[1], f[2], f[4], f[5])
	}
	must(t, os.WriteFile(p.host.Path(finishedName), []byte(v1.String()), 0o600))

	p.start(t, map[string]string{"COUNT_FILE": countFile})
	d := p.daemon
	r0, m0 := d.probe.N(probe.ManifestReads), d.probe.N(probe.FinishedMarks)
	for range 3 {
		d.fin.mu.Lock()
		n := d.fin.rescans
		d.fin.mu.Unlock()
		d.watcher.Walk()
		testkit.WaitFor(t, 10*time.Second, "a rescan", func() bool {
			d.fin.mu.Lock()
			defer d.fin.mu.Unlock()
			return d.fin.rescans > n
		})
	}
	d.fin.mu.Lock()
	st, ok := d.fin.done.get(key)
	d.fin.mu.Unlock()
	if !ok || st.ctime == 0 || st.outCtime == 0 {
		t.Fatalf("after three rescans the stamp is %+v (known %v), want the change times taken", st, ok)
	}
	if r, m := d.probe.N(probe.ManifestReads)-r0, d.probe.N(probe.FinishedMarks)-m0; r != 0 || m != 0 {
		t.Fatalf("the request was evaluated again (%d manifests read, %d results compared): the v1 cache's stamp was not adopted", r, m)
	}
}
