package ledger

// What a second red team tried against the archive (after 333396b); each
// "Found" test failed on that commit and guards its fix.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// readmitRunning forgets a/1 (archived, expired), admits the same id
// again with another manifest and takes it to running: a legitimate new
// run after the only thing that lets an id run again. It returns the
// ledger, still open.
func readmitRunning(t *testing.T, dir string) *Ledger {
	t.Helper()
	past := time.Now().Add(-time.Hour)
	l := mustOpen(t, dir)
	done(t, l, "a/1", past)
	mustClose(t, l) // a/1 to the archive
	l = mustOpen(t, dir)
	if ok, err := l.Forget("a/1", time.Now(), 0); err != nil || !ok {
		t.Fatalf("forget: %v %v", ok, err)
	}
	e := testEntry("a/1", time.Now().Add(time.Hour))
	e.ManifestSHA256 = fmt.Sprintf("%064x", 99) // a new request
	mustAdmit(t, l, e)
	mustTransition(t, l, "a/1", StateSeen, StateClaimed)
	mustTransition(t, l, "a/1", StateClaimed, StateRunning)
	return l
}

// checkStillRunning: after a reopen a/1 must be the new run, in flight.
func checkStillRunning(t *testing.T, l *Ledger) {
	t.Helper()
	e, err := l.Get("a/1")
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := l.InFlight()
	if e.State != StateRunning || e.ManifestSHA256 != fmt.Sprintf("%064x", 99) || len(inf) != 1 {
		t.Errorf("the re-admitted, running a/1 is now %s with manifest %.8s…, in flight: %d; "+
			"the archive's old terminal copy replaced the live record", e.State, e.ManifestSHA256, len(inf))
	}
}

