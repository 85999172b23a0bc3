package ledger

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"

	"github.com/tidwall/buntdb"
)

// The file under the ledger: checked and cut back to its last complete
// record when it opens, rewritten (compacted) with fsyncs of its own.

// prepareFile opens (or creates, 0600) the database file, checks every byte
// of it and cuts a torn tail. It returns the descriptor that the ledger
// keeps for fsync and how many bytes it cut.
func prepareFile(path string) (f *os.File, dropped int64, err error) {
	// A compaction or repair that crashed before its rename; with the lock
	// held nobody else can be writing it.
	for _, tmp := range []string{path + ".tmp", path + checkedSuffix + ".tmp"} {
		if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, 0, fmt.Errorf("open ledger %s: %w", path, err)
		}
	}
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("open ledger: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	if runtime.GOOS != "windows" {
		fi, err := f.Stat()
		if err != nil {
			return nil, 0, fmt.Errorf("open ledger %s: %w", path, err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := f.Chmod(0o600); err != nil {
				return nil, 0, fmt.Errorf("open ledger %s: %w", path, err)
			}
		}
	}
	data, err := readAll(f)
	if err != nil {
		return nil, 0, fmt.Errorf("open ledger %s: %w", path, err)
	}
	checked := checkedPrefix(path, data)
	s := scanLog(data, checked)
	if s.bad != nil || s.gapAt >= 0 {
		return nil, 0, damagedError(path, s.problem())
	}
	if s.torn {
		// A write(2) that a crash interrupted: its transaction never
		// returned to the caller, so no effect depends on it.
		if err := f.Truncate(s.end); err != nil {
			return nil, 0, fmt.Errorf("open ledger %s: cut torn tail: %w", path, err)
		}
		if err := syncFile(f); err != nil {
			return nil, 0, fmt.Errorf("open ledger %s: cut torn tail: %w", path, err)
		}
		dropped = s.size - s.end
	}
	live := liveSize(s)
	if s.end > compactMinSize && s.end > compactRatio*live {
		if err := f.Close(); err != nil {
			return nil, 0, fmt.Errorf("open ledger %s: %w", path, err)
		}
		if err := compact(path, s); err != nil {
			return nil, 0, fmt.Errorf("open ledger %s: compact: %w", path, err)
		}
		if f, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
			return nil, 0, fmt.Errorf("open ledger %s: %w", path, err)
		}
	} else if s.end > checked {
		// Every record up to s.end was just checked (or vouched for):
		// the next Open need only check what is appended after it.
		writeChecked(path, data[:s.end])
	}
	return f, dropped, nil
}

// liveSize is the size of a file holding only the live records.
func liveSize(s *logScan) int64 {
	var n int64
	for k, v := range s.live {
		n += respSetLen(len(k), len(v))
	}
	return n
}

// respSetLen is len(respSet(key, val)) for a key and value of those
// lengths, without building it.
func respSetLen(key, val int) int64 {
	digits := func(n int) int { return len(strconv.Itoa(n)) }
	return int64(len("*3\r\n$3\r\nset\r\n$") + digits(key) + 2 + key + 2 + 1 + digits(val) + 2 + val + 2)
}

func respSet(key, val string) string {
	return fmt.Sprintf("*3\r\n$3\r\nset\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, len(val), val)
}

// compact rewrites the file with one `set` per live key, in key order, the
// way buntdb's Shrink would, but safely: the new file is complete and
// fsynced before it is renamed over the old one, and the rename is fsynced.
// A crash at any point leaves either the old or the new file, both whole.
// The caller holds the lock.
func compact(path string, s *logScan) error {
	live := make(map[string]string, len(s.live))
	for k, v := range s.live {
		live[k] = string(v)
	}
	return compactLive(path, live)
}

func damagedError(path, problem string) error {
	return &Error{
		Op:   "open",
		Path: path,
		Err:  fmt.Errorf("%w: %s", ErrDamaged, problem),
		Hint: "with `bridge serve` stopped, run `bridge ledger repair`; it keeps a copy of the damaged file",
	}
}

// checkDirMode refuses a directory that others may write to: they could
// replace the ledger and re-enable replays.
func checkDirMode(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("open ledger: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("open ledger: %s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("open ledger: directory %s is writable by group or others (mode %#o); chmod 700 it", dir, perm)
	}
	return nil
}

// compactable returns the live records if the file is worth compacting,
// else nil. The caller holds l.mu for writing: nothing changes meanwhile.
func (l *Ledger) compactable() map[string]string {
	fi, err := l.dbf.Stat()
	if err != nil || fi.Size() < closeCompactMin {
		return nil
	}
	live := map[string]string{}
	var n int64
	err = l.db.View(func(tx *buntdb.Tx) error {
		return tx.AscendKeys("*", func(k, v string) bool {
			live[k] = v
			n += respSetLen(len(k), len(v))
			return true
		})
	})
	if err != nil || fi.Size() <= closeCompactRatio*n {
		return nil
	}
	return live
}

// compactLive rewrites the file with the given records, as compact does.
func compactLive(path string, live map[string]string) error {
	keys := make([]string, 0, len(live))
	for k := range live {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var buf []byte
	for _, k := range keys {
		buf = append(buf, respSet(k, live[k])...)
	}
	if err := replaceFile(path, buf); err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return err
	}
	// Every record written was live in a checked file or in the database
	// (written by this package): vouch for them, so the next Open skips
	// their checks.
	writeChecked(path, buf)
	return nil
}
