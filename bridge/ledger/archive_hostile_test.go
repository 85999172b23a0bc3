package ledger

// What a red team tried against the archive (commit 9a90696) and what it
// found; each "Found:" test failed on that commit and guards its fix.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// failArchiveSyncOnce makes the next fsync of ledger.archive fail once
// (EIO from a flaky disk, or the write before it hit ENOSPC).
func failArchiveSyncOnce(t *testing.T) *atomic.Bool {
	t.Helper()
	var armed atomic.Bool
	syncFile = func(f *os.File) error {
		if filepath.Base(f.Name()) == archiveFile && armed.CompareAndSwap(true, false) {
			return errors.New("injected EIO")
		}
		return f.Sync()
	}
	t.Cleanup(func() { syncFile = (*os.File).Sync })
	return &armed
}

// moveFailsThenGC: a background move appends a chunk whose fsync fails
// (entries stay in buntdb; the bytes it wrote stayed in the file past
// a.size, before the append cut them back); GC then drops some of those entries from buntdb;
// the next move writes a SHORTER chunk at the same offset, leaving the
// tail of the failed one behind. collected picks which keys GC drops.
func moveFailsThenGC(t *testing.T, keys []string, collected map[string]bool) (dir string) {
	lowArchiveEvery(t, 4)
	dir = t.TempDir()
	l := mustOpen(t, dir)
	armed := failArchiveSyncOnce(t)
	armed.Store(true)
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	for _, k := range keys {
		exp := future
		if collected[k] {
			exp = past
		}
		done(t, l, k, exp)
	}
	// The 4th terminal write started a background move; wait for it to fail.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := l.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.ArchiveError != "" && !l.moving.Load() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the background move did not fail: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
	n, err := l.GC(time.Now(), 0)
	if err != nil || n != len(collected) {
		t.Fatalf("gc: %d, %v", n, err)
	}
	for k := range collected {
		if _, err := l.Get(k); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s after gc: %v", k, err)
		}
	}
	mustClose(t, l) // moves the rest (a shorter chunk, same offset)
	return dir
}

// Found: GC'd entries come back after a restart.
func TestArchiveHostileFailedSyncResurrectsCollected(t *testing.T) {
	dir := moveFailsThenGC(t, []string{"a/1", "a/2", "a/3", "a/4"}, map[string]bool{"a/3": true, "a/4": true})
	l := mustOpen(t, dir)
	defer mustClose(t, l)
	for _, k := range []string{"a/3", "a/4"} {
		if e, err := l.Get(k); !errors.Is(err, ErrNotFound) {
			t.Errorf("collected %s is back after a restart: %s, %v", k, e.State, err)
		}
	}
	if all, _ := l.List(nil); len(all) != 2 {
		t.Errorf("list after restart: %d entries, want 2", len(all))
	}
}

// Found: the daemon refuses to start (ErrDamaged) after a transient
// archive I/O error, a GC, and a clean stop.
func TestArchiveHostileFailedSyncThenGCRefusesToStart(t *testing.T) {
	dir := moveFailsThenGC(t, []string{"a/1", "a/22", "a/333", "a/4444"}, map[string]bool{"a/22": true})
	l, err := Open(dir)
	if err != nil {
		t.Fatalf("Open after a clean Close: %v", err)
	}
	mustClose(t, l)
}

var _ = fmt.Sprint
var _ = strings.Repeat

// Found: a key that checkKey accepts but encoding/json escapes (&, <, >,
// ", \, U+2028) cannot be archived: refOf compares the raw key with the
// escaped bytes of the record. Every move fails, and Open refuses to start.
func TestArchiveHostileEscapedKeyBricksOpen(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	k := "agent/q&a"
	if err := checkKey(k); err != nil {
		t.Fatal(err)
	}
	done(t, l, k, time.Now().Add(time.Hour))
	done(t, l, "agent/zz", time.Now().Add(time.Hour))
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	l, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer mustClose(t, l)
	if _, err := l.Get(k); err != nil {
		t.Fatal(err)
	}
}

