package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file reads the buntdb append-only file itself instead of trusting
// buntdb's loader: buntdb v1.3.0 accepts any garbage without a newline at
// the end as a "torn tail" and truncates it silently, and after NUL bytes
// followed by more records it positions its next write at a wrong offset
// (it does not count the NULs), overwriting good records. Both are refused
// here before buntdb sees the file.

// errTorn means the data ended inside a command whose bytes so far were a
// valid prefix: what an interrupted write(2) leaves behind.
var errTorn = errors.New("torn command")

type span struct{ start, end int64 }

// logScan is the result of parsing an append-only file.
type logScan struct {
	size  int64
	cmds  []span            // every complete, valid command, in file order
	end   int64             // offset just past the last valid command
	torn  bool              // the file ends in an incomplete command or NUL bytes after end
	gapAt int64             // offset of a NUL run followed by a valid command, or -1
	bad   error             // first invalid command (complete but wrong, or not a valid prefix)
	badAt int64             // its offset
	live  map[string][]byte // key → value after replaying cmds

	// deferred, when the scan leaves record checks for later (scanLog
	// checks them in parallel), holds every request record set.
	deferred    []keyVal
	deferChecks bool
	cur         int64 // offset of the command being applied
}

type keyVal struct {
	key string
	val []byte
	at  int64 // offset of its command
}

// clean reports whether Open can hand the file to buntdb unchanged.
func (s *logScan) clean() bool { return s.bad == nil && s.gapAt < 0 && !s.torn }

// entries counts the live request records.
func (s *logScan) entries() int {
	n := 0
	for k := range s.live {
		if strings.HasPrefix(k, entryPrefix) {
			n++
		}
	}
	return n
}

// problem describes what is wrong with a file that is not clean.
func (s *logScan) problem() string {
	switch {
	case s.bad != nil:
		return fmt.Sprintf("invalid record at offset %d: %v", s.badAt, s.bad)
	case s.gapAt >= 0:
		return fmt.Sprintf("NUL bytes at offset %d followed by further records", s.gapAt)
	case s.torn:
		return fmt.Sprintf("incomplete record or NUL bytes after offset %d", s.end)
	}
	return "no problem"
}

// scanLog parses data as a sequence of RESP commands, `*N\r\n` followed by N
// bulk strings `$len\r\nbytes\r\n`, exactly as buntdb writes them, and
// replays them. It stops at the first byte that is neither NUL, nor the start
// of a valid command.
//
// Checking a record (decode, re-encode, compare) is most of the cost, so it
// first scans with the checks left out and runs them on every core; only if
// one fails does it scan again in order, which finds the first bad record
// exactly as a sequential scan would. Records in the first checked bytes
// are not checked again: the caller knows them to be the ones a compaction
// wrote (checkedPrefix). Everything else about them still is.
func scanLog(data []byte, checked int64) *logScan {
	s := scanLogWith(data, true)
	i := sort.Search(len(s.deferred), func(i int) bool { return s.deferred[i].at >= checked })
	if recordsValid(s.deferred[i:]) {
		s.deferred = nil
		return s
	}
	return scanLogWith(data, false)
}

