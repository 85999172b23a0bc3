package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Entry is the ledger's record of one request id.
type Entry struct {
	Key            string       `json:"key"`             // the caller's id, e.g. "<agent-id>/<request-id>"; Agent+"/"+ID if empty at Admit
	Agent          string       `json:"agent"`           // sender (agent) id
	ID             string       `json:"id"`              // request id
	State          State        `json:"state"`           // current state
	ManifestSHA256 string       `json:"manifest_sha256"` // SHA-256 of the exact manifest bytes; a second manifest for the key must match
	FirstSeen      time.Time    `json:"first_seen"`      // host clock at Admit
	Expires        time.Time    `json:"expires"`         // signed expiry from the manifest; GC keeps the entry until Expires+skew
	Op             string       `json:"op"`              // operation name, once the payload is decrypted
	Idempotent     bool         `json:"idempotent"`      // the policy marks Op safe to re-run after a crash
	ResultSHA256   string       `json:"result_sha256"`   // SHA-256 of the published result manifest
	Reason         string       `json:"reason"`          // why the entry is failed, rejected, uncertain, ...
	Exit           *int         `json:"exit,omitempty"`  // the op's exit code, when it ran (done): `bridge ls` shows a failing one
	Updated        time.Time    `json:"updated"`         // host clock of the last write
	Runs           int          `json:"runs"`            // how many times execution was started (entries into running)
	History        []Transition `json:"history"`
	// Manifest is the admitted manifest's bytes, carried while the request
	// is unanswered or uncertain (empty in a record written before the
	// ledger carried it): the host's kept copy of it is written without an
	// fsync, and reload, recovery and reconcile read it here. Entering a
	// terminal state drops it; nothing reloads a request once it is there.
	Manifest []byte `json:"-"`
}

// Transition is one step of an entry's History.
type Transition struct {
	State State     `json:"state"`
	At    time.Time `json:"at"`
}

// maxHistory bounds Entry.History; older steps are dropped first.
const maxHistory = 16

// maxKeyLen bounds a key; real keys are two kids or ids and a slash.
const maxKeyLen = 512

// formatVersion is the "v" field of every record and the value of the
// formatKey record. A reader refuses anything else.
const formatVersion = 1

// Key layout inside the buntdb file.
const (
	entryPrefix = "r/"
	formatKey   = "m/format"
	archiveKey  = "m/archive" // the archive's length as of the last move: see openArchive
)

// timeLayout is fixed-width UTC with nanoseconds so that the JSON is
// canonical and string order equals time order (the expiry index relies on
// it). time.RFC3339Nano trims trailing zeros and would break both.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

// record is the on-disk JSON of an entry. Every field is always present, in
// this order, so one entry has exactly one encoding.
type record struct {
	V              int             `json:"v"`
	Key            string          `json:"key"`
	Agent          string          `json:"agent"`
	ID             string          `json:"id"`
	State          State           `json:"state"`
	ManifestSHA256 string          `json:"manifest_sha256"`
	FirstSeen      string          `json:"first_seen"`
	Expires        string          `json:"expires"`
	Op             string          `json:"op"`
	Idempotent     bool            `json:"idempotent"`
	ResultSHA256   string          `json:"result_sha256"`
	Reason         string          `json:"reason"`
	Exit           *int            `json:"exit,omitempty"` // an older record has none
	Updated        string          `json:"updated"`
	Runs           int             `json:"runs"`
	History        []historyRecord `json:"history"`
	Manifest       []byte          `json:"manifest,omitempty"` // base64; a record written before it has none
}

type historyRecord struct {
	State State  `json:"state"`
	At    string `json:"at"`
}

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

// parseTimeBytes is parseTime of b. A time in the form formatTime writes
// (digits where timeLayout has them, every field in its range) is read
// without time.Parse; anything else goes through parseTime, so it is
// accepted or refused exactly as there, with the same error.
func parseTimeBytes(b []byte) (time.Time, error) {
	if len(b) == len(timeLayout) && b[4] == '-' && b[7] == '-' && b[10] == 'T' && b[13] == ':' && b[16] == ':' && b[19] == '.' && b[29] == 'Z' {
		num := func(i, j int) int {
			n := 0
			for _, c := range b[i:j] {
				if c < '0' || c > '9' {
					return -1
				}
				n = n*10 + int(c-'0')
			}
			return n
		}
		y, mo, d, h, mi, sec, ns := num(0, 4), num(5, 7), num(8, 10), num(11, 13), num(14, 16), num(17, 19), num(20, 29)
		if y >= 0 && mo >= 1 && mo <= 12 && d >= 1 && h >= 0 && h <= 23 && mi >= 0 && mi <= 59 && sec >= 0 && sec <= 59 && ns >= 0 {
			t := time.Date(y, time.Month(mo), d, h, mi, sec, ns, time.UTC)
			if t.Day() == d { // not normalised into the next month: the day exists
				return t, nil
			}
		}
	}
	return parseTime(string(b))
}

// normalize gives the in-memory form that round-trips through the encoding:
// UTC, no monotonic reading, within years 0000-9999, non-nil History.
func normalize(e Entry) Entry {
	e.FirstSeen = clampTime(e.FirstSeen)
	e.Expires = clampTime(e.Expires)
	e.Updated = clampTime(e.Updated)
	h := make([]Transition, len(e.History))
	for i, t := range e.History {
		h[i] = Transition{State: t.State, At: clampTime(t.At)}
	}
	e.History = h
	if e.State.Terminal() || len(e.Manifest) == 0 {
		e.Manifest = nil
	}
	return e
}

