package ledger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/buntdb"
)

// File names inside the ledger directory.
const (
	dbFile   = "ledger.db"
	lockFile = "ledger.lock"
)

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrLocked: another Ledger (in this or another process) holds the lock.
	ErrLocked = errors.New("ledger is locked")
	// ErrDamaged: the file holds something no crash of this package can
	// leave behind; nothing was changed. Run Repair.
	ErrDamaged = errors.New("ledger file is damaged")
	// ErrNotFound: no entry for the key.
	ErrNotFound = errors.New("no ledger entry")
	// ErrWrongState: the compare-and-set of Transition lost; the entry is in
	// a state the caller did not expect (usually: another worker won).
	ErrWrongState = errors.New("ledger entry is in another state")
	// ErrConflict: the key is recorded with a different manifest hash: the
	// same request id with other content is a forgery or a bug.
	ErrConflict = errors.New("ledger entry has a different manifest")
)

var errClosed = errors.New("ledger is closed")

// Error carries the path, the lock holder and a hint for the operator with
// ErrLocked and ErrDamaged. Error() leaves the hint out so that a command
// line tool can print it on its own "hint:" line.
type Error struct {
	Op   string // "lock" or "open"
	Path string // the lock file or the database file
	PID  int    // holder of the lock, 0 if unknown
	Err  error  // wraps ErrLocked or ErrDamaged
	Hint string // what to do about it
}