// recordsValid checks request records on all cores.
func recordsValid(recs []keyVal) bool {
	workers := min(runtime.NumCPU(), 1+len(recs)/1024)
	var bad atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(recs) && !bad.Load(); i += workers {
				if checkRecord(recs[i].key, recs[i].val) != nil {
					bad.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return !bad.Load()
}

// recordChecks counts checkRecord calls, for tests.
var recordChecks atomic.Int64

// checkRecord is the check of one request record under its key.
func checkRecord(key string, val []byte) error {
	recordChecks.Add(1)
	e, err := decodeEntry(val)
	if err != nil {
		return fmt.Errorf("record %q: %w", key, err)
	}
	if entryPrefix+e.Key != key {
		return fmt.Errorf("record %q holds key %q", key, e.Key)
	}
	return nil
}

func scanLogWith(data []byte, deferChecks bool) *logScan {
	s := &logScan{size: int64(len(data)), gapAt: -1, badAt: -1, live: map[string][]byte{}, deferChecks: deferChecks}
	off, nulStart := 0, -1
	for off < len(data) {
		if data[off] == 0 {
			// ext4 and others can leave a crashed append as a run of NULs.
			if nulStart < 0 {
				nulStart = off
			}
			off++
			continue
		}
		args, next, err := parseCommand(data, off)
		if err != nil && !errors.Is(err, errTorn) && paddedTorn(data, off) {
			err = errTorn
		}
		if err == nil {
			s.cur = int64(off)
			err = s.apply(args)
		}
		if errors.Is(err, errTorn) {
			s.torn = true
			return s
		}
		if err != nil {
			s.bad, s.badAt = err, int64(off)
			return s
		}
		if nulStart >= 0 && s.gapAt < 0 {
			s.gapAt = int64(nulStart)
		}
		nulStart = -1
		s.cmds = append(s.cmds, span{int64(off), int64(next)})
		s.end = int64(next)
		off = next
	}
	if nulStart >= 0 {
		s.torn = true
	}
	return s
}

// paddedTorn reports whether the command at off is a valid prefix followed
// only by NUL bytes up to the end of the file: a crash after the file size
// was extended but before all of the appended page reached the disk.
func paddedTorn(data []byte, off int) bool {
	end := len(data)
	for end > off && data[end-1] == 0 {
		end--
	}
	if end == len(data) {
		return false
	}
	_, _, err := parseCommand(data[:end], off)
	return errors.Is(err, errTorn)
}

// parseCommand parses one command starting at off. It returns errTorn if
// data ends before the command does and every byte so far fits the format.
func parseCommand(data []byte, off int) (args [][]byte, next int, err error) {
	n, i, err := readLength(data, off, '*')
	if err != nil {
		return nil, 0, err
	}
	if n < 1 || n > 5 {
		return nil, 0, fmt.Errorf("command with %d parts", n)
	}
	for range n {
		l, j, err := readLength(data, i, '$')
		if err != nil {
			return nil, 0, err
		}
		switch {
		case len(data) <= j+l:
			return nil, 0, errTorn
		case data[j+l] != '\r':
			return nil, 0, errors.New("bulk string not terminated by CRLF")
		case len(data) == j+l+1:
			return nil, 0, errTorn
		case data[j+l+1] != '\n':
			return nil, 0, errors.New("bulk string not terminated by CRLF")
		}
		args = append(args, data[j:j+l])
		i = j + l + 2
	}
	return args, i, nil
}

// readLength reads `<prefix><decimal>\r\n` at i. Leading zeros and signs are
// rejected: buntdb never writes them.
func readLength(data []byte, i int, prefix byte) (n, next int, err error) {
	if i >= len(data) {
		return 0, 0, errTorn
	}
	if data[i] != prefix {
		return 0, 0, fmt.Errorf("expected %q, found %q", prefix, data[i])
	}
	i++
	start := i
	for ; i < len(data) && data[i] >= '0' && data[i] <= '9'; i++ {
		if i-start >= 9 {
			return 0, 0, errors.New("length too large")
		}
		n = n*10 + int(data[i]-'0')
	}
	switch {
	case i == len(data):
		return 0, 0, errTorn
	case i == start:
		return 0, 0, fmt.Errorf("expected a digit after %q", prefix)
	case i-start > 1 && data[start] == '0':
		return 0, 0, errors.New("length with a leading zero")
	case data[i] != '\r':
		return 0, 0, fmt.Errorf("unexpected byte %q in length", data[i])
	case i+1 == len(data):
		return 0, 0, errTorn
	case data[i+1] != '\n':
		return 0, 0, errors.New("length not terminated by CRLF")
	}
	return n, i + 2, nil
}

// apply replays one command, accepting only what this package writes:
// `set` of a request record or the format marker without expiry, `del` of a
// request record, and buntdb's `flushdb`.
func (s *logScan) apply(args [][]byte) error {
	switch cmd := string(args[0]); {
	case cmd == "set" && len(args) == 3:
		key, val := string(args[1]), args[2]
		switch {
		case key == formatKey:
			if string(val) != fmt.Sprint(formatVersion) {
				return fmt.Errorf("unsupported ledger format %q", val)
			}
		case key == archiveKey:
			if _, err := parseLength(val); err != nil {
				return fmt.Errorf("archive length %q: %v", val, err)
			}
		case strings.HasPrefix(key, entryPrefix):
			if s.deferChecks {
				s.deferred = append(s.deferred, keyVal{key, val, s.cur})
			} else if err := checkRecord(key, val); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown key %q", key)
		}
		s.live[key] = val
	case cmd == "set" && len(args) == 5:
		// An expiring record: the ledger never writes one (buntdb #112
		// resurrects the previous value when it expires).
		return fmt.Errorf("record %q has an expiry", args[1])
	case cmd == "del" && len(args) == 2:
		if !strings.HasPrefix(string(args[1]), entryPrefix) {
			return fmt.Errorf("delete of unknown key %q", args[1])
		}
		delete(s.live, string(args[1]))
	case cmd == "flushdb" && len(args) == 1:
		clear(s.live)
	default:
		return fmt.Errorf("unknown command %q with %d arguments", cmd, len(args)-1)
	}
	return nil
}

// parseLength parses a decimal length as strconv.FormatInt writes it.
func parseLength(b []byte) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != string(b) {
		return 0, errors.New("not a length")
	}
	return n, nil
}

// RepairReport says what Repair did.
type RepairReport struct {
	Path         string `json:"path"`          // the ledger file
	Damaged      bool   `json:"damaged"`       // false: the file was clean and left untouched
	Problem      string `json:"problem"`       // what was wrong, with the offset
	Backup       string `json:"backup"`        // copy of the file as it was before the repair
	BytesKept    int64  `json:"bytes_kept"`    // size of the repaired file
	BytesDropped int64  `json:"bytes_dropped"` // bytes removed: the damaged tail, NUL runs
	Entries      int    `json:"entries"`       // request records in the repaired file

	// Archive is the repair of ledger.archive (the terminal entries kept
	// on disk only), if there is one.
	Archive *RepairReport `json:"archive,omitempty"`
	// Repaired: ledger.db or the archive was damaged and is repaired (the
	// fields above are ledger.db's).
	Repaired bool `json:"repaired"`
}

// Repair makes a damaged ledger file in dir loadable again. It takes the
// ledger lock (so it fails with ErrLocked while a daemon runs), copies the
// file to ledger.db.damaged-<unix seconds>, then keeps every complete, valid
// command before the first invalid byte and drops the rest. Usually that is
// a truncation; if NUL runs sit between valid commands the kept commands are
// written to a new file that replaces the old one. File and directory are
// fsynced. A clean file is left untouched (Damaged false).
func Repair(dir string) (rep RepairReport, err error) {
	rep.Path = filepath.Join(dir, dbFile)
	lk, err := acquireLock(dir)
	if err != nil {
		return rep, err
	}
	defer lk.release()
	if rep, err = repairDB(dir); err != nil {
		return rep, err
	}
	data, err := os.ReadFile(rep.Path)
	if err != nil {
		return rep, fmt.Errorf("repair ledger: %w", err)
	}
	rep.Archive, err = repairArchive(dir, vouchedLength(scanLog(data, 0).live))
	rep.Repaired = rep.Damaged || (rep.Archive != nil && rep.Archive.Damaged)
	if err == nil && rep.Archive != nil && rep.Archive.Damaged {
		// ledger.db must vouch for what the archive holds now, or the
		// next Open would find it shorter than recorded.
		err = appendVouch(rep.Path, rep.Archive.BytesKept)
	}
	return rep, err
}

// repairDB is Repair of ledger.db, with the lock held.
func repairDB(dir string) (rep RepairReport, err error) {
	path := filepath.Join(dir, dbFile)
	rep.Path = path
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return rep, fmt.Errorf("repair ledger: %w", err)
	}
	defer func() {
		if f != nil {
			if cerr := f.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("repair ledger %s: %w", path, cerr)
			}
		}
	}()
	data, err := readAll(f)
	if err != nil {
		return rep, fmt.Errorf("repair ledger %s: %w", path, err)
	}
	s := scanLog(data, 0)
	rep.Entries = s.entries()
	rep.BytesKept = s.size
	if s.clean() {
		return rep, nil
	}
	rep.Damaged = true
	rep.Problem = s.problem()

	if rep.Backup, err = writeBackup(dir, data); err != nil {
		return rep, fmt.Errorf("repair ledger %s: back up: %w", path, err)
	}
	if s.gapAt < 0 {
		// The valid commands form a prefix: cut the rest off.
		if err := f.Truncate(s.end); err != nil {
			return rep, fmt.Errorf("repair ledger %s: %w", path, err)
		}
		if err := syncFile(f); err != nil {
			return rep, fmt.Errorf("repair ledger %s: %w", path, err)
		}
		rep.BytesKept = s.end
	} else {
		var kept []byte
		for _, c := range s.cmds {
			kept = append(kept, data[c.start:c.end]...)
		}
		err := f.Close()
		f = nil
		if err != nil {
			return rep, fmt.Errorf("repair ledger %s: %w", path, err)
		}
		if err := replaceFile(path, kept); err != nil {
			return rep, fmt.Errorf("repair ledger %s: %w", path, err)
		}
		rep.BytesKept = int64(len(kept))
	}
	rep.BytesDropped = s.size - rep.BytesKept
	if err := syncDir(dir); err != nil {
		return rep, fmt.Errorf("repair ledger %s: %w", path, err)
	}
	return rep, nil
}

