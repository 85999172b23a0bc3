package ledger

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tidwall/buntdb"
)

// Reads: one entry, lists by a filter or by state, what a collection may
// act on, and what a crash may have interrupted.

// Get returns the entry for key, or ErrNotFound.
func (l *Ledger) Get(key string) (Entry, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return Entry{}, fmt.Errorf("get %s: %w", key, err)
	}
	var e Entry
	err := l.view(func(tx *buntdb.Tx) error {
		var err error
		e, err = getEntry(tx, key)
		return err
	})
	if err != nil {
		return Entry{}, fmt.Errorf("get %s: %w", key, err)
	}
	return e, nil
}

// Missing returns those of keys that have no entry, in their order: a
// cache of the caller's may name entries that a restored or repaired ledger
// lost. Raw lookups, nothing decoded, the read lock taken per batch so
// that writers do not wait behind a long list.
func (l *Ledger) Missing(keys []string) ([]string, error) {
	var out []string
	for len(keys) > 0 {
		batch := keys[:min(len(keys), 1000)]
		keys = keys[len(batch):]
		l.mu.RLock()
		err := l.usable()
		if err == nil {
			err = l.view(func(tx *buntdb.Tx) error {
				for _, k := range batch {
					if _, err := tx.Get(entryPrefix + k); errors.Is(err, buntdb.ErrNotFound) {
						out = append(out, k)
					} else if err != nil {
						return err
					}
				}
				return nil
			})
		}
		l.mu.RUnlock()
		if err != nil {
			return nil, fmt.Errorf("missing entries: %w", err)
		}
	}
	return out, nil
}

// List returns the entries for which filter returns true (all if filter is
// nil), in key order. filter must not call the Ledger.
func (l *Ledger) List(filter func(Entry) bool) ([]Entry, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	out, err := l.scan(func(_, _ string) bool { return true }, filter)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	return out, nil
}

// byState returns the entries in the given states, in key order.
func (l *Ledger) byState(want ...State) ([]Entry, error) {
	return l.scan(func(_, v string) bool {
		st, _ := topField(v, "state")
		return slices.Contains(want, State(st))
	}, nil)
}

// scan decodes, in key order, the records that pre (on the raw key and
// record) and then keep (on the entry, if not nil) accept.
func (l *Ledger) scan(pre func(k, v string) bool, keep func(Entry) bool) ([]Entry, error) {
	var out []Entry
	var derr error
	err := l.view(func(tx *buntdb.Tx) error {
		return tx.AscendKeys(entryPrefix+"*", func(k, v string) bool {
			if !pre(k, v) {
				return true
			}
			e, err := decodeEntry([]byte(v))
			if err != nil {
				derr = fmt.Errorf("decode entry %q: %w", k, err)
				return false
			}
			if keep == nil || keep(e) {
				out = append(out, e)
			}
			return true
		})
	})
	if err == nil {
		err = derr
	}
	return out, err
}

// topField returns the string value of a top-level field of a canonical
// record: its first `,"name":"` (the nested history repeats "state" only
// after the top-level fields, and no value before them can hold a quote).
func topField(v, name string) (string, bool) {
	tag := `,"` + name + `":"`
	i := strings.Index(v, tag)
	if i < 0 {
		return "", false
	}
	rest := v[i+len(tag):]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return "", false
	}
	return rest[:j], true
}

// InState returns the entries in the given states, in key order. It
// decodes only those (List decodes every entry before filtering).
func (l *Ledger) InState(states ...State) ([]Entry, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return nil, fmt.Errorf("entries in state: %w", err)
	}
	out, err := l.byState(states...)
	if err != nil {
		return nil, fmt.Errorf("entries in state: %w", err)
	}
	return out, nil
}

// Settled returns, in key order, the terminal entries last updated before
// updatedBefore or expiring before expiresBefore: what a collection can
// act on. Younger ones are passed over without being decoded, so a ledger
// of 100,000 recent entries costs a collection a scan of raw records only.
// If want is not nil, an entry is decoded and returned only if want accepts
// its key and times: a caller that knows most settled entries need nothing
// (the daemon knows which results are published and which are acked) skips
// them undecoded too.
func (l *Ledger) Settled(updatedBefore, expiresBefore time.Time, want func(key string, updated, expires time.Time) bool) ([]Entry, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return nil, fmt.Errorf("settled entries: %w", err)
	}
	// Times are fixed-width UTC, so string order is time order.
	up, exp := formatTime(updatedBefore), formatTime(expiresBefore)
	out, err := l.scan(func(k, v string) bool {
		if st, _ := topField(v, "state"); !State(st).Terminal() {
			return false
		}
		u, _ := topField(v, "updated")
		e, _ := topField(v, "expires")
		if u >= up && e >= exp {
			return false
		}
		if want == nil {
			return true
		}
		// A time that does not parse is left to the decoder to report.
		ut, uerr := parseTime(u)
		et, eerr := parseTime(e)
		return uerr != nil || eerr != nil || want(strings.TrimPrefix(k, entryPrefix), ut, et)
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("settled entries: %w", err)
	}
	return out, nil
}

// InFlight returns the claimed and running entries, in key order: what a
// crash may have interrupted. The daemon calls it at start-up, before it
// serves, and re-runs an entry only if it is Idempotent; otherwise it moves
// it to uncertain.
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