func (e *Error) Error() string { return e.Op + " ledger " + e.Path + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Ledger is an open ledger. All methods are safe for concurrent use.
type Ledger struct {
	dir         string
	db          *buntdb.DB
	dbf         *os.File // a second descriptor of ledger.db, used only to fsync and see the error
	lock        *fileLock
	tailDropped int64

	// mu is held for reading by every operation and for writing by Close,
	// so Close waits for operations in progress.
	mu     sync.RWMutex
	closed bool

	bmu      sync.Mutex
	broken   error         // set when an fsync failed; every later operation fails
	brokenCh chan struct{} // closed when broken is set (Unusable)

	// Group commit (see update): writers queue their changes; one of them
	// commits the queue as one buntdb transaction and one fsync.
	cmu        sync.Mutex
	queue      []*change
	committing bool

	// dur is held for writing from a commit until its fsync returned, and
	// for reading by every read: no reader sees a state that is not on
	// disk yet. (buntdb's SyncPolicy Always gave that by fsyncing under its
	// own lock; the ledger fsyncs itself, once per batch, see update.)
	dur sync.RWMutex

	// unsynced holds the keys of lazy writes (see AdmitLazy) that no fsync
	// has covered yet; guarded by dur. Every fsync of the file covers them
	// all: the file is append-only.
	unsynced map[string]bool
	synced   int64 // the file's length after its last fsync; guarded by dur

	// The archive of terminal entries (archive.go). amu guards arch and is
	// a leaf lock; moveMu orders moves against GC and Forget, so that a
	// move never archives an entry they just deleted.
	amu      sync.Mutex
	arch     *archive
	moveMu   sync.Mutex
	resident atomic.Int64 // entries written in a terminal state since the last move
	moving   atomic.Bool  // a background move is running

	// Napping (nap.go): buntdb is closed after napAfter without a use, so
	// that its one-second ticker does not wake an idle daemon, and opened
	// again by the next use. db is nil while napping; it is read and
	// replaced under dur. lastUse is the time of the last use (UnixNano).
	napTimer    *time.Timer
	napAfter    time.Duration // guarded by dur
	napStamp    stamp         // the file as the nap left it; guarded by dur
	born        time.Time     // Open's time, the monotonic base of lastUse
	lastUse     atomic.Int64  // nanoseconds since born
	naps, wakes atomic.Int64  // how many times buntdb was closed and opened again (Naps)
}

// change is one writer's part of a group commit.
type change struct {
	fn       func(tx *buntdb.Tx) (bool, error)
	terminal bool   // it writes an entry in a terminal state (counted for the archive)
	key      string // the entry it writes, for a lazy change
	lazy     bool   // return without waiting for an fsync
	err      error
	done     chan struct{}
}

// lazyStates are the states a write may enter without waiting for its
// fsync (AdmitLazy, TransitionLazy): an entry in them never started, and
// after a crash that lost it the request is evaluated again, as it would be
// from the state before. Entering any other state fsyncs the file, and
// with it every lazy write before.
var lazyStates = []State{StateSeen, StatePending, StateClaimed}

// Open opens (creating if needed) the ledger in dir. It creates dir with
// mode 0700, takes the lock on dir/ledger.lock (ErrLocked if held), checks
// dir/ledger.db strictly (ErrDamaged, file untouched), cuts a torn tail left
// by a crash, and opens it with buntdb: SyncPolicy Always, auto-shrink off,
// no TTL ever.
func Open(dir string) (*Ledger, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	if err := checkDirMode(dir); err != nil {
		return nil, err
	}
	lk, err := acquireLock(dir)
	if err != nil {
		return nil, err
	}
	l := &Ledger{dir: dir, lock: lk, brokenCh: make(chan struct{})}
	if err := l.open(); err != nil {
		_ = lk.release()
		return nil, err
	}
	if err := l.openArchive(); err != nil {
		_ = l.db.Close()
		_ = l.dbf.Close()
		_ = lk.release()
		return nil, err
	}
	// Whatever terminal entries the file holds go to the archive now: a
	// ledger written before the archive existed, a crash before a move
	// finished, or one before the background move came. A move that fails
	// loses nothing (the entries stay in memory): it is tried again.
	if _, err := l.move(); err != nil {
		l.amu.Lock()
		l.arch.err = err
		l.amu.Unlock()
	}
	l.born = time.Now()
	l.used()
	l.napAfter = napAfter
	l.napTimer = time.AfterFunc(napAfter, l.nap)
	return l, nil
}

// openArchive opens the archive beside an opened ledger.db, records its
// length in ledger.db (so that from then on a missing archive is damage,
// not an empty one), and settles entries that both hold.
func (l *Ledger) openArchive() error {
	vouched := int64(-1)
	err := l.view(func(tx *buntdb.Tx) error {
		v, err := tx.Get(archiveKey)
		if err == nil {
			vouched, err = parseLength([]byte(v)) // checked by scanLog
		}
		if errors.Is(err, buntdb.ErrNotFound) {
			err = nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("open ledger %s: %w", l.dir, err)
	}
	a, err := openArchive(l.dir, vouched)
	if err != nil {
		return err
	}
	l.arch = a
	if a.compactable(compactMinSize, compactRatio) {
		// Only to read less next time: a failure (a full disk) keeps
		// the old file and is reported by Stats.
		if err := a.compact(l.setVouched); err != nil {
			a.err = err
		}
	}
	// An entry in both files whose buntdb record is not terminal: if the
	// archived record continues it (the same request, as far or further:
	// ledger.db was repaired or restored behind it), the archive's stands;
	// otherwise buntdb's is newer (the id was forgotten and admitted
	// again, and a repair brought the archived copy back) and the archived
	// copy goes. A terminal one in both is moved again below.
	var behind, stale []string
	err = l.view(func(tx *buntdb.Tx) error {
		var derr error
		err := tx.AscendKeys(entryPrefix+"*", func(k, v string) bool {
			ref, ok := a.idx[k[len(entryPrefix):]]
			if st, _ := topField(v, "state"); !ok || State(st).Terminal() {
				return true
			}
			var db, arch Entry
			if db, derr = decodeEntry([]byte(v)); derr == nil {
				arch, derr = a.read(k[len(entryPrefix):], ref)
			}
			if derr != nil {
				return false
			}
			if settle(db, arch) == arch.State {
				behind = append(behind, k)
			} else {
				stale = append(stale, k[len(entryPrefix):])
			}
			return true
		})
		if err == nil {
			err = derr
		}
		return err
	})
	if err == nil && len(stale) > 0 {
		err = a.drop(stale)
	}
	if err == nil {
		err = l.update(func(tx *buntdb.Tx) (bool, error) {
			for _, k := range behind {
				if _, err := tx.Delete(k); err != nil {
					return true, err
				}
			}
			return l.vouch(tx, len(behind) > 0 || vouched != a.size)
		})
	}
	if err != nil {
		_ = a.close()
		return fmt.Errorf("open ledger %s: %w", l.dir, err)
	}
	return nil
}

// settle says which of two records of one key stands when ledger.db holds
// db (not terminal) and the archive holds arch: the archive's if it
// continues db (the same request: manifest and first sighting, updated no
// earlier), else ledger.db's. It returns the standing record's state.
func settle(db, arch Entry) State {
	if arch.ManifestSHA256 == db.ManifestSHA256 && arch.FirstSeen.Equal(db.FirstSeen) && !arch.Updated.Before(db.Updated) {
		return arch.State
	}
	return db.State
}

// setVouched records size as the archive's length in ledger.db, durably.
func (l *Ledger) setVouched(size int64) error {
	return l.update(func(tx *buntdb.Tx) (bool, error) {
		_, _, err := tx.Set(archiveKey, strconv.FormatInt(size, 10), nil)
		return true, err
	})
}

// vouch records the archive's length in ledger.db within tx, if wrote or
// the length changed, and reports whether tx wrote. Every byte below it is
// on disk in the archive (fsynced before), so the next Open checks those
// strictly and may cut damage after them (openArchive).
func (l *Ledger) vouch(tx *buntdb.Tx, wrote bool) (bool, error) {
	l.amu.Lock()
	size := l.arch.size
	l.amu.Unlock()
	if v, err := tx.Get(archiveKey); err == nil && v == strconv.FormatInt(size, 10) {
		return wrote, nil
	}
	_, _, err := tx.Set(archiveKey, strconv.FormatInt(size, 10), nil)
	return true, err
}

func (l *Ledger) open() error {
	path := filepath.Join(l.dir, dbFile)
	f, dropped, err := prepareFile(path)
	if err != nil {
		return err
	}
	db, err := openBunt(path)
	if errors.Is(err, buntdb.ErrInvalid) {
		// prepareFile is stricter than buntdb; keep the mapping anyway.
		_ = f.Close()
		return damagedError(path, "buntdb: "+err.Error())
	}
	if err != nil {
		_ = f.Close()
		return err
	}
	l.db, l.dbf, l.tailDropped = db, f, dropped
	// What the file holds now may be only in the page cache: lazy writes
	// of a process that was killed before its next fsync. Flushed here, it
	// is all durable, and Durable and SyncedSize tell the truth about it;
	// without this a key the crash left lazy would be called durable, and
	// a power cut later could lose it behind a caller's back (the kept
	// manifest's name of evidence, host).
	if err := syncFile(f); err != nil {
		_ = db.Close()
		_ = f.Close()
		return fmt.Errorf("open ledger %s: %w", path, err)
	}
	if fi, err := f.Stat(); err == nil {
		l.synced = fi.Size()
	}
	// Mark the format in a new file; an existing marker was checked by scanLog.
	err = l.update(func(tx *buntdb.Tx) (bool, error) {
		if _, err := tx.Get(formatKey); err == nil {
			return false, nil
		}
		_, _, err := tx.Set(formatKey, fmt.Sprint(formatVersion), nil)
		return true, err
	})
	if err != nil {
		_ = db.Close()
		_ = f.Close()
		return fmt.Errorf("open ledger %s: %w", path, err)
	}
	return nil
}

// Compaction thresholds; variables so that tests can lower them. Every
// transition appends a whole record and auto-shrink is off, so without this
// the file would grow forever.
var (
	compactMinSize int64 = 16 << 20
	compactRatio   int64 = 4
)

// Close closes the database and releases the lock. It waits for operations
// in progress; later calls return nil.
func (l *Ledger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	var keep map[string]string
	err := l.wake() // what follows reads buntdb
	l.napTimer.Stop()
	if err == nil && l.usable() == nil {
		// Terminal entries to the archive, so that the next Open loads
		// the live ones only; then the archive's compaction (nothing else
		// runs now: l.mu is held for writing), which records its new
		// length in ledger.db; then ledger.db's live records, that length
		// among them, for its own compaction.
		if l.arch != nil {
			_, err = l.move()
			if err == nil && l.arch.compactable(closeCompactMin, closeCompactRatio) {
				err = l.arch.compact(l.setVouched)
			}
		}
		keep = l.compactable()
		if len(l.unsynced) > 0 {
			if serr := syncFile(l.dbf); err == nil { // the lazy writes, for a clean stop
				err = serr
			}
		}
	}
	l.closed = true
	if l.arch != nil {
		if cerr := l.arch.close(); err == nil {
			err = cerr
		}
	}
	if l.db != nil {
		if cerr := l.db.Close(); err == nil {
			err = cerr
		}
	}
	if cerr := l.dbf.Close(); err == nil {
		err = cerr
	}
	if err == nil && keep != nil {
		err = compactLive(filepath.Join(l.dir, dbFile), keep)
	}
	if cerr := l.lock.release(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close ledger %s: %w", l.dir, err)
	}
	return nil
}

// closeCompactMin and closeCompactRatio: a clean Close rewrites a file
// over 1 MiB that is more than twice its live records. Every transition
// appends a whole record, so a busy ledger is mostly superseded records,
// and Open reads and checks every one of them: compacting when the daemon
// stops keeps the next start fast (100,000 finished requests are about
// 65 MB live, five times that before).
var (
	closeCompactMin   int64 = 1 << 20
	closeCompactRatio int64 = 2
)

// usable must be called with l.mu held for reading.
func (l *Ledger) usable() error {
	if l.closed {
		return errClosed
	}
	l.bmu.Lock()
	defer l.bmu.Unlock()
	return l.broken
}

// update runs fn in a buntdb write transaction and returns once its change
// is on disk. fn reports whether it wrote. It shares the transaction with
// others, so what it wrote before returning an error is committed with
// them: Admit, Transition and Forget fail before they write; GC's
// deletions each stand alone.
//
// Group commit: concurrent callers queue their fn; the first becomes the
// committer and, until the queue is empty, takes everything queued, runs
// the fns one after another in one transaction (so each sees the writes of
// the ones before it: the compare-and-set of Transition holds within a
// batch), commits it with one write(2), fsyncs once through the ledger's own
// descriptor and releases the batch. A batch that a crash cuts short is
// harmless: each key is one record, and no caller was told its change was
// durable. After a failed fsync the in-memory state may be ahead of the
// disk, so the ledger refuses all further work.
func (l *Ledger) update(fn func(tx *buntdb.Tx) (bool, error)) error {
	return l.updateChange(&change{fn: fn, done: make(chan struct{})})
}

// updateChange is update for a prepared change (lazy: see AdmitLazy).
func (l *Ledger) updateChange(c *change) error {
	l.cmu.Lock()
	l.queue = append(l.queue, c)
	if l.committing {
		l.cmu.Unlock()
		<-c.done
		return c.err
	}
	l.committing = true
	for len(l.queue) > 0 {
		batch := l.queue
		l.queue = nil
		l.cmu.Unlock()
		l.commit(batch)
		l.cmu.Lock()
	}
	l.committing = false
	l.cmu.Unlock()
	<-c.done
	return c.err
}

// commit writes one batch of changes and releases their callers.
func (l *Ledger) commit(batch []*change) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	l.dur.Lock()
	defer l.dur.Unlock()
	if err := l.usable(); err != nil {
		for _, c := range batch {
			c.err = err
		}
		return
	}
	if err := l.awakeLocked(); err != nil {
		for _, c := range batch {
			c.err = err
		}
		return
	}
	var wrote []*change
	err := l.db.Update(func(tx *buntdb.Tx) error {
		for _, c := range batch {
			w, err := c.fn(tx)
			c.err = err
			if err == nil && w {
				wrote = append(wrote, c)
			}
		}
		return nil
	})
	if err != nil {
		for _, c := range batch {
			if c.err == nil {
				c.err = err
			}
		}
		return
	}
	if len(wrote) == 0 {
		return
	}
	defer l.countTerminal(wrote)
	if !slices.ContainsFunc(wrote, func(c *change) bool { return !c.lazy }) {
		// Only lazy writes: on disk with the next fsync.
		if l.unsynced == nil {
			l.unsynced = map[string]bool{}
		}
		for _, c := range wrote {
			l.unsynced[c.key] = true
		}
		return
	}
	l.unsynced = nil
	err = syncFile(l.dbf)
	if err == nil {
		if fi, serr := l.dbf.Stat(); serr == nil {
			l.synced = fi.Size()
		}
	}
	if err != nil {
		err = l.breakWith(fmt.Errorf("ledger %s unusable after a failed fsync, restart the daemon: %w", l.dir, err))
		for _, c := range wrote {
			c.err = err
		}
	}
}

// view runs fn in a buntdb read transaction that sees only durable state.
func (l *Ledger) view(fn func(tx *buntdb.Tx) error) error {
	for {
		if done, err := l.viewAwake(fn); done {
			return err
		}
		if err := l.wake(); err != nil {
			return err
		}
	}
}

// viewAwake is view if buntdb is open; it reports false if the ledger naps.
func (l *Ledger) viewAwake(fn func(tx *buntdb.Tx) error) (bool, error) {
	l.dur.RLock()
	defer l.dur.RUnlock()
	if l.db == nil {
		return false, nil
	}
	l.used()
	return true, l.db.View(fn)
}

// getEntry reads and decodes one entry inside a transaction: from buntdb,
// or else from the archive.
func (l *Ledger) getEntry(tx *buntdb.Tx, key string) (Entry, error) {
	e, err := getDBEntry(tx, key)
	if !errors.Is(err, ErrNotFound) || l.arch == nil {
		return e, err
	}
	l.amu.Lock()
	defer l.amu.Unlock()
	return l.arch.get(key)
}

// getDBEntry is getEntry from buntdb only.
func getDBEntry(tx *buntdb.Tx, key string) (Entry, error) {
	val, err := tx.Get(entryPrefix + key)
	if errors.Is(err, buntdb.ErrNotFound) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, err
	}
	e, err := decodeEntry([]byte(val))
	if err != nil {
		return Entry{}, fmt.Errorf("decode entry %q: %w", key, err)
	}
	return e, nil
}

func putEntry(tx *buntdb.Tx, e Entry) error {
	val, err := encodeEntry(e)
	if err != nil {
		return err
	}
	// Only a record that reads back goes in: one that did not would make
	// the next Open refuse the whole ledger as damaged, and a compaction
	// vouches for every record it rewrites (ledger.db.checked).
	if back, err := decodeEntry(val); err != nil || back.Key != e.Key {
		return fmt.Errorf("record %q would not read back: %v", e.Key, err)
	}
	_, _, err = tx.Set(entryPrefix+e.Key, string(val), nil) // nil options: never a TTL
	return err
}

// Admit records a new request. If the key is absent it stores e and returns
// (stored entry, true). If the key is present with the same ManifestSHA256
// it returns (existing entry, false) and writes nothing; with a different
// hash it returns (existing entry, false, ErrConflict).
//
// An empty Key becomes Agent+"/"+ID. ManifestSHA256 and Expires are
// required. An empty State means seen; otherwise it must be seen, pending,
// awaiting-approval, rejected, expired or cancelled (an id is owned only
// through Transition). FirstSeen defaults to now; Runs, Updated and History
// are set by the ledger.
func (l *Ledger) Admit(e Entry) (Entry, bool, error) { return l.admit(e, false) }

// AdmitLazy is Admit that returns before its write is on disk: the entry
// is visible at once, and durable with the ledger's next durable write
// (every write into a state other than seen, pending and claimed) or a
// clean Close. A crash may lose it; Durable tells whether it still can.
// Only an entry in seen or pending may be admitted so.
func (l *Ledger) AdmitLazy(e Entry) (Entry, bool, error) {
	if e.State != "" && !contains(lazyStates, e.State) {
		return Entry{}, false, fmt.Errorf("admit %s: %s must be durable", e.Key, e.State)
	}
	return l.admit(e, true)
}

func (l *Ledger) admit(e Entry, lazy bool) (Entry, bool, error) {
	if e.Key == "" && e.Agent != "" && e.ID != "" {
		e.Key = e.Agent + "/" + e.ID
	}
	if err := checkKey(e.Key); err != nil {
		return Entry{}, false, fmt.Errorf("admit %q: %w", e.Key, err)
	}
	if e.State == "" {
		e.State = StateSeen
	}
	switch {
	case e.ManifestSHA256 == "":
		return Entry{}, false, fmt.Errorf("admit %s: no manifest hash", e.Key)
	case e.Expires.IsZero():
		return Entry{}, false, fmt.Errorf("admit %s: no expiry", e.Key)
	case !contains(admitStates, e.State):
		return Entry{}, false, fmt.Errorf("admit %s: cannot start in state %q", e.Key, e.State)
	case len(e.Manifest) > 0 && sha256Hex(e.Manifest) != e.ManifestSHA256:
		return Entry{}, false, fmt.Errorf("admit %s: the manifest's bytes do not hash to %s", e.Key, e.ManifestSHA256)
	}
	now := time.Now()
	if e.FirstSeen.IsZero() {
		e.FirstSeen = now
	}
	e.Updated, e.Runs = now, 0
	e.History = []Transition{{State: e.State, At: now}}
	e = normalize(e)

	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return Entry{}, false, fmt.Errorf("admit %s: %w", e.Key, err)
	}
	var got Entry
	created := false
	err := l.updateChange(&change{key: e.Key, lazy: lazy, done: make(chan struct{}), fn: func(tx *buntdb.Tx) (bool, error) {
		old, err := l.getEntry(tx, e.Key)
		if err == nil {
			got = old
			if old.ManifestSHA256 != e.ManifestSHA256 {
				return false, fmt.Errorf("%w: recorded %s, offered %s", ErrConflict, old.ManifestSHA256, e.ManifestSHA256)
			}
			return false, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return false, err
		}
		got, created = e, true
		return true, putEntry(tx, e)
	}, terminal: e.State.Terminal()})
	if err != nil {
		if errors.Is(err, ErrConflict) {
			return got, false, fmt.Errorf("admit %s: %w", e.Key, err)
		}
		return Entry{}, false, fmt.Errorf("admit %s: %w", e.Key, err)
	}
	return got, created, nil
}