// repairArchive makes a damaged archive loadable: a copy aside, then every
// valid command kept and the others dropped (a record whose frame holds
// but whose CRC or content does not is skipped; the records after it are
// whole and kept), the file cut where its frames end. A missing archive
// that ledger.db vouches for (vouched ≥ 0) is created empty. The host's
// repair then compares with the audit log and the home, as for ledger.db.
func repairArchive(dir string, vouched int64) (*RepairReport, error) {
	path := filepath.Join(dir, archiveFile)
	head := respSet(formatKey, fmt.Sprint(formatVersion))
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if vouched < 0 {
			return nil, nil
		}
		rep := &RepairReport{Path: path, Damaged: true, BytesKept: int64(len(head)),
			Problem: fmt.Sprintf("missing (ledger.db records an archive of %d bytes); created empty", vouched)}
		if err := replaceFile(path, []byte(head)); err != nil {
			return rep, fmt.Errorf("repair ledger archive %s: %w", path, err)
		}
		return rep, syncDir(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("repair ledger archive: %w", err)
	}
	a := &archive{path: path, idx: map[string]archRef{}}
	var kept []byte
	var problems []string
	off := 0
	for off < len(data) {
		args, next, err := parseCommand(data, off)
		if err != nil {
			// Where the frames end: a torn tail is what a crash leaves
			// (Open cuts it); anything else is damage.
			if !errors.Is(err, errTorn) && !paddedTorn(data, off) && len(bytes.TrimLeft(data[off:], "\x00")) > 0 {
				problems = append(problems, fmt.Sprintf("invalid record at offset %d: %v", off, err))
			}
			break
		}
		first := len(kept) == 0
		if err := a.apply(args, 0, first); err != nil {
			problems = append(problems, fmt.Sprintf("invalid record at offset %d: %v", off, err))
			if first {
				kept = append(kept, head...) // a fresh format line, and this command again as a record
				if a.apply(args, 0, false) == nil {
					kept = append(kept, data[off:next]...)
				}
			}
			off = next
			continue
		}
		kept = append(kept, data[off:next]...)
		off = next
	}
	if vouched > int64(len(kept)) {
		problems = append(problems, fmt.Sprintf("shorter than ledger.db records (%d of %d bytes): records of finished requests are missing (restored from an older backup than ledger.db?)", len(kept), vouched))
	}
	rep := &RepairReport{Path: path, Entries: len(a.idx), BytesKept: int64(len(data))}
	if len(problems) == 0 {
		return rep, nil // intact, or a torn tail that Open cuts
	}
	rep.Damaged = true
	rep.Problem = problems[0]
	if len(problems) > 1 {
		rep.Problem += fmt.Sprintf(" (and %d more)", len(problems)-1)
	}
	if len(kept) == 0 {
		kept = []byte(head)
	}
	rep.Backup, err = writeBackupOf(dir, archiveFile, data)
	if err == nil {
		err = replaceFile(path, kept)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return rep, fmt.Errorf("repair ledger archive %s: %w", path, err)
	}
	rep.BytesKept, rep.BytesDropped = int64(len(kept)), int64(len(data)-len(kept))
	return rep, nil
}