// The times timeLayout can write: a year of four digits.
var (
	minTime = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// clampTime is t in UTC without a monotonic reading, moved into the years
// the encoding can write. An agent signs its request's expiry, so a
// rejected request can carry any time; the ledger records it (the id must
// stay taken) with the nearest one it can write, rather than a record that
// would not read back.
func clampTime(t time.Time) time.Time {
	switch t = t.UTC().Round(0); {
	case t.Before(minTime):
		return minTime
	case t.After(maxTime):
		return maxTime
	}
	return t
}

func encodeEntry(e Entry) ([]byte, error) {
	r := record{
		V: formatVersion, Key: e.Key, Agent: e.Agent, ID: e.ID, State: e.State,
		ManifestSHA256: e.ManifestSHA256, FirstSeen: formatTime(e.FirstSeen),
		Expires: formatTime(e.Expires), Op: e.Op, Idempotent: e.Idempotent,
		ResultSHA256: e.ResultSHA256, Reason: e.Reason, Exit: e.Exit, Updated: formatTime(e.Updated),
		Runs: e.Runs, History: make([]historyRecord, len(e.History)), Manifest: e.Manifest,
	}
	for i, t := range e.History {
		r.History[i] = historyRecord{State: t.State, At: formatTime(t.At)}
	}
	return json.Marshal(r)
}

var errNotCanonical = errors.New("record is not in canonical form")

// decodeEntry parses a record strictly: unknown fields, trailing data, a
// foreign version, an invalid state or any encoding other than the one
// encodeEntry produces are errors. A record that does not round-trip is
// damage, not something to guess about.
func decodeEntry(data []byte) (Entry, error) {
	if e, ok := decoded.get(data); ok {
		return e, nil
	}
	e, err := decodeRecord(data)
	if err == nil {
		decoded.put(data, e)
	}
	return e, err
}

// decoded remembers the last records decoded: a request's record is
// decoded again and again while it is in flight (each state change reads
// it, writes it and reads the write back; every check between reads it),
// and JSON decoding was a twentieth of the daemon's CPU per request. A
// record's bytes decode to one entry, whoever asks.
var decoded = &decodeCache{m: map[string]Entry{}}

type decodeCache struct {
	mu    sync.Mutex
	m     map[string]Entry
	order []string // oldest first
}

const decodeCacheMax = 256

func (c *decodeCache) get(data []byte) (Entry, bool) {
	c.mu.Lock()
	e, ok := c.m[string(data)]
	c.mu.Unlock()
	if ok {
		e.History = slices.Clone(e.History) // the caller's to change
	}
	return e, ok
}

func (c *decodeCache) put(data []byte, e Entry) {
	e.History = slices.Clone(e.History)
	c.mu.Lock()
	defer c.mu.Unlock()
	k := string(data)
	if _, ok := c.m[k]; ok {
		return
	}
	if len(c.order) >= decodeCacheMax {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	c.m[k] = e
	c.order = append(c.order, k)
}

// decodeRecord decodes a record's bytes, strictly.
func decodeRecord(data []byte) (Entry, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r record
	if err := dec.Decode(&r); err != nil {
		return Entry{}, err
	}
	if dec.More() {
		return Entry{}, errors.New("trailing data after record")
	}
	if r.V != formatVersion {
		return Entry{}, fmt.Errorf("unsupported record version %d", r.V)
	}
	if !r.State.Valid() {
		return Entry{}, fmt.Errorf("unknown state %q", r.State)
	}
	switch {
	case r.Manifest != nil && r.State.Terminal():
		return Entry{}, fmt.Errorf("%w: a %s record carries a manifest", errNotCanonical, r.State)
	case r.Manifest != nil && sha256Hex(r.Manifest) != r.ManifestSHA256:
		return Entry{}, errors.New("its manifest does not hash to manifest_sha256")
	}
	e := Entry{
		Key: r.Key, Agent: r.Agent, ID: r.ID, State: r.State, ManifestSHA256: r.ManifestSHA256,
		Op: r.Op, Idempotent: r.Idempotent, ResultSHA256: r.ResultSHA256, Reason: r.Reason, Exit: r.Exit,
		Runs: r.Runs, History: make([]Transition, len(r.History)), Manifest: r.Manifest,
	}
	var err error
	if e.FirstSeen, err = parseTime(r.FirstSeen); err != nil {
		return Entry{}, err
	}
	if e.Expires, err = parseTime(r.Expires); err != nil {
		return Entry{}, err
	}
	if e.Updated, err = parseTime(r.Updated); err != nil {
		return Entry{}, err
	}
	for i, h := range r.History {
		if !h.State.Valid() {
			return Entry{}, fmt.Errorf("unknown state %q in history", h.State)
		}
		if e.History[i].At, err = parseTime(h.At); err != nil {
			return Entry{}, err
		}
		e.History[i].State = h.State
	}
	again, err := encodeEntry(e)
	if err != nil {
		return Entry{}, err
	}
	if !bytes.Equal(again, data) {
		return Entry{}, errNotCanonical
	}
	return e, nil
}

// checkKey rejects keys that could not have come from a well-formed request:
// the ledger is the last line before execution, so it does not trust callers
// to have validated.
func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case len(key) > maxKeyLen:
		return fmt.Errorf("key longer than %d bytes", maxKeyLen)
	case !utf8.ValidString(key):
		return errors.New("key is not valid UTF-8")
	case strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errors.New("key contains control characters")
	}
	return nil
}

// sha256Hex is the lower-case hex SHA-256 of data, as manifest_sha256 holds it.
func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