// Transition moves the entry for key to state to, as a compare-and-set in
// one write transaction: it fails with ErrWrongState, returning the current
// entry, if the current state is not in from, and with ErrNotFound if there
// is no entry. Every state in from must be allowed to reach to (see the
// package documentation); otherwise it fails without reading.
//
// mutate, if not nil, may change Op, Idempotent, ResultSHA256 and Reason;
// changes to other fields are discarded. It runs under the database write
// lock and must not call the Ledger. The ledger sets State, Updated, appends
// to History and, on entering running, increments Runs. When Transition
// returns nil the new state is on disk.
func (l *Ledger) Transition(key string, from []State, to State, mutate func(*Entry)) (Entry, error) {
	return l.transition(key, from, to, mutate, false)
}

// TransitionLazy is Transition that returns before its write is on disk
// (see AdmitLazy); to must be seen, pending or claimed. A crash may lose
// it, and the entry is then in the state before.
func (l *Ledger) TransitionLazy(key string, from []State, to State, mutate func(*Entry)) (Entry, error) {
	if !contains(lazyStates, to) {
		return Entry{}, fmt.Errorf("transition %s to %s: it must be durable", key, to)
	}
	return l.transition(key, from, to, mutate, true)
}

// Durable reports whether no lazy write of key is still waiting for an
// fsync: what the ledger holds for it survives a crash.
func (l *Ledger) Durable(key string) bool {
	l.dur.RLock()
	defer l.dur.RUnlock()
	return !l.unsynced[key]
}

