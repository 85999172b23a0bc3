package ledger

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// baseLedger writes a small valid ledger and returns its entries and bytes.
func baseLedger(t *testing.T, dir string) ([]Entry, []byte) {
	t.Helper()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	for _, k := range []string{"a/1", "a/2", "a/3"} {
		mustAdmit(t, l, testEntry(k, exp))
	}
	mustTransition(t, l, "a/2", StateSeen, StateClaimed)
	mustTransition(t, l, "a/2", StateClaimed, StateRunning)
	all, err := l.List(nil)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	return all, readFile(t, dbPath(dir))
}

// validRecord returns the key and value of a fourth, valid entry.
func validRecord(t *testing.T) (string, string) {
	t.Helper()
	e := normalize(testEntry("b/4", time.Now().Add(time.Hour)))
	e.State, e.FirstSeen, e.Updated = StateSeen, time.Now(), time.Now()
	e.History = []Transition{{State: StateSeen, At: e.Updated}}
	e = normalize(e)
	val, err := encodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	return entryPrefix + e.Key, string(val)
}

// Torn tails a crash can leave are cut by Open; anything else is refused
// with ErrDamaged, the file untouched, until Repair.
func TestTornTail(t *testing.T) {
	key, val := validRecord(t)
	rec := respSet(key, val)
	nuls := strings.Repeat("\x00", 4096)
	torn := []struct {
		name string
		tail string
	}{
		{"cut in the count line", "*"},
		{"cut in a length line", "*3\r\n$3\r\nset\r\n$"},
		{"cut in a value", rec[:len(rec)*2/3]},
		{"cut before the final LF", rec[:len(rec)-1]},
		{"trailing NUL bytes", nuls},
		{"torn record then NULs", rec[:40] + nuls},
	}
	for _, c := range torn {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			want, base := baseLedger(t, dir)
			appendFile(t, dbPath(dir), []byte(c.tail))
			l := mustOpen(t, dir)
			got, err := l.List(nil)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("entries after torn tail: %v %+v", err, got)
			}
			st, _ := l.Stats()
			if st.TailDropped != int64(len(c.tail)) {
				t.Errorf("TailDropped = %d, want %d", st.TailDropped, len(c.tail))
			}
			if !bytes.Equal(readFile(t, dbPath(dir)), base) {
				t.Errorf("file not cut back to the last complete record")
			}
			// The next write lands right after the last good record.
			mustAdmit(t, l, testEntry("c/5", time.Now().Add(time.Hour)))
			mustClose(t, l)
			l = mustOpen(t, dir)
			if all, _ := l.List(nil); len(all) != 4 {
				t.Errorf("%d entries after a write and reopen, want 4", len(all))
			}
			mustClose(t, l)
		})
	}

	ttlRec := strings.Replace(rec, "*3\r\n", "*5\r\n", 1) + "$2\r\nae\r\n$10\r\n9999999999\r\n"
	nonCanonical := respSet(key, strings.Replace(val, `{"v":1,`, `{"v":1 ,`, 1))
	damaged := []struct {
		name string
		tail string
		kept int // entries after Repair
	}{
		{"garbage line", "hello world\r\n", 3},
		{"garbage without newline", "xyz", 3},
		{"wrong count line", "*3x\r\n", 3},
		{"unknown command", "*1\r\n$4\r\nping\r\n", 3},
		{"expiring record", ttlRec, 3},
		{"non-canonical record", nonCanonical, 3},
		{"record under a foreign key", respSet("x/1", "{}"), 3},
		{"bad length then valid record", "*3\r\n$3\r\nset\r\n$1\r\nab\r\n" + rec, 3},
		{"NULs followed by a record", "\x00\x00\x00" + rec, 4},
	}
	for _, c := range damaged {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			want, base := baseLedger(t, dir)
			appendFile(t, dbPath(dir), []byte(c.tail))
			bad := readFile(t, dbPath(dir))

			_, err := Open(dir)
			var le *Error
			if !errors.Is(err, ErrDamaged) || !errors.As(err, &le) || le.Path != dbPath(dir) || !strings.Contains(le.Hint, "repair") {
				t.Fatalf("Open = %v, want ErrDamaged naming the file with a hint", err)
			}
			if !bytes.Equal(readFile(t, dbPath(dir)), bad) {
				t.Fatal("Open changed a damaged file")
			}
			// A failed Open released the lock.
			rep, err := Repair(dir)
			if err != nil {
				t.Fatalf("Repair: %v", err)
			}
			if !rep.Damaged || rep.Entries != c.kept || rep.BytesKept+rep.BytesDropped != int64(len(bad)) || rep.Problem == "" {
				t.Errorf("report %+v", rep)
			}
			if c.kept == 3 && (rep.BytesKept != int64(len(base)) || !bytes.Equal(readFile(t, dbPath(dir)), base)) {
				t.Errorf("repair kept %d bytes, want the %d of the valid prefix", rep.BytesKept, len(base))
			}
			if !bytes.Equal(readFile(t, rep.Backup), bad) || filepath.Dir(rep.Backup) != dir ||
				!strings.HasPrefix(filepath.Base(rep.Backup), "ledger.db.damaged-") {
				t.Errorf("backup %s does not hold the damaged file", rep.Backup)
			}
			l := mustOpen(t, dir)
			got, err := l.List(nil)
			if err != nil || len(got) != c.kept || !reflect.DeepEqual(got[:3], want) {
				t.Fatalf("after repair: %v %+v", err, got)
			}
			mustAdmit(t, l, testEntry("c/5", time.Now().Add(time.Hour)))
			mustClose(t, l)
			l = mustOpen(t, dir)
			if all, _ := l.List(nil); len(all) != c.kept+1 {
				t.Errorf("%d entries after a write and reopen, want %d", len(all), c.kept+1)
			}
			mustClose(t, l)
		})
	}
}

// Repair of a clean file changes nothing; a damaged middle loses the
// records after the damage but keeps those before.
func TestRepairCleanAndMidFile(t *testing.T) {
	dir := t.TempDir()
	_, base := baseLedger(t, dir)
	rep, err := Repair(dir)
	if err != nil || rep.Damaged || rep.Entries != 3 || rep.Backup != "" {
		t.Fatalf("Repair of a clean file = %+v, %v", rep, err)
	}
	if !bytes.Equal(readFile(t, dbPath(dir)), base) {
		t.Fatal("Repair changed a clean file")
	}
	if _, err := Repair(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Repair without a file: %v", err)
	}

	// Break the second record: its '*' becomes '#'.
	s := scanLog(base, 0)
	if len(s.cmds) < 3 {
		t.Fatalf("%d commands", len(s.cmds))
	}
	broken := bytes.Clone(base)
	broken[s.cmds[1].start] = '#'
	if err := os.WriteFile(dbPath(dir), broken, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Open of a file damaged in the middle: %v", err)
	}
	rep, err = Repair(dir)
	if err != nil || rep.BytesKept != s.cmds[1].start {
		t.Fatalf("Repair = %+v, %v; want %d bytes kept", rep, err, s.cmds[1].start)
	}
	l := mustOpen(t, dir)
	defer mustClose(t, l)
	if st, _ := l.Stats(); st.Total != rep.Entries {
		t.Errorf("report says %d entries, ledger has %d", rep.Entries, st.Total)
	}
}