// Held up: records straddling index()'s 1 MiB reads, and one record larger
// than the buffer, index and read back after a reopen.
func TestArchiveHostileIndexAcrossBlocks(t *testing.T) {
	lowArchiveEvery(t, 1<<30)
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	var keys []string
	for i := range 1500 {
		k := fmt.Sprintf("a/%05d", i)
		e := testEntry(k, exp)
		e.State = StateRejected
		e.Reason = strings.Repeat("r", 700+i%613)
		if i == 700 {
			e.Reason = strings.Repeat("x", 2<<20+17) // > the 1 MiB buffer, twice
		}
		if _, c, err := l.Admit(e); err != nil || !c {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	want, err := l.List(nil)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	if fi, _ := os.Stat(archivePath(dir)); fi.Size() < 3<<20 {
		t.Fatalf("archive only %d bytes", fi.Size())
	}
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	for i, k := range keys {
		e, err := l.Get(k)
		if err != nil || e.Reason != want[i].Reason {
			t.Fatalf("get %s: %v", k, err)
		}
	}
	snap, err := Snapshot(dir)
	if err != nil || len(snap) != len(keys) {
		t.Fatalf("snapshot: %d, %v", len(snap), err)
	}
}

// Finding (same root cause as the resurrection): GC and Forget drop an
// archived copy only for keys buntdb does not hold. A key held in both
// with different records (here: ledger.db repaired back to an older
// record of an entry the archive holds as done) keeps its archived copy
// when GC deletes it from buntdb, and the old record comes back.
func TestArchiveHostileGCLeavesArchivedCopyOfKeyInBoth(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	past := time.Now().Add(-time.Hour)
	done(t, l, "a/1", past)
	mustClose(t, l) // a/1 to the archive; ledger.db keeps its sets and a del
	// Disk damage inside a/1's done record in ledger.db: Open refuses it,
	// Repair cuts ledger.db before it; a/1 is back in buntdb as running.
	db := readFile(t, dbPath(dir))
	i := bytes.LastIndex(db, []byte(`"state":"done"`))
	db[i+10] = 'X'
	if err := os.WriteFile(dbPath(dir), db, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrDamaged) {
		t.Fatalf("open: %v", err)
	}
	if _, err := Repair(dir); err != nil {
		t.Fatal(err)
	}
	// The archive's record stands: it shows the entry finished, and
	// ledger.db is behind it. Open settles the two (one record left).
	l = mustOpen(t, dir)
	e, err := l.Get("a/1")
	if err != nil || e.State != StateDone {
		t.Fatalf("after repair: %+v %v; want the archive's done", e, err)
	}
	if all, _ := inMemory(t, l); all != 0 {
		t.Fatalf("buntdb still holds %d records beside the archive's", all)
	}
	if n, err := l.GC(time.Now(), 0); err != nil || n != 1 {
		t.Fatalf("gc: %d, %v", n, err)
	}
	if e, err := l.Get("a/1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a/1 after GC collected it: %s, %v (resurrected from the archive)", e.State, err)
	}
	mustClose(t, l)
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	if e, err := l.Get("a/1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a/1 after GC and a reopen: %s, %v", e.State, err)
	}
}