// flipDelCRC changes one hex digit of the CRC of the last `del r/a/1`.
func flipDelCRC(t *testing.T, dir string) {
	t.Helper()
	arch := readFile(t, archivePath(dir))
	i := bytes.LastIndex(arch, []byte("del\r\n$5\r\nr/a/1\r\n$8\r\n"))
	if i < 0 {
		t.Fatal("no del of a/1 in the archive")
	}
	j := i + len("del\r\n$5\r\nr/a/1\r\n$8\r\n")
	if arch[j] == '0' {
		arch[j] = '1'
	} else {
		arch[j] = '0'
	}
	if err := os.WriteFile(archivePath(dir), arch, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Found (1a): one damaged byte in a `del` past the recorded length is cut
// silently at Open ("deletions whose loss only brings back collectable
// entries"), but the id was admitted again after the delete: the archive's
// old terminal copy comes back and, by Open's "the archive's record stands
// over a non-terminal one", the live, running entry is deleted from
// ledger.db. The new run is no longer in flight (no recovery), looks
// finished with the old manifest, and its own manifest is now a conflict.
func TestArchiveHostile2LenientDelCutErasesReadmittedRun(t *testing.T) {
	dir := t.TempDir()
	l := readmitRunning(t, dir)
	mustClose(t, l) // nothing terminal: no move, the del stays past m/archive
	flipDelCRC(t, dir)
	l, err := Open(dir)
	if errors.Is(err, ErrDamaged) {
		return // refusing is fine
	}
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, l)
	checkStillRunning(t, l)
}

// Found (1b): the same through the documented procedure. The del is
// inside the recorded length (a later move vouched for it), so Open
// refuses; Repair drops the bad del alone, Snapshot (what the host's
// repair compares with the audit log) shows a/1 running, and the next
// Open erases the running entry in favour of the archive's old one.
func TestArchiveHostile2RepairedDelErasesReadmittedRun(t *testing.T) {
	dir := t.TempDir()
	l := readmitRunning(t, dir)
	done(t, l, "b/1", time.Now().Add(time.Hour))
	mustClose(t, l) // moves b/1: the length now covers the del
	flipDelCRC(t, dir)
	if _, err := Open(dir); !errors.Is(err, ErrDamaged) {
		t.Fatalf("open: %v; want ErrDamaged", err)
	}
	if _, err := Repair(dir); err != nil {
		t.Fatal(err)
	}
	snap, err := Snapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap {
		if e.Key == "a/1" {
			t.Logf("snapshot after repair (the host's repair reads this): a/1 %s", e.State)
		}
	}
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	checkStillRunning(t, l)
}

// Found (2): a compaction records its new, shorter length before its
// rename. A crash between the two leaves the old file with a recorded
// length that ends long before it: every record past that point, though
// vouched for (and deleted from ledger.db) long ago, is now in the lenient
// region, and one flipped byte there makes Open cut them all silently.
// The finished ids are admitted as new. Without the crash the same flip
// is ErrDamaged.
func TestArchiveHostile2CompactionCrashWidensLeniency(t *testing.T) {
	old := closeCompactMin
	closeCompactMin = 0
	t.Cleanup(func() { closeCompactMin = old })
	dir := t.TempDir()
	l := mustOpen(t, dir)
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	for i := range 20 {
		done(t, l, fmt.Sprintf("a/%02d", i), past) // collected below
	}
	for i := range 5 {
		done(t, l, fmt.Sprintf("z/%d", i), future) // kept: at the end of the file
	}
	mustClose(t, l) // all to the archive (few dels: no compaction yet)
	l = mustOpen(t, dir)
	if n, err := l.GC(time.Now(), 0); err != nil || n != 20 {
		t.Fatalf("gc: %d %v", n, err)
	}
	before := readFile(t, archivePath(dir)) // the file as the compaction finds it
	mustClose(t, l)                         // compaction: new length recorded, then rename
	after := readFile(t, archivePath(dir))
	if len(after) >= len(before) {
		t.Fatalf("no compaction: %d → %d", len(before), len(after))
	}
	// The power cut: the rename did not reach the disk, the recorded
	// length (fsynced before it) did. And one flipped bit in z/3's record.
	crashed := bytes.Clone(before)
	i := bytes.Index(crashed, []byte(`{"v":1,"key":"z/3"`))
	crashed[i+40] ^= 0x01
	if err := os.WriteFile(archivePath(dir), crashed, 0o600); err != nil {
		t.Fatal(err)
	}
	l = openUnlessDamaged(t, dir)
	if l == nil {
		return
	}
	defer mustClose(t, l)
	if lost := admittedAnew(t, l, future, "z/0", "z/1", "z/2", "z/3", "z/4"); len(lost) > 0 {
		t.Errorf("after a crash inside a compaction and one flipped bit, finished ids admitted as new, Open said nothing: %v", lost)
	}
}

// Found (3): a move deletes its records from buntdb and records the new
// length in ONE buntdb transaction, and buntdb writes a transaction's
// commands in map order: a power cut inside that write(2) (not fsynced
// yet) can keep the `del`s and lose `set m/archive`. The moved records
// then sit past the recorded length although ledger.db no longer holds
// them ("a move whose records buntdb still holds" does not hold), and a
// flipped byte there makes Open drop them silently.
func TestArchiveHostile2TornMoveCommitKeepsDelsNotLength(t *testing.T) {
	lowArchiveEvery(t, 1<<30)
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	done(t, l, "a/1", exp)
	done(t, l, "a/2", exp)
	db0 := len(readFile(t, dbPath(dir)))
	if _, err := l.move(); err != nil { // what the background move or Close does
		t.Fatal(err)
	}
	db := readFile(t, dbPath(dir))
	commit := db[db0:]
	// The move's commit, in the order a crash may have kept a prefix of:
	// the dels, without the length (buntdb iterates a map).
	var kept []byte
	for off := 0; off < len(commit); {
		args, next, err := parseCommand(commit, off)
		if err != nil {
			t.Fatal(err)
		}
		if string(args[0]) == "del" {
			kept = append(kept, commit[off:next]...)
		}
		off = next
	}
	l.Close()
	crashed := append(bytes.Clone(db[:db0]), kept...)
	if err := os.WriteFile(dbPath(dir), crashed, 0o600); err != nil {
		t.Fatal(err)
	}
	s := scanLog(crashed, 0)
	vouched, _ := strconv.ParseInt(string(s.live[archiveKey]), 10, 64)
	arch := readFile(t, archivePath(dir))
	i := bytes.Index(arch, []byte(`{"v":1,"key":"a/1"`))
	if int64(i) < vouched {
		t.Fatalf("a/1 at %d, recorded length %d", i, vouched)
	}
	arch[i+40] ^= 0x01 // one bit in a/1's archived record
	if err := os.WriteFile(archivePath(dir), arch, 0o600); err != nil {
		t.Fatal(err)
	}
	l = openUnlessDamaged(t, dir)
	if l == nil {
		return
	}
	defer mustClose(t, l)
	if lost := admittedAnew(t, l, exp, "a/1", "a/2"); len(lost) > 0 {
		t.Errorf("finished ids admitted as new after a torn move commit and one flipped bit, Open said nothing: %v", lost)
	}
}

// Finding 4 (low): the archive's compaction at Open is an optimisation,
// but its failure (here the new file's fsync, as ENOSPC or EIO would)
// fails Open: the daemon cannot start, though the ledger is whole and a
// failed move at Open is tolerated. Repair finds nothing to mend.
func TestArchiveHostile2FailedOpenCompactionRefusesStart(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	for i := range 20 {
		done(t, l, fmt.Sprintf("a/%02d", i), past)
	}
	done(t, l, "z/1", future)
	mustClose(t, l)
	l = mustOpen(t, dir)
	if n, err := l.GC(time.Now(), 0); err != nil || n != 20 {
		t.Fatalf("gc: %d %v", n, err)
	}
	mustClose(t, l)
	oldMin, oldRatio := compactMinSize, compactRatio
	compactMinSize, compactRatio = 0, 2
	t.Cleanup(func() { compactMinSize, compactRatio = oldMin, oldRatio })
	syncFile = func(f *os.File) error {
		if f.Name() == archivePath(dir)+".tmp" {
			return errors.New("injected ENOSPC")
		}
		return f.Sync()
	}
	t.Cleanup(func() { syncFile = (*os.File).Sync })
	l, err := Open(dir)
	if err != nil {
		rep, rerr := Repair(dir)
		t.Errorf("Open of a whole ledger fails because its optional compaction failed: %v (repair: repaired %v, %v)", err, rep.Repaired, rerr)
		return
	}
	mustClose(t, l)
}

// Control for finding 2 (passes): the same flipped bit without the crash
// (the compacted file in place) is ErrDamaged, as it should be.
func TestArchiveHostile2ControlFlipWithoutCrashIsDamage(t *testing.T) {
	old := closeCompactMin
	closeCompactMin = 0
	t.Cleanup(func() { closeCompactMin = old })
	dir := t.TempDir()
	l := mustOpen(t, dir)
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	for i := range 20 {
		done(t, l, fmt.Sprintf("a/%02d", i), past)
	}
	for i := range 5 {
		done(t, l, fmt.Sprintf("z/%d", i), future)
	}
	mustClose(t, l)
	l = mustOpen(t, dir)
	if n, err := l.GC(time.Now(), 0); err != nil || n != 20 {
		t.Fatalf("gc: %d %v", n, err)
	}
	mustClose(t, l)
	arch := readFile(t, archivePath(dir))
	i := bytes.Index(arch, []byte(`{"v":1,"key":"z/3"`))
	arch[i+40] ^= 0x01
	if err := os.WriteFile(archivePath(dir), arch, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrDamaged) {
		t.Fatalf("open: %v; want ErrDamaged", err)
	}
}
