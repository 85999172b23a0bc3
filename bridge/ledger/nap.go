package ledger

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
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

// used records a use of buntdb, which puts off the next nap. The time is
// monotonic (since Open): a step of the wall clock moves no nap.
func (l *Ledger) used() { l.lastUse.Store(int64(time.Since(l.born))) }

// idle is how long the ledger has gone unused.
func (l *Ledger) idle() time.Duration { return time.Since(l.born) - time.Duration(l.lastUse.Load()) }

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
	if idle := l.idle(); idle < l.napAfter {
		l.napTimer.Reset(l.napAfter - idle)
		return
	}
	if l.usable() != nil {
		return // a failed fsync: left as it is, for the restart it asks for
	}
	// Lazy writes are on disk now: buntdb's Close flushes the file too, but
	// it ignores the error. A failed fsync breaks the ledger as in commit:
	// the kernel may have dropped the pages, and a later fsync would say
	// nothing of them.
	if len(l.unsynced) > 0 {
		if err := syncFile(l.dbf); err != nil {
			_ = l.breakWith(fmt.Errorf("ledger %s unusable after a failed fsync, restart the daemon: %w", l.dir, err))
			return
		}
		if fi, err := l.dbf.Stat(); err == nil {
			l.synced = fi.Size()
		}
		l.unsynced = nil
	}
	// The wake reads the whole file again, and every transition appends a
	// whole record: compacted as a clean Close would (nothing changes in
	// buntdb while dur is held), so a wake reads the live records only,
	// not everything since the start (40 MB after 20,000 requests).
	// Not on Windows, where a file open without FILE_SHARE_DELETE (Go's
	// way, and buntdb's) cannot be renamed over: there the rewrite would
	// be made and thrown away at every nap, and a wake reads it all.
	var keep map[string]string
	if runtime.GOOS != "windows" {
		keep = l.compactable()
	}
	if l.db.Close() != nil {
		// buntdb closed nothing it could not close again; stay awake.
		l.napTimer.Reset(l.napAfter)
		return
	}
	l.db = nil
	if keep != nil {
		// A failed rewrite leaves the old file whole (it is replaced by a
		// rename), which the wake reads all of; one that leaves the ledger
		// no descriptor of the new file breaks it.
		_ = l.compactAsleep(keep)
	}
	stamp, err := l.fileStamp(true)
	if err != nil {
		_ = l.breakWith(fmt.Errorf("ledger %s unusable: %w", l.dir, err))
		return
	}
	l.napStamp = stamp
	l.naps.Add(1)
}

// compactAsleep rewrites ledger.db with the live records while buntdb is
// closed, and moves the ledger's own descriptor to the new file.
func (l *Ledger) compactAsleep(keep map[string]string) error {
	path := l.Path()
	cerr := compactLive(path, keep)
	if cerr != nil {
		// Failed before its rename, the old file is in place, whole: it
		// stays the ledger's. After it (the directory's fsync), the new
		// file is the ledger's, but its name may not survive a power cut:
		// as a failed fsync.
		old, err1 := l.dbf.Stat()
		now, err2 := os.Stat(path)
		if err1 != nil || err2 != nil || os.SameFile(old, now) {
			return cerr
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		// The compacted file is in place and durable; without a
		// descriptor of it the ledger cannot fsync: as a failed fsync.
		return l.breakWith(fmt.Errorf("ledger %s unusable after its compaction, restart the daemon: %w", l.dir, err))
	}
	_ = l.dbf.Close()
	l.dbf = f
	if fi, err := f.Stat(); err == nil {
		l.synced = fi.Size()
	}
	if cerr != nil {
		return l.breakWith(fmt.Errorf("ledger %s unusable after a failed fsync of its directory, restart the daemon: %w", l.dir, cerr))
	}
	return nil
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
	if err := l.usable(); err != nil {
		return err
	}
	// buntdb opens the file by its name, creating it if missing, and reads
	// it whole: a file removed, replaced, or written over in place while
	// the ledger napped (a home restored from a backup under a running
	// daemon) would be taken for the ledger, and the requests it does not
	// know, or knows in an earlier state, would run again. The file must be
	// the one the ledger's own descriptor has open, unchanged since the nap
	// (its size, and its change time, which any write moves and no tool
	// sets back), before buntdb reads it and after; anything else breaks
	// the ledger, as a failed fsync does, for the restart that reads it
	// whole and checks it.
	if err := l.unchanged(); err != nil {
		return l.breakWith(err)
	}
	db, err := openBunt(l.Path())
	if err != nil {
		// Nothing is lost: the file is as the nap left it. The caller
		// fails; the next use tries again.
		return fmt.Errorf("wake ledger: %w", err)
	}
	if err := l.unchanged(); err != nil {
		_ = db.Close()
		return l.breakWith(err)
	}
	l.db = db
	l.wakes.Add(1)
	l.napTimer.Reset(l.napAfter)
	return nil
}

// A stamp tells the ledger's file as the nap left it: its change time
// says at once that nothing touched it; where something did (a chmod -R of
// the home moves the change time too, a write in place keeps the size), the
// content's hash says whether that was a write.
type stamp struct {
	fi      os.FileInfo
	size    int64
	changed int64 // the change time (ctime) where the system has one, else the modification time
	sum     [sha256.Size]byte
}

// fileStamp stamps the file the ledger's descriptor has open; with sum, it
// hashes it too (the nap's stamp: a file compacted to its live records).
func (l *Ledger) fileStamp(sum bool) (stamp, error) {
	fi, err := l.dbf.Stat()
	if err != nil {
		return stamp{}, err
	}
	st := stamp{fi: fi, size: fi.Size(), changed: changeTime(fi)}
	if sum {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(l.dbf, 0, st.size)); err != nil {
			return stamp{}, err
		}
		h.Sum(st.sum[:0])
	}
	return st, nil
}

// unchanged checks that the ledger's path names the file the ledger has
// open, with the content the nap left in it. A change of its metadata alone
// (mode, owner, times, links) is taken in: the nap's stamp moves on.
func (l *Ledger) unchanged() error {
	now, err := l.fileStamp(false)
	if err != nil {
		return fmt.Errorf("wake ledger: %w", err)
	}
	at, err := os.Stat(l.Path())
	if err != nil || !os.SameFile(now.fi, at) {
		return fmt.Errorf("ledger %s unusable: its file was removed or replaced while the daemon ran, restart the daemon (it reads the file that is there now)", l.dir)
	}
	if now.size == l.napStamp.size && now.changed == l.napStamp.changed {
		return nil
	}
	if now.size == l.napStamp.size {
		if now, err = l.fileStamp(true); err != nil {
			return fmt.Errorf("wake ledger: %w", err)
		}
		if now.sum == l.napStamp.sum {
			l.napStamp = now
			return nil
		}
	}
	return fmt.Errorf("ledger %s unusable: its file was written by something else while the daemon ran (%d bytes at its nap, %d now), restart the daemon (it reads the file that is there now)",
		l.dir, l.napStamp.size, now.size)
}

// Naps reports how many times the ledger has closed buntdb for being
// unused, and how many times it opened it again: what an idle daemon's tests
// wait for.
func (l *Ledger) Naps() (naps, wakes int64) { return l.naps.Load(), l.wakes.Load() }

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