// Found: ledger.archive is created (O_CREATE) and filled, and the move
// then deletes the records from ledger.db with an fsync, but the directory
// is never fsynced after the archive's creation (strace: fsync(archive),
// fsync(ledger.db), no fsync of the directory). Under power-cut semantics
// (only fsynced bytes and fsynced directory entries survive) the archive's
// name can be gone while the deletes are durable. Open then creates a new,
// empty archive without a word: the finished ids are admitted as new.
//
// The test models that power cut: ledger.db cut at SyncedSize, and no
// ledger.archive (its directory entry never reached the disk).
func TestArchiveHostileCreationNotDirSynced(t *testing.T) {
	// A home of the previous version: a finished request in ledger.db, no
	// archive; ledger.db's name has long been durable.
	dir := t.TempDir()
	exp := time.Now().Add(time.Hour)
	e := normalize(testEntry("a/1", exp))
	e.State, e.FirstSeen, e.Updated = StateDone, time.Now(), time.Now()
	e.History = []Transition{{State: StateDone, At: e.Updated}}
	e = normalize(e)
	val, err := encodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	old := respSet(formatKey, "1") + respSet(entryPrefix+e.Key, string(val))
	if err := os.WriteFile(dbPath(dir), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	// The first Open of this version creates ledger.archive (no syncDir),
	// appends and fsyncs the record, then deletes it from ledger.db and
	// fsyncs that.
	l := mustOpen(t, dir)
	synced := l.SyncedSize()
	crashed := t.TempDir()
	if err := os.WriteFile(dbPath(crashed), readFile(t, dbPath(dir))[:synced], 0o600); err != nil {
		t.Fatal(err)
	}
	// Power cut here, had the archive's name not been fsynced (it is
	// now), or a backup that copied ledger.db alone: ledger.db records
	// the archive, so a missing one is damage, never an empty start.
	mustClose(t, l)
	if _, err := Open(crashed); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("ledger.db without its archive: %v; want ErrDamaged (missing)", err)
	}
	if _, err := Snapshot(crashed); !errors.Is(err, ErrDamaged) {
		t.Fatalf("snapshot of ledger.db without its archive: %v; want ErrDamaged", err)
	}
	rep, err := Repair(crashed)
	if err != nil || rep.Archive == nil || !rep.Archive.Damaged || !strings.Contains(rep.Archive.Problem, "missing") {
		t.Fatalf("repair: %+v (archive %+v), %v", rep, rep.Archive, err)
	}
	l2 := mustOpen(t, crashed) // loadable again; the host's repair then lists what the audit log knows
	mustClose(t, l2)
}

// Found: a power cut during a move's multi-megabyte append (one write(2)
// of up to 4,096 records, then fsync) can persist a later page of it and
// not an earlier one: the archive ends in NULs followed by record bytes.
// Those records were never deleted from ledger.db (that happens after
// the fsync), so cutting them is safe. Open refuses it all the same
// (ErrDamaged): a cut made without a word past a recorded length hid
// lost records in the second red team's attacks, so the operator runs
// `bridge ledger repair`, which cuts there and loses nothing.
func TestArchiveHostilePowerCutInsideABigAppendRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	done(t, l, "a/1", exp)
	mustClose(t, l)
	whole := readFile(t, archivePath(dir))
	// The interrupted move: records a/2.. appended after the whole file,
	// its first page lost (NULs), a later page on disk.
	l = mustOpen(t, dir)
	for i := 2; i < 40; i++ {
		done(t, l, fmt.Sprintf("a/%02d", i), exp)
	}
	dbAfter := readFile(t, dbPath(dir))[:l.SyncedSize()]
	l.Close()
	batch := readFile(t, archivePath(dir))[len(whole):]
	if len(batch) < 8192 {
		t.Fatalf("batch of %d bytes", len(batch))
	}
	crashed := append(bytes.Clone(whole), make([]byte, 4096)...)
	crashed = append(crashed, batch[4096:8192]...)
	crashed = append(crashed, make([]byte, len(batch)-8192)...)
	cdir := t.TempDir()
	// ledger.db as of before the move's delete: the records are all there.
	if err := os.WriteFile(dbPath(cdir), dbAfter, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(archivePath(cdir), crashed, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(cdir); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Open after a power cut inside an append that never returned: %v; want ErrDamaged", err)
	}
	if rep, err := Repair(cdir); err != nil || !rep.Repaired {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
	l, err := Open(cdir)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, l)
	if all, err := l.List(nil); err != nil || len(all) != 39 {
		t.Fatalf("list: %d, %v", len(all), err)
	}
}

