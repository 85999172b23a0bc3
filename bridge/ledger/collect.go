package ledger

import (
	"errors"
	"fmt"
	"time"

	"github.com/tidwall/buntdb"
)

// collectable reports whether an entry may go: terminal and past its
// Expires+skew. In flight and uncertain entries are kept however old:
// forgetting them would let a replay run again.
func collectable(e Entry, now time.Time, skew time.Duration) bool {
	return e.State.Terminal() && e.Expires.Add(skew).Before(now)
}

// Forget deletes one entry, only if it is collectable (re-checked under the
// write lock), and reports whether it did. The daemon decides which (it
// keeps a collectable entry while its result is still in the folder).
func (l *Ledger) Forget(key string, now time.Time, skew time.Duration) (bool, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return false, fmt.Errorf("forget: %w", err)
	}
	l.moveMu.Lock()
	defer l.moveMu.Unlock()
	done, inDB := false, true
	err := l.update(func(tx *buntdb.Tx) (bool, error) {
		e, err := getDBEntry(tx, key)
		if errors.Is(err, ErrNotFound) {
			inDB = false
			return false, nil
		} else if err != nil {
			return false, err
		}
		if !collectable(e, now, skew) {
			return false, nil
		}
		if _, err := tx.Delete(entryPrefix + key); err != nil {
			return false, err
		}
		done = true
		return true, nil
	})
	if err == nil && !inDB {
		var n int
		n, err = l.dropArchived([]string{key}, nil, now, skew)
		done = n > 0
	} else if err == nil && done {
		_, err = l.dropArchived(nil, []string{key}, now, skew)
	}
	if err != nil {
		return false, fmt.Errorf("forget %s: %w", key, err)
	}
	return done, nil
}
