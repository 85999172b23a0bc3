package ledger

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/buntdb"
)

// The archive holds terminal entries outside buntdb, which keeps every
// record in memory: 100,000 finished requests were about 100 MB of the
// daemon's heap. A terminal entry never changes again (no transition leaves
// a terminal state), so it can move to a file that is read only when the
// entry is asked for, with a small index in memory: its offset and length,
// state and two times, about 100 bytes with its key instead of about 1 KB.
//
// ledger.archive is an append-only file of RESP commands like ledger.db
// (see the package documentation): first `set m/format 1`, then
// `set r/<key> <record> <crc>` for an archived entry (the same canonical
// record, always in a terminal state; crc is the CRC-32C of the record, 8
// lower-case hex digits) and `del r/<key>` when GC or Forget drops it. A
// key may be set twice (a crash between a move's two writes, below); the
// last set wins. Open checks every record's CRC, frame, key and the fields
// the index keeps, not a full decode (a tenth of the time at 100,000
// entries): damage anywhere is found there, as in ledger.db, and the full
// decode happens when an entry is read.
//
// A move (archive) is: append the records and fsync the archive, index
// them, then delete them from buntdb (one durable commit). A crash between
// the two leaves an entry in both, never in neither; lookups ask buntdb
// first, and the next Open moves it again. Deletions run the other way: GC
// and Forget delete from buntdb, then append `del`s to the archive and fsync
// it; a crash between leaves an entry that is still collectable, and the
// next GC drops it.
const archiveFile = "ledger.archive"

// archiveEvery is how many entries may reach a terminal state in memory
// before the ledger moves them to the archive in the background; a
// variable so that tests can lower it.
var archiveEvery = 1024

// archRef is the in-memory index of one archived entry.
type archRef struct {
	off     int64  // offset of the record (the value bytes) in the file
	n       uint32 // its length
	state   uint8  // index in states
	updated int64  // Updated, Unix nanoseconds (clamped, see unixNano)
	expires int64  // Expires, likewise
}

// archive is the open archive file and its index. mu guards everything;
// it is a leaf lock (nothing else is taken while it is held).
type archive struct {
	path string
	f    *os.File
	idx  map[string]archRef
	size int64 // the file's length: where the next append goes
	live int64 // bytes of the live `set` commands, for compaction
	err  error // the last background move's failure, for Stats
	// stuck: an append failed and could not be cut back; no append is
	// made after it (a later, shorter one would leave the rest of the
	// failed one behind it for the next Open to read).
	stuck error
}

