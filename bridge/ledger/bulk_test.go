package ledger

// What the ledger's own tests use and the daemon does not: the daemon
// collects entry by entry with Forget (it keeps a collectable entry while
// its result is still in the folder), reads its state through List and
// Settled, and recovers from InState. These exercise the same paths
// (gcCandidates' scan, dropArchived, the archive's index) in bulk.

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tidwall/buntdb"
)

// gcBatch bounds how many deletions share one transaction. A crash can
// apply part of a batch; each deletion stands on its own, so that is fine.
const gcBatch = 256

// GCCandidates returns, in expiry order, the entries GC would delete: those
// in a terminal state whose Expires+skew is before now.
func (l *Ledger) GCCandidates(now time.Time, skew time.Duration) ([]Entry, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}
	out, err := l.gcCandidates(now, skew)
	if err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}
	return out, nil
}

func (l *Ledger) gcCandidates(now time.Time, skew time.Duration) ([]Entry, error) {
	// Times are fixed-width UTC, so string order is time order.
	pivot := formatTime(now.Add(-skew))
	out, err := l.scan(func(_, v string) bool {
		exp, ok := topField(v, "expires")
		return !ok || exp < pivot
	}, func(_ string, r archRef) bool {
		return r.expires < unixNano(now.Add(-skew))
	}, func(e Entry) bool { return collectable(e, now, skew) })
	slices.SortStableFunc(out, func(a, b Entry) int { return a.Expires.Compare(b.Expires) })
	return out, err
}

// GC deletes the entries GCCandidates returns and reports how many it
// deleted. Entries in any other state, in flight and uncertain included,
// are kept however old: forgetting them would let a replay run again.
func (l *Ledger) GC(now time.Time, skew time.Duration) (int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return 0, fmt.Errorf("gc: %w", err)
	}
	l.moveMu.Lock()
	defer l.moveMu.Unlock()
	cands, err := l.gcCandidates(now, skew)
	if err != nil {
		return 0, fmt.Errorf("gc: %w", err)
	}
	n := 0
	var archived, deleted []string
	for batch := range slices.Chunk(cands, gcBatch) {
		err := l.update(func(tx *buntdb.Tx) (bool, error) {
			wrote := false
			for _, c := range batch {
				// Re-check under the write lock: the entry may have changed.
				e, err := getDBEntry(tx, c.Key)
				if errors.Is(err, ErrNotFound) {
					archived = append(archived, c.Key)
					continue
				}
				if err != nil {
					return wrote, err
				}
				if !collectable(e, now, skew) {
					continue
				}
				if _, err := tx.Delete(entryPrefix + c.Key); err != nil {
					return wrote, err
				}
				deleted = append(deleted, c.Key)
				wrote = true
				n++
			}
			return wrote, nil
		})
		if err != nil {
			return 0, fmt.Errorf("gc: %w", err)
		}
	}
	// Out of buntdb first, then out of the archive (see archiveFile).
	m, err := l.dropArchived(archived, deleted, now, skew)
	if err != nil {
		return n, fmt.Errorf("gc: %w", err)
	}
	return n + m, nil
}

// Stats summarises the ledger for the tests.
type Stats struct {
	Total        int
	States       map[State]int // entries per state; absent states count 0
	FileSize     int64         // bytes of ledger.db; it only grows until Open compacts it
	TailDropped  int64         // bytes of a torn tail that Open cut off (a crash happened)
	Archived     int           // entries of Total in the archive, on disk only (terminal ones)
	ArchiveSize  int64         // bytes of ledger.archive
	ArchiveError string        // why the last move to the archive failed, if it did (the entries stayed in memory)
}

// Stats counts the entries per state.
func (l *Ledger) Stats() (Stats, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return Stats{}, fmt.Errorf("stats: %w", err)
	}
	st := Stats{States: map[State]int{}, TailDropped: l.tailDropped}
	err := l.view(func(tx *buntdb.Tx) error {
		err := tx.AscendKeys(entryPrefix+"*", func(k, v string) bool {
			s, _ := topField(v, "state")
			st.States[State(s)]++
			st.Total++
			return true
		})
		if err != nil {
			return err
		}
		l.amu.Lock()
		defer l.amu.Unlock()
		for k, r := range l.arch.idx {
			if _, err := tx.Get(entryPrefix + k); errors.Is(err, buntdb.ErrNotFound) {
				st.States[states[r.state]]++
				st.Total++
				st.Archived++
			}
		}
		st.ArchiveSize = l.arch.size
		if l.arch.err != nil {
			st.ArchiveError = l.arch.err.Error()
		}
		return nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("stats: %w", err)
	}
	fi, err := l.dbf.Stat()
	if err != nil {
		return Stats{}, fmt.Errorf("stats: %w", err)
	}
	st.FileSize = fi.Size()
	return st, nil
}

// InFlight returns the claimed and running entries, in key order: what a
// crash may have interrupted.
func (l *Ledger) InFlight() ([]Entry, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return nil, fmt.Errorf("in-flight entries: %w", err)
	}
	out, err := l.byState(StateClaimed, StateRunning)
	if err != nil {
		return nil, fmt.Errorf("in-flight entries: %w", err)
	}
	return out, nil
}
