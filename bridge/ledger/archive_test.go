package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/buntdb"
)

func archivePath(dir string) string { return filepath.Join(dir, archiveFile) }

// lowArchiveEvery makes the ledger move terminal entries after n of them.
func lowArchiveEvery(t *testing.T, n int) {
	t.Helper()
	old := archiveEvery
	archiveEvery = n
	t.Cleanup(func() { archiveEvery = old })
}

// inMemory counts the records buntdb holds: what the archive took out of
// the heap is not among them.
func inMemory(t *testing.T, l *Ledger) (all, terminal int) {
	t.Helper()
	err := l.view(func(tx *buntdb.Tx) error {
		return tx.AscendKeys(entryPrefix+"*", func(_, v string) bool {
			all++
			if st, _ := topField(v, "state"); State(st).Terminal() {
				terminal++
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return all, terminal
}

// waitArchived waits until Stats counts n archived entries (a background
// move), failing after a generous deadline.
func waitArchived(t *testing.T, l *Ledger, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := l.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.Archived >= n && !l.moving.Load() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries archived, want %d: %+v", st.Archived, n, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// done takes key through a whole lifecycle to done.
func done(t *testing.T, l *Ledger, key string, exp time.Time) {
	t.Helper()
	mustAdmit(t, l, testEntry(key, exp))
	for _, s := range []State{StateClaimed, StateRunning, StateDone} {
		mustTransition(t, l, key, prev(s), s)
	}
}

// Terminal entries leave buntdb (the heap) for the archive in batches, and
// every read answers as before: an archived id is still taken (a
// duplicate is not created again, another manifest is a conflict, no
// transition leaves it), lists, states, settled and missing see it, and
// so does the next Open.
func TestArchiveKeepsEveryAnswer(t *testing.T) {
	lowArchiveEvery(t, 8)
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	var keys []string
	for i := range 20 {
		k := fmt.Sprintf("a/%02d", i)
		keys = append(keys, k)
		done(t, l, k, exp)
	}
	mustAdmit(t, l, testEntry("b/waiting", exp))
	waitArchived(t, l, 16)
	if all, term := inMemory(t, l); term > 4 || all > 5 {
		t.Fatalf("buntdb still holds %d records, %d terminal, after the moves", all, term)
	}
	want, err := l.List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 21 || want[0].Key != "a/00" || want[20].Key != "b/waiting" {
		t.Fatalf("list after the moves: %d entries", len(want))
	}
	check := func(l *Ledger) {
		t.Helper()
		got, err := l.List(nil)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("list: %v\n got %+v\nwant %+v", err, got, want)
		}
		for i, k := range keys {
			e, err := l.Get(k)
			if err != nil || !reflect.DeepEqual(e, want[i]) {
				t.Fatalf("get %s: %+v, %v", k, e, err)
			}
			if _, created, err := l.Admit(testEntry(k, exp)); err != nil || created {
				t.Fatalf("admit of archived %s again: created %v, %v", k, created, err)
			}
			other := testEntry(k, exp)
			other.ManifestSHA256 = strings.Repeat("cd", 32)
			if _, _, err := l.Admit(other); !errors.Is(err, ErrConflict) {
				t.Fatalf("admit of archived %s with another manifest: %v; want ErrConflict", k, err)
			}
			if _, err := l.Transition(k, []State{StateRunning}, StateFailed, nil); !errors.Is(err, ErrWrongState) {
				t.Fatalf("transition of archived %s: %v; want ErrWrongState", k, err)
			}
		}
		doneOnes, err := l.InState(StateDone)
		if err != nil || len(doneOnes) != 20 {
			t.Fatalf("in state done: %d, %v", len(doneOnes), err)
		}
		if seen, err := l.InState(StateSeen); err != nil || len(seen) != 1 || seen[0].Key != "b/waiting" {
			t.Fatalf("in state seen: %+v, %v", seen, err)
		}
		missing, err := l.Missing(append([]string{"z/none"}, keys...))
		if err != nil || !reflect.DeepEqual(missing, []string{"z/none"}) {
			t.Fatalf("missing: %v, %v", missing, err)
		}
		settled, err := l.Settled(time.Now().Add(time.Minute), time.Time{}, nil)
		if err != nil || len(settled) != 20 {
			t.Fatalf("settled: %d, %v", len(settled), err)
		}
		picked, err := l.Settled(time.Now().Add(time.Minute), time.Time{}, func(k string, u, e time.Time) bool {
			return k == "a/03" && e.Equal(want[3].Expires) && u.Equal(want[3].Updated)
		})
		if err != nil || len(picked) != 1 || picked[0].Key != "a/03" {
			t.Fatalf("settled with want: %+v, %v", picked, err)
		}
		st, err := l.Stats()
		if err != nil || st.Total != 21 || st.States[StateDone] != 20 || st.States[StateSeen] != 1 {
			t.Fatalf("stats: %+v, %v", st, err)
		}
	}
	check(l)
	mustClose(t, l)
	// Close moved the rest: the next Open loads the waiting entry only.
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	if all, term := inMemory(t, l); all != 1 || term != 0 {
		t.Fatalf("after reopen buntdb holds %d records, %d terminal", all, term)
	}
	check(l)
	if snap, err := Snapshot(dir); err != nil || !reflect.DeepEqual(snap, want) {
		t.Fatalf("snapshot: %v\n got %+v\nwant %+v", err, snap, want)
	}
}

// Many writers, and duplicates of requests that may be moving at that
// moment: each id is created once, whatever the moves do meanwhile.
func TestArchiveUnderConcurrentAdmits(t *testing.T) {
	lowArchiveEvery(t, 16)
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	const n = 600
	var created sync.Map
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				k := fmt.Sprintf("a/%04d", i)
				if _, c, err := l.Admit(testEntry(k, exp)); err != nil || !c {
					errs <- fmt.Errorf("first admit of %s: created %v, %v", k, c, err)
					return
				}
				created.Store(k, 1)
				for _, s := range []State{StateClaimed, StateRunning, StateDone} {
					if _, err := l.Transition(k, []State{prev(s)}, s, nil); err != nil {
						errs <- err
						return
					}
				}
			}
		})
		// A duplicate of every request the writers finished, again and
		// again: in buntdb, moving, or archived, it is never new.
		wg.Go(func() {
			for r := range 3 {
				for i := (w + r) % 4; i < n; i += 4 {
					k := fmt.Sprintf("a/%04d", i)
					if _, ok := created.Load(k); !ok {
						continue
					}
					if _, c, err := l.Admit(testEntry(k, exp)); err != nil || c {
						errs <- fmt.Errorf("duplicate of %s: created %v, %v", k, c, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitArchived(t, l, n-2*archiveEvery)
	all, err := l.List(nil)
	if err != nil || len(all) != n {
		t.Fatalf("list: %d entries, %v", len(all), err)
	}
	for i, e := range all {
		if e.State != StateDone || e.Runs != 1 || (i > 0 && all[i-1].Key >= e.Key) {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	mustClose(t, l)
}

// A crash between a move's two writes leaves an entry in the archive and
// in buntdb: it is listed and counted once, and the next Open finishes the
// move.
func TestArchiveCrashInsideAMove(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	for _, k := range []string{"a/1", "a/2"} {
		done(t, l, k, exp)
	}
	want, _ := l.List(nil)
	// The move's first half only: appended and fsynced, not yet deleted.
	var keys, vals []string
	l.view(func(tx *buntdb.Tx) error {
		return tx.AscendKeys(entryPrefix+"*", func(k, v string) bool {
			keys, vals = append(keys, k[len(entryPrefix):]), append(vals, v)
			return true
		})
	})
	l.amu.Lock()
	err := l.arch.add(keys, vals)
	l.amu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	// What a power cut keeps now: the synced part of each file.
	crashed := t.TempDir()
	for name, n := range map[string]int64{dbFile: l.SyncedSize(), archiveFile: -1} {
		data := readFile(t, filepath.Join(dir, name))
		if n >= 0 {
			data = data[:n]
		}
		if err := os.WriteFile(filepath.Join(crashed, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := l.List(nil); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("list with entries in both: %v\n got %+v\nwant %+v", err, got, want)
	}
	if st, _ := l.Stats(); st.Total != 2 {
		t.Fatalf("stats with entries in both: %+v", st)
	}
	if snap, err := Snapshot(dir); err != nil || !reflect.DeepEqual(snap, want) {
		t.Fatalf("snapshot with entries in both: %v\n got %+v", err, snap)
	}
	mustClose(t, l)

	l = mustOpen(t, crashed)
	defer mustClose(t, l)
	if all, _ := inMemory(t, l); all != 0 {
		t.Fatalf("after the crash Open left %d records in buntdb", all)
	}
	if got, err := l.List(nil); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("list after the crash: %v\n got %+v\nwant %+v", err, got, want)
	}
}

// GC and Forget drop archived entries for good (their `del`s survive a
// reopen), and a Close rewrites an archive that is mostly dropped entries.
func TestArchiveCollects(t *testing.T) {
	dir := t.TempDir()
	old := closeCompactMin
	closeCompactMin = 0
	t.Cleanup(func() { closeCompactMin = old })
	l := mustOpen(t, dir)
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	for i := range 10 {
		done(t, l, fmt.Sprintf("old/%d", i), past)
	}
	done(t, l, "new/1", future)
	mustClose(t, l) // all of them to the archive
	l = mustOpen(t, dir)
	if ok, err := l.Forget("old/0", time.Now(), time.Minute); err != nil || !ok {
		t.Fatalf("forget of an archived entry: %v, %v", ok, err)
	}
	if ok, err := l.Forget("new/1", time.Now(), time.Minute); err != nil || ok {
		t.Fatalf("forget of an archived entry before its expiry: %v, %v", ok, err)
	}
	if n, err := l.GC(time.Now(), time.Minute); err != nil || n != 9 {
		t.Fatalf("gc: %d, %v; want 9", n, err)
	}
	before, _ := os.Stat(archivePath(dir))
	mustClose(t, l)
	after, _ := os.Stat(archivePath(dir))
	if after.Size() >= before.Size() {
		t.Fatalf("the archive was not compacted: %d → %d bytes", before.Size(), after.Size())
	}
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	all, err := l.List(nil)
	if err != nil || len(all) != 1 || all[0].Key != "new/1" {
		t.Fatalf("after gc and reopen: %+v, %v", all, err)
	}
	if _, err := l.Get("old/3"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("collected entry came back: %v", err)
	}
}

// A ledger written before the archive existed (terminal records in
// ledger.db, no archive file) opens with the same entries, and its terminal
// records move out of the file.
func TestArchiveMigratesAnOldLedger(t *testing.T) {
	dir := t.TempDir()
	exp := time.Now().Add(time.Hour)
	var b strings.Builder
	b.WriteString(respSet(formatKey, "1"))
	var want []Entry
	for i, st := range []State{StateDone, StateRejected, StatePending, StateFailed} {
		e := normalize(testEntry(fmt.Sprintf("a/%d", i), exp))
		e.State, e.FirstSeen, e.Updated = st, time.Now(), time.Now()
		e.History = []Transition{{State: st, At: e.Updated}}
		e = normalize(e)
		val, err := encodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(respSet(entryPrefix+e.Key, string(val)))
		want = append(want, e)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dbPath(dir), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if snap, err := Snapshot(dir); err != nil || !reflect.DeepEqual(snap, want) {
		t.Fatalf("snapshot of the old ledger: %v\n got %+v\nwant %+v", err, snap, want)
	}
	l := mustOpen(t, dir)
	if all, term := inMemory(t, l); all != 1 || term != 0 {
		t.Fatalf("the old ledger's terminal records stayed in buntdb: %d records, %d terminal", all, term)
	}
	got, err := l.List(nil)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("list: %v\n got %+v\nwant %+v", err, got, want)
	}
	mustClose(t, l)
	if s := scanLog(readFile(t, dbPath(dir)), 0); s.entries() != 1 {
		t.Fatalf("ledger.db after the move and a close: %d records", s.entries())
	}
}

// A torn append is cut at Open; damage is refused (ErrDamaged, file
// untouched) until Repair cuts the archive after its last valid record.
func TestArchiveTornAndDamaged(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	for _, k := range []string{"a/1", "a/2", "a/3"} {
		done(t, l, k, exp)
	}
	mustClose(t, l)
	whole := readFile(t, archivePath(dir))

	// Torn: half of a record, then NULs.
	rec := respSet(entryPrefix+"a/9", `{"v":1,"key":"a/9"}`)
	for _, tail := range []string{rec[:len(rec)/2], rec[:10] + "\x00\x00\x00", "\x00\x00\x00\x00"} {
		if err := os.WriteFile(archivePath(dir), append(bytes.Clone(whole), tail...), 0o600); err != nil {
			t.Fatal(err)
		}
		l := mustOpen(t, dir)
		if all, err := l.List(nil); err != nil || len(all) != 3 {
			t.Fatalf("torn tail %q: %d entries, %v", tail, len(all), err)
		}
		mustClose(t, l)
		if got := readFile(t, archivePath(dir)); !bytes.Equal(got, whole) {
			t.Fatalf("torn tail %q: not cut (%d bytes, want %d)", tail, len(got), len(whole))
		}
	}

	// Damage inside a record's bytes, its frame intact (a disk error; the
	// model's repair step found it): the CRC refuses it at Open, not a
	// read later.
	bad := bytes.Clone(whole)
	i := bytes.LastIndex(bad, []byte(`{"v":1,"key":"a/3"`))
	copy(bad[i+40:], "\x00garbage")
	bad = append(bad, respSet(entryPrefix+"a/8", "{}")...)
	if err := os.WriteFile(archivePath(dir), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrDamaged) {
		t.Fatalf("damaged archive: %v; want ErrDamaged", err)
	}
	if got := readFile(t, archivePath(dir)); !bytes.Equal(got, bad) {
		t.Fatal("a refused archive was changed")
	}
	if _, err := Snapshot(dir); !errors.Is(err, ErrDamaged) {
		t.Fatalf("snapshot of a damaged archive: %v; want ErrDamaged", err)
	}
	rep, err := Repair(dir)
	if err != nil || rep.Damaged || rep.Archive == nil || !rep.Archive.Damaged || rep.Archive.Entries != 2 || rep.Archive.Backup == "" {
		t.Fatalf("repair: %+v (archive %+v), %v", rep, rep.Archive, err)
	}
	if b := readFile(t, rep.Archive.Backup); !bytes.Equal(b, bad) {
		t.Fatal("the repair's copy is not the damaged archive")
	}
	if !strings.Contains(rep.Archive.Problem, "CRC") {
		t.Errorf("repair problem %q does not name the CRC", rep.Archive.Problem)
	}
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	all, err := l.List(nil)
	if err != nil || len(all) != 2 || all[0].Key != "a/1" || all[1].Key != "a/2" {
		t.Fatalf("after repair: %+v, %v", all, err)
	}
}

// A record whose state is not terminal is refused even with a right CRC:
// no move writes one. (In the bytes ledger.db vouches for: after them it
// would be a move that never finished, cut.)
func TestArchiveRefusesALiveState(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	done(t, l, "a/1", time.Now().Add(time.Hour))
	mustClose(t, l)
	data := readFile(t, archivePath(dir))
	i := bytes.Index(data, []byte(`{"v":1,"key":"a/1"`))
	j := i + bytes.Index(data[i:], []byte("\r\n"))
	rec := bytes.Replace(data[i:j], []byte(`"state":"done"`), []byte(`"state":"seen"`), 1)
	copy(data[i:], rec)
	copy(data[j+6:], crcHex(rec)) // after "\r\n$8\r\n"
	if err := os.WriteFile(archivePath(dir), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "not terminal") {
		t.Fatalf("archived seen entry: %v; want ErrDamaged", err)
	}
}

func TestArchiveSetLen(t *testing.T) {
	for _, k := range []int{1, 9, 10, 65, 100} {
		for _, v := range []int{0, 9, 10, 775, 1000} {
			cmd, at := archiveSet(strings.Repeat("k", k), strings.Repeat("v", v))
			if int64(len(cmd)) != archiveSetLen(k, v) || cmd[at:at+v] != strings.Repeat("v", v) {
				t.Errorf("archiveSet(%d, %d): length %d, archiveSetLen %d, value at %d", k, v, len(cmd), archiveSetLen(k, v), at)
			}
		}
	}
}

// Any bytes after the format: the archive is indexed or refused (torn
// tails cut), never a panic, and what it indexes reads or fails cleanly.
func FuzzArchiveIndex(f *testing.F) {
	rec, _ := archiveSet("a/1", `{"v":1,"key":"a/1","state":"done"}`)
	f.Add([]byte(rec))
	f.Add([]byte(rec[:20]))
	f.Add([]byte("*2\r\n$3\r\ndel\r\n$4\r\nr/a1\r\n"))
	f.Add([]byte("\x00\x00" + rec))
	// One directory for every input, the archive rewritten each time
	// (readArchive only reads): a directory made and removed per input was
	// most of the target's cost, 71 s of test.sh's fuzzing step. So no
	// t.Parallel in the function: the seeds would share the file.
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		head := respSet(formatKey, "1")
		if err := os.WriteFile(archivePath(dir), append([]byte(head), data...), 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := readArchive(dir, -1)
		if err != nil {
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("not ErrDamaged: %v", err)
			}
			return
		}
		defer a.close()
		for k, r := range a.idx {
			if int64(r.off)+int64(r.n) > int64(len(head)+len(data)) {
				t.Fatalf("%s indexed past the end", k)
			}
			a.read(k, r)
		}
	})
}

// An archive older than its ledger.db (a backup restored file by file) is
// refused, not read as if the missing records never were; repair accepts
// it (the host's repair then lists what the audit log knows) and the
// ledger opens again.
func TestArchiveShorterThanVouchedIsDamage(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	done(t, l, "a/1", exp)
	mustClose(t, l)
	older := readFile(t, archivePath(dir))
	l = mustOpen(t, dir)
	done(t, l, "a/2", exp)
	mustClose(t, l)
	if err := os.WriteFile(archivePath(dir), older, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "shorter") {
		t.Fatalf("an older archive: %v; want ErrDamaged (shorter)", err)
	}
	if _, err := Snapshot(dir); !errors.Is(err, ErrDamaged) {
		t.Fatalf("snapshot beside an older archive: %v; want ErrDamaged", err)
	}
	rep, err := Repair(dir)
	if err != nil || !rep.Repaired || rep.Damaged || rep.Archive == nil || !rep.Archive.Damaged || !strings.Contains(rep.Archive.Problem, "shorter") {
		t.Fatalf("repair: %+v (archive %+v), %v", rep, rep.Archive, err)
	}
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	if _, err := l.Get("a/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get("a/2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a/2 after the older archive's repair: %v", err)
	}
}
