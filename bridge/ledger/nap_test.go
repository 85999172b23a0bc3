package ledger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// setNap shortens how long l waits unused before it naps.
func setNap(l *Ledger, d time.Duration) {
	l.dur.Lock()
	l.napAfter = d
	l.dur.Unlock()
	l.napTimer.Reset(d)
}

// waitNaps waits until l has napped at least n times in all.
func waitNaps(t *testing.T, l *Ledger, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if naps, _ := l.Naps(); naps >= n {
			return
		}
		if time.Now().After(deadline) {
			naps, wakes := l.Naps()
			t.Fatalf("the ledger napped %d times (woke %d) in 20 s, want %d", naps, wakes, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An unused ledger closes buntdb (its one-second ticker stops with it) and
// opens it again at the next use: reads and writes work as before, a lazy
// write is on disk before the nap, and the ledger reopens to the same
// entries.
func TestNapAndWake(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	mustAdmit(t, l, testEntry("a/1", exp))
	if _, _, err := l.AdmitLazy(testEntry("a/2", exp)); err != nil {
		t.Fatal(err)
	}
	if l.Durable("a/2") {
		t.Fatal("a lazy write is durable before any fsync")
	}
	setNap(l, 20*time.Millisecond)
	waitNaps(t, l, 1)
	l.dur.RLock()
	asleep := l.db == nil
	l.dur.RUnlock()
	if !asleep {
		t.Fatal("the ledger counted a nap with buntdb open")
	}
	// The nap flushed the lazy write, and says so.
	if !l.Durable("a/2") {
		t.Error("a lazy write is not durable after the nap")
	}
	if fi, err := os.Stat(dbPath(dir)); err != nil || fi.Size() != l.SyncedSize() {
		t.Errorf("synced size %d, file %v, %v", l.SyncedSize(), fi.Size(), err)
	}
	// A read wakes it.
	if e, err := l.Get("a/1"); err != nil || e.State != StateSeen {
		t.Fatalf("Get after a nap: %+v, %v", e, err)
	}
	if _, wakes := l.Naps(); wakes != 1 {
		t.Errorf("woke %d times, want 1", wakes)
	}
	// So does a write, after another nap; and a compare-and-set still loses.
	waitNaps(t, l, 2)
	mustTransition(t, l, "a/1", StateSeen, StateClaimed)
	if _, err := l.Transition("a/1", []State{StateSeen}, StateClaimed, nil); !errors.Is(err, ErrWrongState) {
		t.Fatalf("a second claim after a nap: %v, want ErrWrongState", err)
	}
	waitNaps(t, l, 3)
	mustClose(t, l) // closes while napping
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	for key, want := range map[string]State{"a/1": StateClaimed, "a/2": StateSeen} {
		if e, err := l.Get(key); err != nil || e.State != want {
			t.Errorf("%s after a reopen: %+v, %v; want %s", key, e, err, want)
		}
	}
}

// Naps come and go while goroutines run lifecycles and read: every key
// still runs once, and nothing fails (run with -race).
func TestNapsUnderConcurrentUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := mustOpen(t, dir)
	// A nap at once after every wake: as many naps as uses allow, whatever
	// the machine's speed.
	setNap(l, time.Nanosecond)
	const workers, per = 6, 20
	competeForKeys(t, l, workers, per, func(key string) {
		if _, err := l.Get(key); err != nil {
			t.Error(err)
		}
	})
	naps, wakes := l.Naps()
	t.Logf("%d naps, %d wakes", naps, wakes)
	if wakes == 0 {
		t.Error("the ledger never woke: the test took no nap")
	}
	checkRanOnce(t, l, workers/2*per)
	mustClose(t, l)
}

// A ledger file removed or replaced while the ledger napped is not taken for
// the ledger when it wakes (buntdb would open a new empty file by the name,
// or an older copy, and forget requests that ran): the ledger refuses all
// work, as after a failed fsync, and creates nothing.
func TestWakeRefusesAReplacedFile(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"removed", "replaced"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			l := mustOpen(t, dir)
			exp := time.Now().Add(time.Hour)
			mustAdmit(t, l, testEntry("a/1", exp))
			old := readFile(t, dbPath(dir))
			mustTransition(t, l, "a/1", StateSeen, StateClaimed)
			setNap(l, 10*time.Millisecond)
			waitNaps(t, l, 1)
			if err := os.Rename(dbPath(dir), dbPath(dir)+".moved"); err != nil {
				t.Fatal(err)
			}
			if how == "replaced" {
				// An older copy: a1 still seen, as if it never was claimed.
				if err := os.WriteFile(dbPath(dir), old, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := l.Get("a/1"); err == nil || !strings.Contains(err.Error(), "removed or replaced") {
				t.Fatalf("Get after the file was %s: %v, want a refusal", how, err)
			}
			if _, err := l.Transition("a/1", []State{StateSeen}, StateClaimed, nil); err == nil {
				t.Fatalf("a claim after the file was %s succeeded", how)
			}
			if _, err := os.Stat(dbPath(dir)); how == "removed" && !os.IsNotExist(err) {
				t.Fatalf("the wake created %s: %v", dbPath(dir), err)
			}
			if _, wakes := l.Naps(); wakes != 0 {
				t.Errorf("woke %d times on a file not its own", wakes)
			}
			l.Close()
		})
	}
}

// A ledger file written over in place while the ledger napped (a restore
// that keeps the inode: cp over it, rsync --inplace) is refused at the
// wake too: read back, it would bring back an older state of a request that
// ran (seen again, claimable), and shadow the archive's newer record.
func TestWakeRefusesAFileWrittenInPlace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := mustOpen(t, dir)
	defer l.Close()
	mustAdmit(t, l, testEntry("a/1", time.Now().Add(time.Hour)))
	backup := readFile(t, dbPath(dir))
	mustTransition(t, l, "a/1", StateSeen, StateClaimed)
	mustTransition(t, l, "a/1", StateClaimed, StateRunning)
	setNap(l, 10*time.Millisecond)
	waitNaps(t, l, 1)
	f, err := os.OpenFile(dbPath(dir), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(backup)
	f.Close()
	if _, err := l.Get("a/1"); err == nil || !strings.Contains(err.Error(), "written by something else") {
		t.Fatalf("Get after the file was written over: %v, want a refusal", err)
	}
	if _, err := l.Transition("a/1", []State{StateSeen}, StateClaimed, nil); err == nil {
		t.Fatal("the request was claimed again from the older file")
	}
	select {
	case <-l.Unusable():
	default:
		t.Fatal("the ledger refuses work but does not say it is unusable")
	}
}

// A failed fsync of the lazy writes at a nap breaks the ledger as one in a
// commit does: the kernel may have dropped the pages, and the next fsync
// would say nothing of them, so Durable must never turn true.
func TestNapFsyncFailureBreaksTheLedger(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	defer l.Close()
	if _, _, err := l.AdmitLazy(testEntry("a/1", time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	failed := make(chan struct{})
	var once sync.Once
	syncFile = func(f *os.File) error {
		once.Do(func() { close(failed) })
		return errors.New("input/output error")
	}
	defer func() { syncFile = (*os.File).Sync }()
	setNap(l, 10*time.Millisecond)
	<-failed
	select {
	case <-l.Unusable():
	case <-time.After(20 * time.Second):
		t.Fatal("a failed fsync at a nap left the ledger usable")
	}
	syncFile = (*os.File).Sync
	if l.Durable("a/1") {
		t.Error("a lazy write whose fsync failed is called durable")
	}
	if _, err := l.Get("a/1"); err == nil {
		t.Error("the ledger still works after a failed fsync")
	}
}

// A nap compacts ledger.db as a clean Close does: every transition appends
// a whole record, and the wake reads the whole file, so without it a wake
// would read everything since the start. The ledger's descriptor follows
// the new file (its fsyncs reach it), and nothing is lost.
func TestNapCompactsTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	// A few entries waiting, and many that ran and went to the archive:
	// the file is mostly records no longer live, and over closeCompactMin.
	var keys []string
	for i := range 40 {
		key := fmt.Sprintf("a/%d", i)
		keys = append(keys, key)
		mustAdmit(t, l, testEntry(key, exp))
	}
	keys = append(keys, fillArchived(t, l, exp)...)
	before := fileSize(t, dbPath(dir))
	setNap(l, 10*time.Millisecond)
	waitNaps(t, l, 1)
	after := fileSize(t, dbPath(dir))
	if after*2 > before {
		t.Fatalf("ledger.db is %d bytes after the nap, %d before: not compacted", after, before)
	}
	mustTransition(t, l, "a/1", StateSeen, StateClaimed) // wakes, and fsyncs through the new descriptor
	if got := fileSize(t, dbPath(dir)); got <= after || l.SyncedSize() != got {
		t.Fatalf("after a write: file %d bytes, synced %d, compacted %d", got, l.SyncedSize(), after)
	}
	mustClose(t, l)
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	all, err := l.List(nil)
	if err != nil || len(all) != len(keys) {
		t.Fatalf("%d entries after a reopen (%v), want %d", len(all), err, len(keys))
	}
	if e, _ := l.Get("a/1"); e.State != StateClaimed {
		t.Fatalf("a/1 is %s after a reopen, want claimed", e.State)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// A change of the napping ledger file's metadata alone (chmod -R of the
// home, a chown, times set back, a hard link: each moves its change time)
// does not stop the daemon: the content is the nap's, and the wake goes on.
// The same bytes written back differently sized would be refused; a byte
// changed in place, the size kept, is refused by the content's hash.
func TestWakeTakesAMetadataChange(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"chmod", "chtimes", "link", "byte"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			l := mustOpen(t, dir)
			defer l.Close()
			mustAdmit(t, l, testEntry("a/1", time.Now().Add(time.Hour)))
			setNap(l, 10*time.Millisecond)
			waitNaps(t, l, 1)
			fi, err := os.Stat(dbPath(dir))
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond) // a coarse clock's tick, so the change time moves
			switch how {
			case "chmod":
				err = os.Chmod(dbPath(dir), fi.Mode().Perm())
			case "chtimes":
				err = os.Chtimes(dbPath(dir), fi.ModTime(), fi.ModTime())
			case "link":
				err = os.Link(dbPath(dir), filepath.Join(t.TempDir(), "snapshot"))
			case "byte":
				// The state's first letter, in place: "seen" becomes "Seen".
				data := readFile(t, dbPath(dir))
				i := strings.Index(string(data), `"state":"seen"`)
				if i < 0 {
					t.Fatalf("no seen state in %q", data)
				}
				f, ferr := os.OpenFile(dbPath(dir), os.O_WRONLY, 0)
				if ferr != nil {
					t.Fatal(ferr)
				}
				_, err = f.WriteAt([]byte("S"), int64(i+len(`"state":"`)))
				f.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			if fi2, _ := os.Stat(dbPath(dir)); changeTime(fi2) == changeTime(fi) {
				t.Fatalf("%s did not move the change time: the test proves nothing", how)
			}
			e, err := l.Get("a/1")
			if how == "byte" {
				if err == nil || !strings.Contains(err.Error(), "written by something else") {
					t.Fatalf("Get after a byte written in place: %+v, %v; want a refusal", e, err)
				}
				return
			}
			if err != nil || e.State != StateSeen {
				t.Fatalf("Get after a %s of the file: %+v, %v", how, e, err)
			}
			mustTransition(t, l, "a/1", StateSeen, StateClaimed)
		})
	}
}

// The directory's fsync failing after a nap's compaction renamed the new
// file in place: the new file is the ledger's from then (its descriptor
// follows it), and the ledger breaks at once with that reason, as after a
// failed fsync, not at the next wake with a wrong one.
func TestNapCompactionDirFsyncFailure(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	defer l.Close()
	exp := time.Now().Add(time.Hour)
	mustAdmit(t, l, testEntry("a/keep", exp))
	fillArchived(t, l, exp)
	syncDir = func(string) error { return errors.New("input/output error") }
	defer func() { syncDir = syncDirNamed }()
	setNap(l, 10*time.Millisecond)
	select {
	case <-l.Unusable():
	case <-time.After(20 * time.Second):
		t.Fatal("a failed directory fsync at the nap's compaction left the ledger usable")
	}
	if err := l.Err(); !strings.Contains(err.Error(), "failed fsync of its directory") {
		t.Fatalf("the ledger broke with %v, want the directory's fsync", err)
	}
	l.dur.RLock()
	cur, _ := l.dbf.Stat()
	l.dur.RUnlock()
	if at, err := os.Stat(dbPath(dir)); err != nil || !os.SameFile(cur, at) {
		t.Fatalf("the ledger's descriptor is not on the compacted file: %v", err)
	}
}

// fillArchived runs requests "b/<n>" to done, each record padded, until
// ledger.db is twice the size a compaction looks at, and moves them to the
// archive: the file is then mostly records no longer live. It returns their
// keys.
func fillArchived(t *testing.T, l *Ledger, exp time.Time) []string {
	t.Helper()
	var keys []string
	pad := strings.Repeat("x", 2000)
	for i := 0; fileSize(t, l.Path()) < 2*closeCompactMin; i++ {
		key := fmt.Sprintf("b/%d", i)
		keys = append(keys, key)
		mustAdmit(t, l, testEntry(key, exp))
		for _, s := range []State{StateClaimed, StateRunning, StateDone} {
			if _, err := l.Transition(key, []State{prev(s)}, s, func(e *Entry) { e.Reason = pad }); err != nil {
				t.Fatal(err)
			}
		}
	}
	l.mu.RLock()
	_, err := l.move()
	l.mu.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