// Found: one bad record in the archive (a flipped byte its CRC catches)
// makes Repair drop every record after it, though each of them is whole,
// framed and CRC-checked, and none is in ledger.db any more: the finished
// ids archived later are forgotten, and a replay is admitted as new.
func TestArchiveHostileRepairDropsEverythingAfterOneBadRecord(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	for i := range 10 {
		done(t, l, fmt.Sprintf("a/%d", i), exp)
	}
	mustClose(t, l)
	arch := readFile(t, archivePath(dir))
	i := bytes.Index(arch, []byte(`{"v":1,"key":"a/1"`))
	arch[i+30] ^= 0x01 // one bit, inside a/1's record
	if err := os.WriteFile(archivePath(dir), arch, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := Repair(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("repair: archive entries kept %d, bytes dropped %d", rep.Archive.Entries, rep.Archive.BytesDropped)
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	var keys []string
	for i := range 10 {
		keys = append(keys, fmt.Sprintf("a/%d", i))
	}
	if lost := admittedAnew(t, l, exp, keys...); len(lost) > 1 {
		t.Errorf("after one flipped bit in a/1, %d finished ids admitted as new: %v", len(lost), lost)
	}
}

// Found: `del` commands carry no CRC and a del of a key the index does
// not hold is accepted silently, so the damage the CRC was added for
// (a changed byte, framing intact) goes unnoticed in a del: a record is
// dropped at Open without ErrDamaged, and a collected one comes back.
func TestArchiveHostileDelHasNoCRC(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	past := time.Now().Add(-time.Hour)
	for _, k := range []string{"a/1", "a/2", "a/3"} {
		done(t, l, k, past)
	}
	mustClose(t, l)
	l = mustOpen(t, dir)
	if ok, err := l.Forget("a/1", time.Now(), 0); err != nil || !ok {
		t.Fatal(ok, err)
	}
	mustClose(t, l)
	arch := readFile(t, archivePath(dir))
	i := bytes.LastIndex(arch, []byte("del\r\n$5\r\nr/a/1"))
	arch[i+len("del\r\n$5\r\nr/a/")] = '2' // one byte: del r/a/1 → del r/a/2
	if err := os.WriteFile(archivePath(dir), arch, 0o600); err != nil {
		t.Fatal(err)
	}
	// The del's CRC no longer matches: refused (ErrDamaged). Were it
	// opened, a/2 must not have been dropped by it.
	l = openUnlessDamaged(t, dir)
	if l == nil {
		return
	}
	defer mustClose(t, l)
	if _, err := l.Get("a/2"); err != nil {
		t.Errorf("a damaged del dropped a/2: %v", err)
	}
	if n, err := l.GC(time.Now(), 0); err != nil || n != 3 {
		t.Errorf("gc after the cut: %d, %v; want all three collectable", n, err)
	}
}

// Found (minor): the index clamps times to int64 nanoseconds (1678-2262),
// so Settled answers differently for an archived entry than for the same
// entry in buntdb when the times are outside that range.
func TestArchiveHostileSettledClampDiffers(t *testing.T) {
	lowArchiveEvery(t, 1<<30)
	dir := t.TempDir()
	l := mustOpen(t, dir)
	defer mustClose(t, l)
	e := testEntry("a/1", time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC))
	e.State = StateRejected
	mustAdmit(t, l, e)
	query := func() int {
		got, err := l.Settled(time.Time{}, time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	before := query()
	l.mu.RLock()
	if _, err := l.move(); err != nil {
		t.Fatal(err)
	}
	l.mu.RUnlock()
	if after := query(); after != before {
		t.Errorf("Settled(expires before 3000) of an entry expiring in 2500: %d in buntdb, %d archived", before, after)
	}
}

// Found (minor): Stats.ArchiveError is never cleared: after a later move
// succeeds, status and doctor still report the old failure.
func TestArchiveHostileErrorSticks(t *testing.T) {
	lowArchiveEvery(t, 2)
	dir := t.TempDir()
	l := mustOpen(t, dir)
	defer mustClose(t, l)
	armed := failArchiveSyncOnce(t)
	armed.Store(true)
	exp := time.Now().Add(time.Hour)
	done(t, l, "a/1", exp)
	done(t, l, "a/2", exp)
	for l.moving.Load() || func() bool { st, _ := l.Stats(); return st.ArchiveError == "" }() {
		time.Sleep(time.Millisecond)
	}
	done(t, l, "a/3", exp)
	done(t, l, "a/4", exp)
	waitArchived(t, l, 4)
	if st, _ := l.Stats(); st.ArchiveError != "" {
		t.Errorf("every entry archived (%d), and Stats still says: %s", st.Archived, st.ArchiveError)
	}
}

// Found: Open fails whenever its move fails, though a failed move loses
// nothing (the entries stay in buntdb, as the background move shows). On
// a full disk (or any transient archive I/O error) a daemon whose last
// Close could not move its finished entries cannot start at all.
func TestArchiveHostileOpenRefusesWhenTheMoveFails(t *testing.T) {
	lowArchiveEvery(t, 1<<30)
	dir := t.TempDir()
	l := mustOpen(t, dir)
	done(t, l, "a/1", time.Now().Add(time.Hour))
	// The disk is full: the archive append fails (here its fsync; ENOSPC
	// from the write takes the same path). Close reports it and the
	// entry stays in ledger.db.
	armed := failArchiveSyncOnce(t)
	armed.Store(true)
	if err := l.Close(); err == nil {
		t.Fatal("Close did not report the failed move")
	}
	armed.Store(true) // still full at the next start
	l, err := Open(dir)
	if err != nil {
		t.Fatalf("Open with a finished entry left in ledger.db and a full disk: %v", err)
	}
	mustClose(t, l)
}

// Held up: Snapshot beside a ledger that moves every 8 terminal writes
// lists every entry finished before it started, once.
func TestArchiveHostileSnapshotBesideMoves(t *testing.T) {
	lowArchiveEvery(t, 8)
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	var finished atomic.Int64
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("a/%06d", i)
			if _, _, err := l.Admit(testEntry(k, exp)); err != nil {
				errc <- err
				return
			}
			for _, s := range []State{StateClaimed, StateRunning, StateDone} {
				if _, err := l.Transition(k, []State{prev(s)}, s, nil); err != nil {
					errc <- err
					return
				}
			}
			finished.Store(int64(i + 1))
		}
	}()
	deadline := time.Now().Add(4 * time.Second)
	snaps := 0
	for time.Now().Before(deadline) {
		n := int(finished.Load())
		snap, err := Snapshot(dir)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for i, e := range snap {
			if seen[e.Key] || (i > 0 && snap[i-1].Key >= e.Key) {
				t.Fatalf("snapshot lists %s twice or out of order", e.Key)
			}
			seen[e.Key] = true
		}
		for i := range n {
			if k := fmt.Sprintf("a/%06d", i); !seen[k] {
				t.Fatalf("snapshot %d misses %s (finished before it started)", snaps, k)
			}
		}
		snaps++
	}
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	st, _ := l.Stats()
	t.Logf("%d snapshots, %d entries, %d archived", snaps, finished.Load(), st.Archived)
	mustClose(t, l)
}

// Held up: moves, GC, Forget, reads and Close together (run with -race):
// no deadlock, and nothing collected comes back.
func TestArchiveHostileEverythingAtOnce(t *testing.T) {
	lowArchiveEvery(t, 4)
	dir := t.TempDir()
	l := mustOpen(t, dir)
	past := time.Now().Add(-time.Hour)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var made atomic.Int64
	fail := func(err error) { t.Error(err) }
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("a/%06d", i)
			if _, _, err := l.Admit(testEntry(k, past)); err != nil {
				fail(err)
				return
			}
			for _, s := range []State{StateClaimed, StateRunning, StateDone} {
				if _, err := l.Transition(k, []State{prev(s)}, s, nil); err != nil {
					fail(err)
					return
				}
			}
			made.Store(int64(i + 1))
		}
	})
	gone := sync.Map{}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := made.Load()
			if n > 0 {
				k := fmt.Sprintf("a/%06d", time.Now().UnixNano()%n)
				if ok, err := l.Forget(k, time.Now(), 0); err != nil {
					fail(err)
					return
				} else if ok {
					gone.Store(k, true)
				}
			}
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := l.GC(time.Now().Add(-2*time.Hour), 0); err != nil { // collects nothing: expiry is past-1h
				fail(err)
				return
			}
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := l.List(nil); err != nil {
				fail(err)
				return
			}
			if _, err := l.Settled(time.Now(), time.Now(), nil); err != nil {
				fail(err)
				return
			}
			if _, err := l.Stats(); err != nil {
				fail(err)
				return
			}
		}
	})
	time.Sleep(3 * time.Second)
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("deadlock")
	}
	mustClose(t, l)
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	n := 0
	gone.Range(func(k, _ any) bool {
		n++
		if _, err := l.Get(k.(string)); !errors.Is(err, ErrNotFound) {
			t.Errorf("forgotten %s is back: %v", k, err)
		}
		return true
	})
	all, _ := l.List(nil)
	t.Logf("%d made, %d forgotten, %d left", made.Load(), n, len(all))
	if int64(len(all)+n) != made.Load() {
		t.Errorf("%d made, %d forgotten, %d left", made.Load(), n, len(all))
	}
}