// SyncedSize is the length of the ledger file as of its last fsync: what a
// power cut keeps of it (crash tests cut the file there).
func (l *Ledger) SyncedSize() int64 {
	l.dur.RLock()
	defer l.dur.RUnlock()
	return l.synced
}

// Path is the ledger file's path.
func (l *Ledger) Path() string { return filepath.Join(l.dir, dbFile) }

func (l *Ledger) transition(key string, from []State, to State, mutate func(*Entry), lazy bool) (Entry, error) {
	if len(from) == 0 {
		return Entry{}, fmt.Errorf("transition %s to %s: no expected state", key, to)
	}
	for _, s := range from {
		if !CanTransition(s, to) {
			return Entry{}, fmt.Errorf("transition %s: %s → %s is not allowed", key, s, to)
		}
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return Entry{}, fmt.Errorf("transition %s: %w", key, err)
	}
	var got Entry
	err := l.updateChange(&change{key: key, lazy: lazy, done: make(chan struct{}), fn: func(tx *buntdb.Tx) (bool, error) {
		cur, err := l.getEntry(tx, key)
		if err != nil {
			return false, err
		}
		if !contains(from, cur.State) {
			got = cur
			return false, fmt.Errorf("%w: it is %s, expected %v", ErrWrongState, cur.State, from)
		}
		next := cur
		next.History = slices.Clone(cur.History)
		if mutate != nil {
			mutate(&next)
		}
		// Only the fields the caller owns survive mutate.
		cur.Op, cur.Idempotent, cur.ResultSHA256, cur.Reason, cur.Exit = next.Op, next.Idempotent, next.ResultSHA256, next.Reason, next.Exit
		now := time.Now()
		cur.State, cur.Updated = to, now
		if to == StateRunning {
			cur.Runs++
		}
		cur.History = append(cur.History, Transition{State: to, At: now})
		if n := len(cur.History); n > maxHistory {
			cur.History = cur.History[n-maxHistory:]
		}
		got = normalize(cur)
		return true, putEntry(tx, got)
	}, terminal: to.Terminal()})
	if err != nil {
		if errors.Is(err, ErrWrongState) {
			return got, fmt.Errorf("transition %s to %s: %w", key, to, err)
		}
		return Entry{}, fmt.Errorf("transition %s to %s: %w", key, to, err)
	}
	return got, nil
}