// unixNano is t as Unix nanoseconds, clamped to what an int64 holds (years
// 1678 to 2262). The index uses it to select entries by time; an expiry
// beyond it is "far future" either way.
func unixNano(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// openArchive opens (creating if needed, 0600) the archive file in dir and
// indexes it. It reads the file in blocks: an archive of 100,000 entries
// is about 80 MB, which the daemon must not hold to index it. Each record
// is checked for its frame, CRC, key and the fields the index keeps; the
// full decode happens when an entry is read. A torn tail (a crash during
// an append that never returned: a valid prefix of a command, or NULs, up
// to the end) is cut; anything else that is wrong is ErrDamaged, the file
// untouched, wherever it is (a power cut inside a move's append can leave
// NULs before later bytes of it: the records are still in ledger.db, and
// `bridge ledger repair` cuts there and loses nothing; a cut made without
// a word could hide lost records). vouched is the length ledger.db
// records (< 0: none; one is then created if missing): a missing archive,
// or one shorter than that, is ErrDamaged (finished requests' records
// would be lost).
func openArchive(dir string, vouched int64) (*archive, error) {
	path := filepath.Join(dir, archiveFile)
	if err := os.Remove(path + ".tmp"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open ledger archive: %w", err)
	}
	flag := os.O_RDWR
	if vouched < 0 {
		flag |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, damagedError(path, fmt.Sprintf("missing (ledger.db records an archive of %d bytes: the records of finished requests)", vouched))
	}
	if err != nil {
		return nil, fmt.Errorf("open ledger archive: %w", err)
	}
	a := &archive{path: path, f: f, idx: map[string]archRef{}}
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		// Sized a little under the records it likely holds (a finished
		// request's takes about 900 bytes): grown from nothing, the map's
		// rehashes were a sixth of the index's CPU at 100,000; sized over
		// them (at 768 bytes a record), it held 6 MB more than grown.
		// Capped: a file's size is what it claims (a sparse one costs
		// no disk); past the cap the map grows as it would.
		a.idx = make(map[string]archRef, min(fi.Size()/1024, 1<<18))
	}
	sc, err := a.index()
	if err == nil && sc.torn {
		if err = f.Truncate(sc.end); err == nil {
			err = syncFile(f)
		}
	}
	if err == nil && sc.end == 0 {
		// New: its name durable before any move deletes from ledger.db.
		err = a.appendSync(respSet(formatKey, fmt.Sprint(formatVersion)))
		if err == nil {
			err = syncDir(dir)
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	a.size = max(a.size, sc.end)
	if vouched > a.size {
		_ = f.Close()
		return nil, damagedError(path, fmt.Sprintf("shorter than ledger.db records (%d of %d bytes): records of finished requests are missing (restored from an older backup than ledger.db?)", a.size, vouched))
	}
	return a, nil
}

// archiveScan is what index found.
type archiveScan struct {
	end  int64 // just past the last valid command
	torn bool  // the file ends inside a command (or in NULs) after end
}

// index reads the whole file and builds a.idx.
func (a *archive) index() (archiveScan, error) {
	var sc archiveScan
	var (
		buf  = make([]byte, 0, 1<<20)
		base int64 // file offset of buf[0]
		off  int   // the next command in buf
		eof  bool  // buf holds everything up to the end of the file
	)
	// more keeps what is not parsed yet and reads behind it, growing the
	// buffer only for a command longer than it.
	more := func() error {
		n := copy(buf[:cap(buf)], buf[off:])
		buf, base, off = buf[:n], base+int64(off), 0
		if n == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		m, err := a.f.ReadAt(buf[n:cap(buf)], base+int64(n))
		buf = buf[:n+m]
		if errors.Is(err, io.EOF) {
			eof = true
			return nil
		}
		if err != nil {
			return fmt.Errorf("open ledger archive %s: %w", a.path, err)
		}
		return nil
	}
	for {
		if off == len(buf) && eof {
			return sc, nil
		}
		if off == len(buf) {
			if err := more(); err != nil {
				return sc, err
			}
			continue
		}
		args, next, err := parseCommand(buf, off)
		if err != nil && !eof {
			// The command may only look torn or bad because the buffer
			// ends: decide with the rest of the file read.
			if err := more(); err != nil {
				return sc, err
			}
			continue
		}
		at := base + int64(off)
		if err != nil {
			// A crashed append leaves a valid prefix, maybe padded with
			// NULs (or NULs alone) up to the end: cut. Anything else is
			// damage.
			if errors.Is(err, errTorn) || paddedTorn(buf, off) || len(bytes.TrimLeft(buf[off:], "\x00")) == 0 {
				sc.torn = true
				return sc, nil
			}
			return sc, damagedError(a.path, fmt.Sprintf("invalid record at offset %d: %v", at, err))
		}
		// Where the record's bytes are in the file: args alias buf.
		valOff := base + int64(cap(buf)-cap(args[len(args)-1]))
		if len(args) == 4 {
			valOff = base + int64(cap(buf)-cap(args[2]))
		}
		if err := a.apply(args, valOff, sc.end == 0); err != nil {
			return sc, damagedError(a.path, fmt.Sprintf("invalid record at offset %d: %v", at, err))
		}
		off = next
		sc.end = base + int64(next)
		a.size = sc.end
	}
}

// apply indexes one command of the archive; valOff is the file offset of
// its last argument.
func (a *archive) apply(args [][]byte, valOff int64, first bool) error {
	cmd := string(args[0])
	switch {
	case first:
		if cmd != "set" || len(args) != 3 || string(args[1]) != formatKey {
			return errors.New("the archive does not start with its format")
		}
		if string(args[2]) != fmt.Sprint(formatVersion) {
			return fmt.Errorf("unsupported archive format %q", args[2])
		}
	case cmd == "set" && len(args) == 4 && bytes.HasPrefix(args[1], []byte(entryPrefix)):
		key := string(args[1][len(entryPrefix):])
		if !crcMatches(args[2], args[3]) {
			return fmt.Errorf("record %q: CRC %s, its bytes have %s", key, args[3], crcHex(args[2]))
		}
		ref, err := refOf(key, args[2])
		if err != nil {
			return fmt.Errorf("record %q: %w", key, err)
		}
		ref.off = valOff
		if old, ok := a.idx[key]; ok {
			a.live -= archiveSetLen(len(key), int(old.n))
		}
		a.idx[key] = ref
		a.live += archiveSetLen(len(key), int(ref.n))
	case cmd == "del" && len(args) == 3 && bytes.HasPrefix(args[1], []byte(entryPrefix)):
		key := string(args[1][len(entryPrefix):])
		if !crcMatches(args[1], args[2]) {
			return fmt.Errorf("delete of %q: CRC %s, its bytes have %s", key, args[2], crcHex(args[1]))
		}
		old, ok := a.idx[key]
		if !ok {
			return fmt.Errorf("delete of %q, which the archive does not hold", key)
		}
		a.live -= archiveSetLen(len(key), int(old.n))
		delete(a.idx, key)
	default:
		return fmt.Errorf("unknown command %q with %d arguments", cmd, len(args)-1)
	}
	return nil
}

// refOf checks what the index takes from a record (its key, a terminal
// state, its times) without decoding all of it: the full check is the
// decode when the entry is read.
//
// It runs once per record when the ledger opens (100,000 at a start beside
// as many finished requests): it reads the record's bytes where they are,
// with no copy of the record, no JSON encoder for a key that needs no
// escaping and no time.Parse for a time in its canonical form (issue 25:
// these were a quarter of such a start's CPU).
func refOf(key string, val []byte) (archRef, error) {
	if !recordOfKey(val, key) {
		return archRef{}, errors.New("not a record of its key")
	}
	st, _ := topFieldBytes(val, stateTag)
	i := slices.IndexFunc(states, func(s State) bool { return string(st) == string(s) })
	if i < 0 || !states[i].Terminal() {
		return archRef{}, fmt.Errorf("state %q is not terminal", st)
	}
	u, _ := topFieldBytes(val, updatedTag)
	e, _ := topFieldBytes(val, expiresTag)
	ut, err := parseTimeBytes(u)
	if err != nil {
		return archRef{}, fmt.Errorf("updated: %w", err)
	}
	et, err := parseTimeBytes(e)
	if err != nil {
		return archRef{}, fmt.Errorf("expires: %w", err)
	}
	return archRef{n: uint32(len(val)), state: uint8(i), updated: unixNano(ut), expires: unixNano(et)}, nil
}

// The tags topField looks for, made once.
var stateTag, updatedTag, expiresTag = fieldTag("state"), fieldTag("updated"), fieldTag("expires")

// recordOfKey reports whether the record val starts as encodeEntry starts
// the record of key: its version, then its key, escaped as encoding/json
// escapes it.
func recordOfKey(val []byte, key string) bool {
	const head = `{"v":1,"key":`
	if !bytes.HasPrefix(val, []byte(head)) {
		return false
	}
	rest := val[len(head):]
	if plainJSON(key) {
		// Its JSON string is the key quoted: compared in place.
		return len(rest) > len(key)+2 && rest[0] == '"' && string(rest[1:1+len(key)]) == key &&
			rest[1+len(key)] == '"' && rest[2+len(key)] == ','
	}
	kj, err := json.Marshal(key)
	return err == nil && bytes.HasPrefix(rest, append(kj, ','))
}

// plainJSON reports whether encoding/json writes s as itself between
// quotes: letters, digits and "/._-" only (every key the daemon makes).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '/' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// archiveSet is the archive's command for the record val of key, and the
// offset of val in it.
func archiveSet(key, val string) (cmd string, at int) {
	head := fmt.Sprintf("*4\r\n$3\r\nset\r\n$%d\r\n%s%s\r\n$%d\r\n", len(entryPrefix)+len(key), entryPrefix, key, len(val))
	return head + val + "\r\n$8\r\n" + crcHex([]byte(val)) + "\r\n", len(head)
}

// castagnoli is made on first use: building it is a tenth of a millisecond
// at every start of every bridge process, and only a daemon reads an archive.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// crcHex is the CRC-32C of b in 8 lower-case hex digits.
func crcHex(b []byte) string { return fmt.Sprintf("%08x", crc32.Checksum(b, castagnoli())) }

// crcMatches reports whether sum is crcHex(b), without formatting it.
func crcMatches(b, sum []byte) bool {
	var raw [4]byte
	var want [8]byte
	binary.BigEndian.PutUint32(raw[:], crc32.Checksum(b, castagnoli()))
	hex.Encode(want[:], raw[:])
	return string(sum) == string(want[:])
}

// archiveSetLen is len(archiveSet(key, val)) for their lengths.
func archiveSetLen(key, val int) int64 {
	return respSetLen(len(entryPrefix)+key, val) + int64(len("$8\r\n01234567\r\n"))
}

// archiveDel is the archive's command that drops key: `del r/<key> <crc>`,
// the CRC-32C of "r/<key>" (a flipped byte must not drop another key).
func archiveDel(key string) string {
	k := entryPrefix + key
	return fmt.Sprintf("*3\r\n$3\r\ndel\r\n$%d\r\n%s\r\n$8\r\n%s\r\n", len(k), k, crcHex([]byte(k)))
}

// appendSync appends data to the file and fsyncs it. On failure it cuts
// the file back to where the append began (see stuck).
func (a *archive) appendSync(data string) error {
	if a.stuck != nil {
		return fmt.Errorf("append to ledger archive %s: an earlier append could not be undone: %w", a.path, a.stuck)
	}
	_, err := a.f.WriteAt([]byte(data), a.size)
	if err == nil {
		err = syncFile(a.f)
	}
	if err != nil {
		terr := a.f.Truncate(a.size)
		if terr == nil {
			terr = syncFile(a.f)
		}
		if terr != nil {
			a.stuck = terr
		}
		return fmt.Errorf("append to ledger archive %s: %w", a.path, err)
	}
	a.size += int64(len(data))
	return nil
}

// add appends the records of terminal entries (key → record) and indexes
// them once they are on disk.
func (a *archive) add(keys, vals []string) error {
	var b strings.Builder
	offs := make([]int64, len(keys))
	refs := make([]archRef, len(keys))
	for i, k := range keys {
		ref, err := refOf(k, []byte(vals[i]))
		if err != nil {
			return fmt.Errorf("archive %s: %w", k, err)
		}
		refs[i] = ref
		cmd, at := archiveSet(k, vals[i])
		offs[i] = a.size + int64(b.Len()+at)
		b.WriteString(cmd)
	}
	if err := a.appendSync(b.String()); err != nil {
		return err
	}
	for i, k := range keys {
		if old, ok := a.idx[k]; ok {
			a.live -= archiveSetLen(len(k), int(old.n))
		}
		refs[i].off = offs[i]
		a.idx[k] = refs[i]
		a.live += archiveSetLen(len(k), len(vals[i]))
	}
	return nil
}

// drop appends `del`s for the keys it holds and unindexes them.
func (a *archive) drop(keys []string) error {
	var b strings.Builder
	var gone []string
	for _, k := range keys {
		if _, ok := a.idx[k]; ok && !slices.Contains(gone, k) {
			b.WriteString(archiveDel(k))
			gone = append(gone, k)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	if err := a.appendSync(b.String()); err != nil {
		return err
	}
	for _, k := range gone {
		a.live -= archiveSetLen(len(k), int(a.idx[k].n))
		delete(a.idx, k)
	}
	return nil
}

// get reads and decodes an archived entry.
func (a *archive) get(key string) (Entry, error) {
	ref, ok := a.idx[key]
	if !ok {
		return Entry{}, ErrNotFound
	}
	return a.read(key, ref)
}

func (a *archive) read(key string, ref archRef) (Entry, error) {
	buf, err := a.record(ref)
	if err != nil {
		return Entry{}, fmt.Errorf("read archived entry %q (%s): %w", key, a.path, err)
	}
	e, err := decodeEntry(buf)
	if err == nil && e.Key != key {
		err = fmt.Errorf("it holds key %q", e.Key)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("decode archived entry %q (%s): %w", key, a.path, err)
	}
	return e, nil
}

// crcTail is what follows a record in its set command: CRLF, then the
// CRC's bulk string.
const crcTail = len("\r\n$8\r\n01234567\r\n")

// record reads the bytes of an indexed record and checks them against
// their CRC: damage after Open's check is found, never copied on.
func (a *archive) record(ref archRef) ([]byte, error) {
	buf := make([]byte, int(ref.n)+crcTail)
	if _, err := a.f.ReadAt(buf, ref.off); err != nil {
		return nil, err
	}
	val, tail := buf[:ref.n], buf[ref.n:]
	if string(tail[:6]) != "\r\n$8\r\n" || string(tail[14:]) != "\r\n" || string(tail[6:14]) != crcHex(val) {
		return nil, errors.New("the record no longer matches its CRC")
	}
	return val, nil
}

// compactable reports whether the file is worth rewriting: over min bytes
// and more than ratio times its live records.
func (a *archive) compactable(min, ratio int64) bool {
	return a.size > min && a.size > ratio*(a.live+respSetLen(len(formatKey), 1))
}

// compact rewrites the file with the live records only, in key order: new
// file, fsync, vouch for its length (in ledger.db), rename, fsync of the
// directory. A crash leaves the old file or the new one, both whole, and
// neither shorter than ledger.db's length: a shorter one is damage (an
// archive restored from an older backup, or cut).
func (a *archive) compact(vouch func(size int64) error) error {
	keys := make([]string, 0, len(a.idx))
	for k := range a.idx {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	tmp := a.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("compact ledger archive: %w", err)
	}
	idx := make(map[string]archRef, len(a.idx))
	var off int64
	w := func(s string) error {
		_, err := f.WriteAt([]byte(s), off)
		off += int64(len(s))
		return err
	}
	err = w(respSet(formatKey, fmt.Sprint(formatVersion)))
	for _, k := range keys {
		if err != nil {
			break
		}
		ref := a.idx[k]
		var buf []byte
		if buf, err = a.record(ref); err != nil {
			err = fmt.Errorf("record %q: %w", k, err)
			break
		}
		cmd, at := archiveSet(k, string(buf))
		ref.off = off + int64(at)
		idx[k] = ref
		err = w(cmd)
	}
	if err == nil {
		err = syncFile(f)
	}
	if err == nil {
		err = vouch(off)
	}
	if err == nil {
		err = os.Rename(tmp, a.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(a.path))
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("compact ledger archive %s: %w", a.path, err)
	}
	_ = a.f.Close()
	a.f, a.idx, a.size = f, idx, off
	return nil
}

func (a *archive) close() error { return a.f.Close() }

// moveChunk bounds the entries one step of a move appends and deletes: a
// ledger written before the archive existed may hold 100,000 terminal
// entries, and one step's records are held twice while it runs.
const moveChunk = 4096

// move moves every terminal entry buntdb holds to the archive and reports
// how many it moved. The caller holds l.mu (for reading or writing) and
// has checked that the ledger is usable.
func (l *Ledger) move() (int, error) {
	l.moveMu.Lock()
	defer l.moveMu.Unlock()
	var keys, vals []string
	err := l.view(func(tx *buntdb.Tx) error {
		return tx.AscendKeys(entryPrefix+"*", func(k, v string) bool {
			if st, _ := topField(v, "state"); State(st).Terminal() {
				keys, vals = append(keys, k[len(entryPrefix):]), append(vals, v)
			}
			return true
		})
	})
	if err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	moved := 0
	for len(keys) > 0 {
		n := min(len(keys), moveChunk)
		ks, vs := keys[:n], vals[:n]
		keys, vals = keys[n:], vals[n:]
		l.amu.Lock()
		err := l.arch.add(ks, vs)
		l.amu.Unlock()
		if err != nil {
			return moved, fmt.Errorf("archive: %w", err)
		}
		// Now on disk in the archive: out of buntdb. A record that is
		// not the one archived cannot be (a terminal entry never changes),
		// and would be left where it is.
		err = l.update(func(tx *buntdb.Tx) (bool, error) {
			wrote := false
			for i, k := range ks {
				if v, err := tx.Get(entryPrefix + k); err != nil || v != vs[i] {
					continue
				}
				if _, err := tx.Delete(entryPrefix + k); err != nil {
					return wrote, err
				}
				wrote = true
			}
			return l.vouch(tx, wrote)
		})
		if err != nil {
			return moved, fmt.Errorf("archive: %w", err)
		}
		moved += n
	}
	if l.resident.Add(-int64(moved)) < 0 {
		l.resident.Store(0)
	}
	l.amu.Lock()
	l.arch.err = nil
	l.amu.Unlock()
	return moved, nil
}

// countTerminal counts the entries a commit wrote in a terminal state and
// starts a background move once archiveEvery of them are in memory.
func (l *Ledger) countTerminal(wrote []*change) {
	n := 0
	for _, c := range wrote {
		if c.terminal && c.err == nil {
			n++
		}
	}
	if n == 0 || l.resident.Add(int64(n)) < int64(archiveEvery) || !l.moving.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.moving.Store(false)
		l.mu.RLock()
		defer l.mu.RUnlock()
		if l.usable() != nil {
			return
		}
		if _, err := l.move(); err != nil {
			// The entries stay in memory, nothing is lost; try again after
			// as many more (not at every commit).
			l.resident.Store(0)
			l.amu.Lock()
			l.arch.err = err
			l.amu.Unlock()
		}
	}()
}

// dropArchived drops the archived entries among keys that are collectable
// (see GC), and those among forced whatever their expiry (their buntdb
// record was just deleted; an archived copy must not come back in its
// place): their `del`s are appended and fsynced. It reports how many of
// keys it dropped. The caller holds l.moveMu.
func (l *Ledger) dropArchived(keys, forced []string, now time.Time, skew time.Duration) (int, error) {
	l.amu.Lock()
	defer l.amu.Unlock()
	pivot := unixNano(now.Add(-skew))
	var gone []string
	for _, k := range keys {
		if r, ok := l.arch.idx[k]; ok && r.expires < pivot {
			gone = append(gone, k)
		}
	}
	n := len(gone)
	for _, k := range forced {
		if _, ok := l.arch.idx[k]; ok {
			gone = append(gone, k)
		}
	}
	return n, l.arch.drop(gone)
}

// archived returns, in key order, the archived keys whose index entry
// accept takes, with their references.
func (l *Ledger) archived(accept func(key string, r archRef) bool) ([]string, []archRef) {
	l.amu.Lock()
	defer l.amu.Unlock()
	if l.arch == nil {
		return nil, nil
	}
	var keys []string
	for k, r := range l.arch.idx {
		if accept(k, r) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	refs := make([]archRef, len(keys))
	for i, k := range keys {
		refs[i] = l.arch.idx[k]
	}
	return keys, refs
}

// clamped reports whether a time of the entry lies outside what the index
// holds exactly (years 1678 to 2262): selections by time then read the
// record.
func (r archRef) clamped() bool {
	for _, t := range []int64{r.updated, r.expires} {
		if t == math.MinInt64 || t == math.MaxInt64 {
			return true
		}
	}
	return false
}

// times are an index entry's Updated and Expires as times.
func (r archRef) times() (updated, expires time.Time) {
	return time.Unix(0, r.updated).UTC(), time.Unix(0, r.expires).UTC()
}
