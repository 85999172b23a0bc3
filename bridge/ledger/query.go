package ledger

import (
	"bytes"
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
		e, err = l.getEntry(tx, key)
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
				l.amu.Lock()
				defer l.amu.Unlock()
				for _, k := range batch {
					if _, err := tx.Get(entryPrefix + k); errors.Is(err, buntdb.ErrNotFound) {
						if _, ok := l.arch.idx[k]; !ok {
							out = append(out, k)
						}
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
	out, err := l.scan(func(_, _ string) bool { return true }, func(string, archRef) bool { return true }, filter)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	return out, nil
}

// byState returns the entries in the given states, in key order.
func (l *Ledger) byState(want ...State) ([]Entry, error) {
	var apre func(string, archRef) bool // the archive holds terminal entries only
	if slices.ContainsFunc(want, State.Terminal) {
		apre = func(_ string, r archRef) bool { return slices.Contains(want, states[r.state]) }
	}
	return l.scan(func(_, v string) bool {
		st, _ := topField(v, "state")
		return slices.Contains(want, State(st))
	}, apre, nil)
}

// scan decodes, in key order, the records that pre (on the raw key and
// record) and then keep (on the entry, if not nil) accept. Archived
// entries are offered to apre (on the key and index entry; nil: none of
// them is wanted) instead of pre, and read from the archive only if it
// takes them.
func (l *Ledger) scan(pre func(k, v string) bool, apre func(k string, r archRef) bool, keep func(Entry) bool) ([]Entry, error) {
	var out []Entry
	var derr error
	var akeys []string
	var arefs []archRef
	err := l.view(func(tx *buntdb.Tx) error {
		err := tx.AscendKeys(entryPrefix+"*", func(k, v string) bool {
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
		if err != nil || derr != nil || apre == nil {
			return err
		}
		// In the same view: an entry a move is taking to the archive is
		// still in buntdb, and listed from there only.
		akeys, arefs = l.archived(apre)
		j := 0
		for i, k := range akeys {
			if _, err := tx.Get(entryPrefix + k); errors.Is(err, buntdb.ErrNotFound) {
				akeys[j], arefs[j] = k, arefs[i]
				j++
			}
		}
		akeys, arefs = akeys[:j], arefs[:j]
		return nil
	})
	if err == nil {
		err = derr
	}
	if err != nil || len(akeys) == 0 {
		return out, err
	}
	// Read outside the view: an archived entry never changes, and its
	// bytes stay where they are until a compaction, which only Open and
	// Close run (l.mu is held for reading here).
	var archived []Entry
	for i, k := range akeys {
		e, err := l.arch.read(k, arefs[i])
		if err != nil {
			return nil, err
		}
		if keep == nil || keep(e) {
			archived = append(archived, e)
		}
	}
	return mergeByKey(out, archived), nil
}

// mergeByKey merges two lists of entries in key order.
func mergeByKey(a, b []Entry) []Entry {
	if len(a) == 0 {
		return b
	}
	out := make([]Entry, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].Key < b[0].Key {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// topField returns the string value of a top-level field of a canonical
// record: its first `,"name":"` (the nested history repeats "state" only
// after the top-level fields, and no value before them can hold a quote).
func topField(v, name string) (string, bool) {
	tag := fieldTag(name)
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

// fieldTag is what precedes the value of a top-level string field name in
// a record (never its first field, the version).
func fieldTag(name string) string { return `,"` + name + `":"` }

// topFieldBytes is topField of a record's bytes, for a tag fieldTag made;
// the value shares v's bytes.
func topFieldBytes(v []byte, tag string) ([]byte, bool) {
	i := bytes.Index(v, []byte(tag))
	if i < 0 {
		return nil, false
	}
	rest := v[i+len(tag):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return nil, false
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
	}, func(k string, r archRef) bool {
		ut, et := r.times()
		if r.clamped() {
			// A time the index cannot hold: the record's own (rare; the
			// ledger only clamps an agent's far expiry or a broken clock).
			e, err := l.arch.read(k, r)
			if err != nil {
				return true // the read in scan reports it
			}
			ut, et = e.Updated, e.Expires
		}
		if !ut.Before(updatedBefore) && !et.Before(expiresBefore) {
			return false
		}
		return want == nil || want(k, ut, et)
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("settled entries: %w", err)
	}
	return out, nil
}