// appendVouch appends the archive's length to ledger.db at path, and
// fsyncs it (the lock is held).
func appendVouch(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("repair ledger: %w", err)
	}
	_, err = f.WriteString(respSet(archiveKey, strconv.FormatInt(size, 10)))
	if err == nil {
		err = syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("repair ledger %s: %w", path, err)
	}
	return nil
}

// vouchedLength is the archive length ledger.db records in its live
// records, or -1.
func vouchedLength(live map[string][]byte) int64 {
	if v, ok := live[archiveKey]; ok {
		if n, err := parseLength(v); err == nil {
			return n
		}
	}
	return -1
}

// readArchive opens the archive in dir read-only and indexes it, for
// Snapshot; nil if there is none. A torn tail is left as it is.
func readArchive(dir string, vouched int64) (*archive, error) {
	path := filepath.Join(dir, archiveFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		if vouched >= 0 {
			return nil, damagedError(path, fmt.Sprintf("missing (ledger.db records an archive of %d bytes: the records of finished requests)", vouched))
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	a := &archive{path: path, f: f, idx: map[string]archRef{}}
	sc, err := a.index()
	if err == nil && vouched > max(a.size, sc.end) {
		err = errShorter
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return a, nil
}

// writeBackup copies data to a new ledger.db.damaged-<unix> file (with a
// numeric suffix if that name is taken) and fsyncs it.
func writeBackup(dir string, data []byte) (string, error) {
	return writeBackupOf(dir, dbFile, data)
}

// writeBackupOf is writeBackup for the file name in dir.
func writeBackupOf(dir, name string, data []byte) (string, error) {
	base := filepath.Join(dir, fmt.Sprintf("%s.damaged-%d", name, time.Now().Unix()))
	file := base
	for i := 2; ; i++ {
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) && i < 100 {
			file = fmt.Sprintf("%s-%d", base, i)
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = f.Write(data)
		if err == nil {
			err = syncFile(f)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return file, err
	}
}

// replaceFile atomically replaces path by data: temp file, fsync, rename.
// The caller fsyncs the directory.
func replaceFile(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// readAll reads the rest of f into a buffer sized from its length: growing
// one by doubling, as io.ReadAll does, zeroed and copied about 200 MB for a
// ledger of 100,000 requests, a quarter of Open.
func readAll(f *os.File) ([]byte, error) {
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	if off, err := f.Seek(0, io.SeekCurrent); err == nil && off <= size {
		size -= off
	}
	b := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
	_, err := b.ReadFrom(f)
	return b.Bytes(), err
}

// syncFile is a variable so that tests can make fsync fail.
var syncFile = (*os.File).Sync

// syncDir makes a rename or a file creation in dir durable. Windows cannot
// fsync a directory; NTFS journals the metadata itself.
var syncDir = syncDirNamed // a variable: tests make it fail

func syncDirNamed(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Snapshot reads the entries of the ledger in dir without taking the lock,
// for status commands that run beside a daemon. It only reads: a record the
// daemon is appending at that moment is simply not seen yet (the scan stops
// at a torn tail). Entries are in key order.
func Snapshot(dir string) ([]Entry, error) {
	out, err := snapshot(dir)
	if errors.Is(err, errShorter) {
		// A compaction at the daemon's start or stop records the new,
		// shorter length before it renames the new archive in: read again.
		out, err = snapshot(dir)
	}
	if errors.Is(err, errShorter) {
		err = damagedError(filepath.Join(dir, archiveFile), "shorter than ledger.db records: records of finished requests are missing (restored from an older backup than ledger.db?)")
	}
	return out, err
}

// errShorter: the archive is shorter than ledger.db says.
var errShorter = errors.New("archive shorter than recorded")

func snapshot(dir string) ([]Entry, error) {
	data, err := os.ReadFile(filepath.Join(dir, dbFile))
	if err != nil {
		return nil, err
	}
	s := scanLog(data, 0)
	if s.bad != nil {
		return nil, damagedError(filepath.Join(dir, dbFile), s.problem())
	}
	out := make([]Entry, 0, len(s.live))
	for k, v := range s.live {
		if !strings.HasPrefix(k, entryPrefix) {
			continue
		}
		e, err := decodeEntry(v)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	// The archive after ledger.db: a move appends to the archive before it
	// deletes from ledger.db, so an entry being moved is seen in one or
	// both, never in neither.
	a, err := readArchive(dir, vouchedLength(s.live))
	if err != nil {
		return nil, err
	}
	if a != nil {
		defer a.close()
		at := map[string]int{}
		for i, e := range out {
			at[e.Key] = i
		}
		for k, ref := range a.idx {
			e, err := a.read(k, ref)
			if err != nil {
				return nil, err
			}
			i, inDB := at[k]
			switch {
			case !inDB:
				out = append(out, e)
			case !out[i].State.Terminal() && settle(out[i], e) == e.State:
				out[i] = e // as Open will settle it
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// checkedSuffix names the file beside the database that records a prefix
// of it whose records were all checked, as one line:
//
//	bridge-ledger-checked v1 <bytes> <SHA-256 of those bytes, hex>
//
// A compaction writes it after the file it describes, and Open after it
// checked records beyond the prefix vouched for. Open then checks only the
// records after that prefix, if the prefix still hashes the same:
// at 100,000 requests the record checks are most of Open (1.5 s of CPU),
// the hash about 60 ms. A missing, stale or damaged checked file costs
// time, never a check: every record it does not vouch for is checked.
const checkedSuffix = ".checked"

const checkedHeader = "bridge-ledger-checked v1"

// writeChecked records that data, the whole file at path, was checked. A
// failure leaves no checked file, and the next Open checks everything.
func writeChecked(path string, data []byte) {
	sum := sha256.Sum256(data)
	line := fmt.Sprintf("%s %d %s\n", checkedHeader, len(data), hex.EncodeToString(sum[:]))
	if replaceFile(path+checkedSuffix, []byte(line)) != nil {
		_ = os.Remove(path + checkedSuffix)
	}
}

// checkedPrefix returns how many leading bytes of data, the file at path,
// the checked file vouches for: 0 unless it names a prefix of data with
// the same hash.
func checkedPrefix(path string, data []byte) int64 {
	b, err := os.ReadFile(path + checkedSuffix)
	if err != nil || len(b) > 256 {
		return 0
	}
	f := strings.Fields(strings.TrimSuffix(string(b), "\n"))
	if len(f) != 4 || f[0]+" "+f[1] != checkedHeader {
		return 0
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || n <= 0 || n > int64(len(data)) {
		return 0
	}
	sum := sha256.Sum256(data[:n])
	if hex.EncodeToString(sum[:]) != f[3] {
		return 0
	}
	return n
}