// Found (low): compact() copies each record and writes a fresh CRC of
// whatever it read, without checking the old one: damage that reached
// the file after Open checked it is laundered into a record with a valid
// CRC, and no later Open can see it (Open checks only key, state, times).
func TestArchiveHostileCompactionLaundersDamage(t *testing.T) {
	old := closeCompactMin
	closeCompactMin = 0
	t.Cleanup(func() { closeCompactMin = old })
	dir := t.TempDir()
	l := mustOpen(t, dir)
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	done(t, l, "a/1", future)
	for i := range 5 {
		done(t, l, fmt.Sprintf("b/%d", i), past)
	}
	mustClose(t, l)
	l = mustOpen(t, dir) // every CRC checked here
	// Bit rot in a/1's manifest hash, after Open checked it.
	arch := readFile(t, archivePath(dir))
	i := bytes.Index(arch, []byte(`"manifest_sha256":"`)) + len(`"manifest_sha256":"`) + 5
	arch[i] = '7'
	if err := os.WriteFile(archivePath(dir), arch, 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := l.GC(time.Now(), 0); err != nil || n != 5 {
		t.Fatal(n, err)
	}
	// Mostly dropped entries: Close compacts, and finds the damage
	// instead of writing a fresh CRC over it; the file stays as it was.
	if err := l.Close(); err == nil || !strings.Contains(err.Error(), "CRC") {
		t.Fatalf("close over a damaged record: %v; want its CRC named", err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrDamaged) {
		t.Fatalf("open after the refused compaction: %v; want ErrDamaged", err)
	}
}

// openUnlessDamaged opens the ledger in dir, or returns nil if Open refused
// it as damaged (what the red team's tests accept as a right answer to the
// damage they make); any other error fails the test.
func openUnlessDamaged(t *testing.T, dir string) *Ledger {
	t.Helper()
	l, err := Open(dir)
	if errors.Is(err, ErrDamaged) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// admittedAnew admits each key again and returns those the ledger took for
// new (or failed on): finished ids it lost.
func admittedAnew(t *testing.T, l *Ledger, exp time.Time, keys ...string) []string {
	t.Helper()
	var lost []string
	for _, k := range keys {
		if _, created, err := l.Admit(testEntry(k, exp)); err != nil || created {
			lost = append(lost, k)
		}
	}
	return lost
}
