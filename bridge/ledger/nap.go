package ledger

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tidwall/buntdb"
)

// napAfter is how long the ledger goes unused before it closes buntdb
// (Ledger.napAfter, which tests shorten).
//
// buntdb v1.3.0 starts a goroutine with a one-second ticker in Open and
// stops it only in Close, whatever its configuration (its expiry and sync
// work, none of which the ledger uses: no TTL, SyncPolicy Never). Each tick
// wakes several threads of an idle daemon (the timer's, one to run the
// goroutine, the runtime's monitor): most of its wake-ups. So an unused
// ledger closes buntdb and opens it again at its next use, which reads the
// file's live records again (terminal entries go to the archive, so they
// are few): 0.3 ms for a few, 1.5 ms for 1,000. Nothing else changes: the lock,
// the descriptor the ledger fsyncs through, and the archive stay open, and
// every write is on disk before buntdb is closed.
const napAfter = 5 * time.Second

// openBunt opens ledger.db with buntdb, configured as the ledger uses it.
func openBunt(path string) (*buntdb.DB, error) {
	db, err := buntdb.Open(path)
	if errors.Is(err, buntdb.ErrInvalid) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	err = db.SetConfig(buntdb.Config{
		// The ledger fsyncs itself after each group commit (see update):
		// buntdb's own fsync would come on top of it, per transaction, with
		// its error ignored (#122).
		SyncPolicy: buntdb.Never,
		// buntdb's shrink renames an un-fsynced temp file over the database
		// (power loss can leave it empty) and panics on Windows (#119).
		AutoShrinkDisabled:   true,
		AutoShrinkPercentage: 100,
		AutoShrinkMinSize:    32 << 20,
	})
	// No buntdb indexes: they live in memory only (#86) and their rebuild at
	// Open parses JSON at every comparison (3 s for 100,000 entries), and
	// they cost on every write. The two queries that would use them scan
	// the records instead, matching on a field's canonical bytes first
	// (topField), which is cheap next to a decode.
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	return db, nil
}

// used records a use of buntdb, which puts off the next nap.
func (l *Ledger) used() { l.lastUse.Store(time.Now().UnixNano()) }

// nap closes buntdb if the ledger has not been used for napAfter, or
// sets its timer for when it will have been. It runs on the timer's
// goroutine.
func (l *Ledger) nap() {
	l.mu.RLock() // not while Close runs
	defer l.mu.RUnlock()
	if l.closed {
		return
	}
	l.dur.Lock()
	defer l.dur.Unlock()
	if l.db == nil {
		return
	}
	if idle := time.Since(time.Unix(0, l.lastUse.Load())); idle < l.napAfter {
		l.napTimer.Reset(l.napAfter - idle)
		return
	}
	if l.usable() != nil {
		return // a failed fsync: left as it is, for the restart it asks for
	}
	// Lazy writes are on disk now: buntdb's Close flushes the file too, but
	// it ignores the error.
	if len(l.unsynced) > 0 {
		if err := syncFile(l.dbf); err != nil {
			l.napTimer.Reset(l.napAfter)
			return
		}
		if fi, err := l.dbf.Stat(); err == nil {
			l.synced = fi.Size()
		}
		l.unsynced = nil
	}
	if l.db.Close() != nil {
		// buntdb closed nothing it could not close again; stay awake.
		l.napTimer.Reset(l.napAfter)
		return
	}
	l.db = nil
	l.naps.Add(1)
}

// wake opens buntdb again if the ledger is napping.
func (l *Ledger) wake() error {
	l.dur.Lock()
	defer l.dur.Unlock()
	return l.awakeLocked()
}

// awakeLocked is wake for a caller that holds dur for writing.
func (l *Ledger) awakeLocked() error {
	l.used()
	if l.db != nil {
		return nil
	}
	// buntdb opens the file by its name, creating it if missing: a file
	// removed or replaced while the ledger was open (a home restored from
	// a backup under a running daemon) would be taken for the ledger, and
	// the requests it does not know would run again. The ledger's own
	// descriptor says which file it is; anything else breaks the ledger,
	// as a failed fsync does, for the restart that reads it whole.
	if err := l.sameFile(); err != nil {
		return l.breakWith(err)
	}
	db, err := openBunt(l.Path())
	if err == nil {
		if err = l.sameFile(); err != nil {
			_ = db.Close()
			return l.breakWith(err)
		}
	}
	if err != nil {
		// Nothing is lost: the file is as the last commit left it. The
		// caller fails; the next use tries again.
		return fmt.Errorf("wake ledger: %w", err)
	}
	l.db = db
	l.wakes.Add(1)
	l.napTimer.Reset(l.napAfter)
	return nil
}

// Naps reports how many times the ledger has closed buntdb for being
// unused, and how many times it opened it again: what an idle daemon's tests
// wait for.
func (l *Ledger) Naps() (naps, wakes int64) { return l.naps.Load(), l.wakes.Load() }

// sameFile checks that the ledger's path still names the file the ledger
// opened.
func (l *Ledger) sameFile() error {
	want, err := l.dbf.Stat()
	if err != nil {
		return fmt.Errorf("wake ledger: %w", err)
	}
	got, err := os.Stat(l.Path())
	if err != nil || !os.SameFile(want, got) {
		return fmt.Errorf("ledger %s unusable: its file was removed or replaced while the daemon ran, restart the daemon (it reads the file that is there now)", l.dir)
	}
	return nil
}

// breakWith makes the ledger refuse all further work with err (the first
// such error stays), and returns it.
func (l *Ledger) breakWith(err error) error {
	l.bmu.Lock()
	defer l.bmu.Unlock()
	if l.broken == nil {
		l.broken = err
		close(l.brokenCh)
	}
	return err
}

// Unusable is closed once the ledger refuses all further work (a failed
// fsync, its file removed or replaced): what the daemon waits for to stop,
// rather than fail every request it sees. Err says why.
func (l *Ledger) Unusable() <-chan struct{} { return l.brokenCh }

// Err is why the ledger is unusable, or nil.
func (l *Ledger) Err() error {
	l.bmu.Lock()
	defer l.bmu.Unlock()
	return l.broken
}
