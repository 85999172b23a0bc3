package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestDurableAcrossReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "ledger")
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	mustAdmit(t, l, testEntry("a/1", exp))
	mustAdmit(t, l, testEntry("a/2", exp))
	e3 := testEntry("b/3", exp)
	e3.State = StateRejected
	e3.Reason = "bad signature"
	mustAdmit(t, l, e3)
	mustTransition(t, l, "a/1", StateSeen, StateClaimed)
	mustTransition(t, l, "a/1", StateClaimed, StateRunning)
	if _, err := l.Transition("a/1", []State{StateRunning}, StateDone, func(e *Entry) {
		e.Op, e.ResultSHA256 = "test", strings.Repeat("ab", 32)
	}); err != nil {
		t.Fatal(err)
	}
	want, err := l.List(nil)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)

	l = mustOpen(t, dir)
	defer mustClose(t, l)
	got, err := l.List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen:\n got %+v\nwant %+v", got, want)
	}
	if len(got) != 3 || got[0].State != StateDone || got[0].Runs != 1 || got[0].Op != "test" {
		t.Fatalf("unexpected entries %+v", got)
	}

	raw := readFile(t, dbPath(dir))
	for _, ttl := range []string{"$2\r\nae\r\n", "$2\r\nex\r\n", "*5\r\n"} {
		if bytes.Contains(raw, []byte(ttl)) {
			t.Errorf("ledger file contains an expiring record (%q)", ttl)
		}
	}
	// The two terminal entries (a/1 done, b/3 rejected) went to the
	// archive when the ledger closed; a/2 (seen) stayed in the file.
	if s := scanLog(raw, 0); !s.clean() || s.entries() != 1 {
		t.Errorf("file scan: clean %v, entries %d, %s", s.clean(), s.entries(), s.problem())
	}
	if snap, err := Snapshot(dir); err != nil || !reflect.DeepEqual(snap, got) {
		t.Errorf("snapshot of the file and the archive: %v\n got %+v\nwant %+v", err, snap, got)
	}
	if runtime.GOOS != "windows" {
		for path, want := range map[string]os.FileMode{
			dir: 0o700, dbPath(dir): 0o600, filepath.Join(dir, lockFile): 0o600, filepath.Join(dir, archiveFile): 0o600,
		} {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != want {
				t.Errorf("%s: mode %#o, want %#o", path, fi.Mode().Perm(), want)
			}
		}
	}
}

func TestRecordFormat(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 800, time.FixedZone("x", 3600))
	e := Entry{
		Key: "ag/req", Agent: "ag", ID: "req", State: StateDone, ManifestSHA256: "m",
		FirstSeen: at, Expires: at.Add(time.Hour), Op: "build", Idempotent: true,
		ResultSHA256: "r", Reason: "", Updated: at, Runs: 1,
		History: []Transition{{State: StateSeen, At: at}},
	}
	got, err := encodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"key":"ag/req","agent":"ag","id":"req","state":"done","manifest_sha256":"m",` +
		`"first_seen":"2026-03-04T04:06:07.000000800Z","expires":"2026-03-04T05:06:07.000000800Z",` +
		`"op":"build","idempotent":true,"result_sha256":"r","reason":"","updated":"2026-03-04T04:06:07.000000800Z",` +
		`"runs":1,"history":[{"state":"seen","at":"2026-03-04T04:06:07.000000800Z"}]}`
	if string(got) != want {
		t.Fatalf("record:\n got %s\nwant %s", got, want)
	}
	back, err := decodeEntry(got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, normalize(e)) {
		t.Fatalf("round trip: got %+v", back)
	}
	for name, bad := range map[string]string{
		"unknown field":  strings.Replace(want, `"v":1,`, `"v":1,"x":2,`, 1),
		"other version":  strings.Replace(want, `"v":1`, `"v":2`, 1),
		"not canonical":  strings.Replace(want, `"op":`, `"op" :`, 1),
		"short time":     strings.Replace(want, `07.000000800Z","expires"`, `07.0000008Z","expires"`, 1),
		"unknown state":  strings.Replace(want, `"state":"done"`, `"state":"odd"`, 1),
		"trailing value": want + `{}`,
	} {
		if _, err := decodeEntry([]byte(bad)); err == nil {
			t.Errorf("%s: decoded %s", name, bad)
		}
	}
}

// The admitted manifest rides in the record while the request is
// unanswered or uncertain (the host's own copy of it is not fsynced): on
// disk through every durable and lazy step and a reopen, dropped on entering
// a terminal state. A manifest that does not hash to the recorded SHA-256 is
// refused, and a record with one more member than encodeEntry writes, or a
// manifest not in canonical base64, is damage.
func TestManifestRidesUntilAnswered(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	manifest := []byte(`{"a signed manifest":"its bytes"}`)
	withManifest := func(key string) Entry {
		e := testEntry(key, exp)
		e.Manifest, e.ManifestSHA256 = manifest, sha256Hex(manifest)
		return e
	}
	bad := withManifest("a/0")
	bad.ManifestSHA256 = fmt.Sprintf("%064x", 1)
	if _, _, err := l.AdmitLazy(bad); err == nil {
		t.Fatal("admitted a manifest that does not hash to the recorded SHA-256")
	}
	for _, key := range []string{"a/1", "a/2"} {
		if _, _, err := l.AdmitLazy(withManifest(key)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.TransitionLazy(key, []State{StateSeen}, StateClaimed, nil); err != nil {
			t.Fatal(err)
		}
		mustTransition(t, l, key, StateClaimed, StateRunning)
	}
	mustTransition(t, l, "a/1", StateRunning, StateUncertain)
	mustTransition(t, l, "a/2", StateRunning, StateDone)
	mustClose(t, l)

	l = mustOpen(t, dir)
	defer mustClose(t, l)
	for key, want := range map[string][]byte{"a/1": manifest, "a/2": nil} {
		e, err := l.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e.Manifest, want) {
			t.Errorf("%s, %s after a reopen: manifest %q, want %q", key, e.State, e.Manifest, want)
		}
	}
	e := withManifest("ag/req")
	e.State, e.Updated, e.FirstSeen = StateRunning, exp, exp
	rec, err := encodeEntry(normalize(e))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(rec, []byte(`,"manifest":"eyJhIHNpZ25lZCBtYW5pZmVzdCI6Iml0cyBieXRlcyJ9"}`)) {
		t.Fatalf("record %s: not ending in the manifest's base64", rec)
	}
	if back, err := decodeEntry(rec); err != nil || !bytes.Equal(back.Manifest, manifest) {
		t.Fatalf("the running record with its manifest does not read back: %v", err)
	}
	e.State = StateDone
	if rec, _ := encodeEntry(normalize(e)); bytes.Contains(rec, []byte(`"manifest":`)) {
		t.Errorf("a terminal record carries the manifest: %s", rec)
	}
	// A terminal record never carries one (encodeEntry of what normalize
	// left is the only encoding): one that does is damage.
	if _, err := decodeEntry(bytes.Replace(rec, []byte(`"state":"running"`), []byte(`"state":"done"`), 1)); err == nil {
		t.Error("decoded a done record that carries a manifest")
	}
	e.State, e.Manifest = StateRunning, nil
	plain, err := encodeEntry(normalize(e))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeEntry(plain); err != nil {
		t.Fatalf("a record without a manifest (as one written before it): %v", err)
	}
	for name, member := range map[string]string{
		"empty manifest":     `,"manifest":""`,
		"unpadded base64":    `,"manifest":"eyJ9fQ"`,
		"base64 with a line": `,"manifest":"eyJ9\nfQ=="`,
		"url-safe base64":    `,"manifest":"eyJ9_Q=="`,
		"null manifest":      `,"manifest":null`,
		"another manifest":   `,"manifest":"eyJ9fQ=="`, // does not hash to manifest_sha256
	} {
		bad := string(plain[:len(plain)-1]) + member + "}"
		if _, err := decodeEntry([]byte(bad)); err == nil {
			t.Errorf("%s: decoded %s", name, bad)
		}
	}
}

func TestAdmit(t *testing.T) {
	l := mustOpen(t, t.TempDir())
	defer mustClose(t, l)
	exp := time.Now().Add(time.Hour)

	first := mustAdmit(t, l, Entry{Agent: "ag", ID: "r1", ManifestSHA256: "h1", Expires: exp})
	if first.Key != "ag/r1" || first.State != StateSeen || len(first.History) != 1 || first.FirstSeen.IsZero() {
		t.Fatalf("admitted %+v", first)
	}
	size := func() int64 {
		st, err := l.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st.FileSize
	}
	before := size()
	again, created, err := l.Admit(Entry{Key: "ag/r1", ManifestSHA256: "h1", Expires: exp.Add(time.Hour)})
	if err != nil || created || !reflect.DeepEqual(again, first) {
		t.Fatalf("second Admit = %+v, %v, %v; want the first entry, false, nil", again, created, err)
	}
	if size() != before {
		t.Errorf("a duplicate Admit wrote to the file")
	}
	old, created, err := l.Admit(Entry{Key: "ag/r1", ManifestSHA256: "h2", Expires: exp})
	if !errors.Is(err, ErrConflict) || created || old.ManifestSHA256 != "h1" {
		t.Fatalf("conflicting Admit = %+v, %v, %v; want the recorded entry and ErrConflict", old, created, err)
	}

	for name, e := range map[string]Entry{
		"no key":        {ManifestSHA256: "h", Expires: exp},
		"control char":  {Key: "a/\n", ManifestSHA256: "h", Expires: exp},
		"no hash":       {Key: "a/b", Expires: exp},
		"no expiry":     {Key: "a/b", ManifestSHA256: "h"},
		"claimed":       {Key: "a/b", ManifestSHA256: "h", Expires: exp, State: StateClaimed},
		"running":       {Key: "a/b", ManifestSHA256: "h", Expires: exp, State: StateRunning},
		"done":          {Key: "a/b", ManifestSHA256: "h", Expires: exp, State: StateDone},
		"unknown state": {Key: "a/b", ManifestSHA256: "h", Expires: exp, State: "odd"},
		"key too long":  {Key: strings.Repeat("k", maxKeyLen+1), ManifestSHA256: "h", Expires: exp},
		"invalid utf8":  {Key: "a/\xff", ManifestSHA256: "h", Expires: exp},
		"agent only":    {Agent: "a", ManifestSHA256: "h", Expires: exp},
	} {
		if _, _, err := l.Admit(e); err == nil {
			t.Errorf("%s: Admit accepted %+v", name, e)
		}
	}
	if _, err := l.Get("a/b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused Admit left an entry: %v", err)
	}
}

func TestTransition(t *testing.T) {
	l := mustOpen(t, t.TempDir())
	defer mustClose(t, l)
	mustAdmit(t, l, testEntry("a/1", time.Now().Add(time.Hour)))

	if _, err := l.Transition("a/none", []State{StateSeen}, StateClaimed, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing key: %v, want ErrNotFound", err)
	}
	cur, err := l.Transition("a/1", []State{StateClaimed}, StateRunning, nil)
	if !errors.Is(err, ErrWrongState) || cur.State != StateSeen || !strings.Contains(err.Error(), "it is seen") {
		t.Errorf("wrong state: %+v, %v; want the current entry and ErrWrongState naming seen", cur, err)
	}
	for _, c := range []struct{ from, to State }{
		{StateSeen, StateRunning}, {StateSeen, StateDone}, {StateDone, StateClaimed},
		{StateFailed, StateRunning}, {StatePending, StateRunning}, {StateUncertain, StateRunning}, {StateSeen, "odd"},
	} {
		if _, err := l.Transition("a/1", []State{c.from}, c.to, nil); err == nil || errors.Is(err, ErrWrongState) {
			t.Errorf("%s → %s: %v, want an illegal-transition error", c.from, c.to, err)
		}
	}

	e, err := l.Transition("a/1", []State{StateSeen, StatePending}, StateClaimed, func(e *Entry) {
		e.Op, e.Idempotent, e.Reason = "build", true, "policy ok"
		// Fields the ledger owns: these changes must be discarded.
		e.Key, e.ManifestSHA256, e.Runs, e.State, e.Expires = "x/y", "forged", 7, StateDone, time.Time{}
		e.History = nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if e.Key != "a/1" || e.ManifestSHA256 != testEntry("a/1", time.Time{}).ManifestSHA256 || e.Runs != 0 ||
		e.State != StateClaimed || e.Expires.IsZero() || len(e.History) != 2 || e.Op != "build" || !e.Idempotent {
		t.Fatalf("after claim: %+v", e)
	}
	if got, _ := l.Get("a/1"); !reflect.DeepEqual(got, e) {
		t.Fatalf("Get = %+v, Transition returned %+v", got, e)
	}

	// Entering running counts a run, also running → running (an idempotent
	// re-run after a crash); History keeps the last maxHistory steps.
	mustTransition(t, l, "a/1", StateClaimed, StateRunning)
	for range 20 {
		mustTransition(t, l, "a/1", StateRunning, StateRunning)
	}
	e = mustTransition(t, l, "a/1", StateRunning, StateDone)
	if e.Runs != 21 || len(e.History) != maxHistory || e.History[maxHistory-1].State != StateDone {
		t.Fatalf("runs %d, history %d (%v)", e.Runs, len(e.History), e.History)
	}
	for _, to := range []State{StateClaimed, StateRunning, StateFailed} {
		if _, err := l.Transition("a/1", []State{StateDone}, to, nil); err == nil {
			t.Errorf("done → %s allowed", to)
		}
	}
}

func TestStateMachine(t *testing.T) {
	for _, s := range states {
		if s.Terminal() && len(transitions[s]) != 0 {
			t.Errorf("terminal %s has transitions %v", s, transitions[s])
		}
		if !s.Terminal() && len(transitions[s]) == 0 {
			t.Errorf("non-terminal %s is a dead end", s)
		}
		if s.Terminal() && s.InFlight() {
			t.Errorf("%s both terminal and in flight", s)
		}
		for _, to := range transitions[s] {
			if !to.Valid() {
				t.Errorf("%s → unknown %s", s, to)
			}
		}
	}
	for _, s := range admitStates {
		// uncertain is a lost record held for a human: never in flight,
		// never a state a run could start from without an operator.
		if s.InFlight() || s == StateDone {
			t.Errorf("Admit may start in %s", s)
		}
	}
	if !CanAdmit(StateUncertain) || CanAdmit(StateRunning) || CanAdmit(StateClaimed) {
		t.Error("CanAdmit disagrees with admitStates")
	}
}

// Eight workers race to claim each id: exactly one must win.
func TestClaimRace(t *testing.T) {
	l := mustOpen(t, t.TempDir())
	defer mustClose(t, l)
	const keys, workers = 20, 8
	for k := range keys {
		mustAdmit(t, l, testEntry(fmt.Sprintf("a/%d", k), time.Now().Add(time.Hour)))
	}
	for k := range keys {
		key := fmt.Sprintf("a/%d", k)
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, workers)
		for w := range workers {
			wg.Go(func() {
				<-start
				_, errs[w] = l.Transition(key, []State{StateSeen}, StateClaimed, func(e *Entry) {
					e.Reason = fmt.Sprint("worker ", w)
				})
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, ErrWrongState):
				t.Errorf("%s: loser got %v, want ErrWrongState", key, err)
			}
		}
		e, err := l.Get(key)
		if won != 1 || err != nil || e.State != StateClaimed || len(e.History) != 2 {
			t.Fatalf("%s: %d winners, entry %+v, %v", key, won, e, err)
		}
	}
}

// Many goroutines run whole lifecycles while others read; afterwards, and
// after a reopen, every id ran exactly once.
func TestConcurrentUse(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	const workers, per = 8, 15
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := l.List(func(e Entry) bool { return e.State == StateRunning }); err != nil {
				t.Error(err)
			}
			if _, err := l.Stats(); err != nil {
				t.Error(err)
			}
			if _, err := l.InFlight(); err != nil {
				t.Error(err)
			}
			// Leave the writers room: this checks safety, not throughput.
			time.Sleep(2 * time.Millisecond)
		}
	})
	competeForKeys(t, l, workers, per, nil) // two workers share each key; only one may run it
	close(stop)
	readers.Wait()
	check := func(l *Ledger) {
		t.Helper()
		checkRanOnce(t, l, workers/2*per)
		st, err := l.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.Total != workers/2*per || st.States[StateDone] != st.Total {
			t.Errorf("stats %+v", st)
		}
	}
	check(l)
	mustClose(t, l)
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	check(l)
}

func TestInFlightAndStats(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	for _, k := range []string{"a/1", "a/2", "a/3", "a/4"} {
		mustAdmit(t, l, testEntry(k, exp))
	}
	mustTransition(t, l, "a/3", StateSeen, StateClaimed)
	mustTransition(t, l, "a/1", StateSeen, StateClaimed)
	mustTransition(t, l, "a/1", StateClaimed, StateRunning)
	mustTransition(t, l, "a/4", StateSeen, StatePending)
	mustClose(t, l)

	// Crash recovery works from a fresh Open: the indexes are rebuilt.
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	fl, err := l.InFlight()
	if err != nil {
		t.Fatal(err)
	}
	if len(fl) != 2 || fl[0].Key != "a/1" || fl[0].State != StateRunning || fl[1].Key != "a/3" || fl[1].State != StateClaimed {
		t.Fatalf("InFlight = %+v", fl)
	}
	st, err := l.Stats()
	if err != nil {
		t.Fatal(err)
	}
	want := map[State]int{StateSeen: 1, StatePending: 1, StateClaimed: 1, StateRunning: 1}
	if st.Total != 4 || !reflect.DeepEqual(st.States, want) || st.FileSize == 0 || st.TailDropped != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestGC(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	now := time.Now()
	skew := time.Hour
	add := func(key string, exp time.Time, path ...State) {
		t.Helper()
		e := testEntry(key, exp)
		if len(path) > 0 && contains(admitStates, path[0]) {
			e.State = path[0]
			path = path[1:]
		}
		mustAdmit(t, l, e)
		cur := e.State
		if cur == "" {
			cur = StateSeen
		}
		for _, s := range path {
			mustTransition(t, l, key, cur, s)
			cur = s
		}
	}
	old, recent := now.Add(-3*time.Hour), now.Add(-30*time.Minute)
	add("a/done-old", old, StateClaimed, StateRunning, StateDone)
	add("a/rejected-old", old.Add(time.Minute), StateRejected)
	add("a/failed-old", old.Add(2*time.Minute), StateClaimed, StateFailed)
	add("a/done-in-skew", recent, StateClaimed, StateRunning, StateDone)
	add("a/done-future", now.Add(time.Hour), StateClaimed, StateRunning, StateDone)
	add("a/running-old", old, StateClaimed, StateRunning)
	add("a/claimed-old", old, StateClaimed)
	add("a/uncertain-old", old, StateClaimed, StateRunning, StateUncertain)
	add("a/pending-old", old, StatePending)
	add("a/seen-old", old)

	cands, err := l.GCCandidates(now, skew)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, c := range cands {
		keys = append(keys, c.Key)
	}
	want := []string{"a/done-old", "a/rejected-old", "a/failed-old"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("GCCandidates = %v, want %v", keys, want)
	}
	if _, err := l.Get("a/done-old"); err != nil {
		t.Fatalf("GCCandidates deleted: %v", err)
	}
	n, err := l.GC(now, skew)
	if err != nil || n != 3 {
		t.Fatalf("GC = %d, %v; want 3", n, err)
	}
	mustClose(t, l)

	l = mustOpen(t, dir)
	defer mustClose(t, l)
	all, err := l.List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 7 {
		t.Fatalf("%d entries left, want 7", len(all))
	}
	for _, k := range want {
		if _, err := l.Get(k); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s survived GC and reopen: %v", k, err)
		}
	}
	if n, err := l.GC(now, skew); n != 0 || err != nil {
		t.Errorf("second GC = %d, %v", n, err)
	}
}

func TestFsyncFailureStopsTheLedger(t *testing.T) {
	l := mustOpen(t, t.TempDir())
	defer mustClose(t, l)
	mustAdmit(t, l, testEntry("a/1", time.Now().Add(time.Hour)))

	injected := errors.New("injected EIO")
	syncFile = func(*os.File) error { return injected }
	defer func() { syncFile = (*os.File).Sync }()
	if _, err := l.Transition("a/1", []State{StateSeen}, StateClaimed, nil); !errors.Is(err, injected) {
		t.Fatalf("Transition with failing fsync: %v", err)
	}
	syncFile = (*os.File).Sync
	if _, err := l.Get("a/1"); !errors.Is(err, injected) {
		t.Errorf("Get after a failed fsync: %v, want the fsync error", err)
	}
	if _, _, err := l.Admit(testEntry("a/2", time.Now().Add(time.Hour))); !errors.Is(err, injected) {
		t.Errorf("Admit after a failed fsync: %v, want the fsync error", err)
	}
}

func TestClosed(t *testing.T) {
	l := mustOpen(t, t.TempDir())
	mustClose(t, l)
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := l.Get("a/1"); err == nil {
		t.Error("Get after Close succeeded")
	}
	if _, _, err := l.Admit(testEntry("a/1", time.Now().Add(time.Hour))); err == nil {
		t.Error("Admit after Close succeeded")
	}
}

func TestRefusesOpenDirectory(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix modes")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o770); err != nil {
		t.Fatal(err)
	}
	if l, err := Open(dir); err == nil {
		l.Close()
		t.Fatal("Open accepted a group-writable directory")
	}
}

// Open rewrites a file that is mostly superseded records; the rewrite holds
// exactly the live entries and deleted entries stay deleted.
func TestCompactOnOpen(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	now := time.Now()
	for _, k := range []string{"a/1", "a/2", "a/3"} {
		mustAdmit(t, l, testEntry(k, now.Add(-2*time.Hour)))
		mustTransition(t, l, k, StateSeen, StateClaimed)
		mustTransition(t, l, k, StateClaimed, StateRunning)
	}
	mustTransition(t, l, "a/1", StateRunning, StateDone)
	if n, err := l.GC(now, time.Hour); n != 1 || err != nil {
		t.Fatalf("GC = %d, %v", n, err)
	}
	want, _ := l.List(nil)
	mustClose(t, l)
	before := readFile(t, dbPath(dir))

	defer func(size, ratio int64) { compactMinSize, compactRatio = size, ratio }(compactMinSize, compactRatio)
	compactMinSize, compactRatio = 0, 1
	l = mustOpen(t, dir)
	got, _ := l.List(nil)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after compaction:\n got %+v\nwant %+v", got, want)
	}
	after := readFile(t, dbPath(dir))
	s := scanLog(after, 0)
	// The format, the archive's length and two records.
	if !s.clean() || len(s.cmds) != 4 || int64(len(after)) != liveSize(s) || len(after) >= len(before) {
		t.Fatalf("compacted file: %d → %d bytes, %d commands, %s", len(before), len(after), len(s.cmds), s.problem())
	}
	mustTransition(t, l, "a/2", StateRunning, StateDone)
	mustClose(t, l)
	compactMinSize, compactRatio = 16<<20, 4
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	if e, err := l.Get("a/2"); err != nil || e.State != StateDone {
		t.Fatalf("write after compaction: %+v, %v", e, err)
	}
	if _, err := l.Get("a/1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("collected entry came back: %v", err)
	}
}

// compactableLedger opens a ledger in a new directory that a clean Close
// compacts: three requests taken to uncertain, four records each (not to
// done: a terminal entry leaves the file for the archive).
func compactableLedger(t *testing.T) (string, *Ledger) {
	t.Helper()
	dir := t.TempDir()
	old := closeCompactMin
	closeCompactMin = 0
	t.Cleanup(func() { closeCompactMin = old })
	l := mustOpen(t, dir)
	for _, k := range []string{"a/1", "a/2", "a/3"} {
		mustAdmit(t, l, testEntry(k, time.Now().Add(time.Hour)))
		mustTransition(t, l, k, StateSeen, StateClaimed)
		mustTransition(t, l, k, StateClaimed, StateRunning)
		mustTransition(t, l, k, StateRunning, StateUncertain)
	}
	return dir, l
}

// A clean Close leaves a file of live records only when most of it was
// superseded; the next Open reads the same entries.
func TestCompactOnClose(t *testing.T) {
	dir, l := compactableLedger(t)
	want, _ := l.List(nil)
	before, _ := os.Stat(dbPath(dir))
	mustClose(t, l)
	after := readFile(t, dbPath(dir))
	s := scanLog(after, 0)
	// The format, the archive's length and three records.
	if !s.clean() || len(s.cmds) != 5 || int64(len(after)) != liveSize(s) || int64(len(after)) >= before.Size() {
		t.Fatalf("closed file: %d → %d bytes, %d commands, %s", before.Size(), len(after), len(s.cmds), s.problem())
	}
	l = mustOpen(t, dir)
	got, _ := l.List(nil)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after compaction on close:\n got %+v\nwant %+v", got, want)
	}
	// Mostly live already: left alone.
	mustClose(t, l)
	again := readFile(t, dbPath(dir))
	if !bytes.Equal(again, after) {
		t.Fatal("a compact file was rewritten")
	}
}

// TestSnapshotBesideOpenLedger reads a ledger that another handle holds open
// and is writing: the snapshot sees every entry written before it.
func TestSnapshotBesideOpenLedger(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; i < 5; i++ {
		if _, _, err := l.Admit(Entry{Agent: "a", ID: fmt.Sprintf("id%d", i), ManifestSHA256: "x", Expires: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Transition("a/id3", []State{StateSeen}, StateRejected, nil); err != nil {
		t.Fatal(err)
	}
	got, err := Snapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[3].Key != "a/id3" || got[3].State != StateRejected {
		t.Fatalf("snapshot: %+v", got)
	}
}

// Settled returns the terminal entries updated or expiring before the
// given times, and nothing else.
func TestSettled(t *testing.T) {
	l := mustOpen(t, t.TempDir())
	defer mustClose(t, l)
	now := time.Now()
	mustAdmit(t, l, testEntry("a/soon", now.Add(time.Minute)))
	mustTransition(t, l, "a/soon", StateSeen, StateRejected)
	mustAdmit(t, l, testEntry("a/later", now.Add(48*time.Hour)))
	mustTransition(t, l, "a/later", StateSeen, StateRejected)
	mustAdmit(t, l, testEntry("a/open", now.Add(-time.Hour)))
	for _, c := range []struct {
		updated, expires time.Time
		want             string
	}{
		{now.Add(-time.Hour), now.Add(time.Hour), "[a/soon]"},         // expiring within the hour
		{now.Add(time.Hour), now.Add(-time.Hour), "[a/later a/soon]"}, // updated before the hour to come
		{now.Add(-time.Hour), now.Add(-time.Hour), "[]"},              // neither; a/open is not terminal
	} {
		got, err := l.Settled(c.updated, c.expires, nil)
		var keys []string
		for _, e := range got {
			keys = append(keys, e.Key)
		}
		if err != nil || fmt.Sprint(keys) != c.want {
			t.Errorf("Settled(%v, %v) = %v, %v; want %s", c.updated.Sub(now), c.expires.Sub(now), keys, err, c.want)
		}
	}
	// want sees each settled entry's key and times, and only what it
	// accepts is returned.
	var asked []string
	got, err := l.Settled(now.Add(time.Hour), now.Add(-time.Hour), func(key string, updated, expires time.Time) bool {
		asked = append(asked, key)
		if key == "a/soon" && expires.Sub(now.Add(time.Minute)).Abs() > time.Second {
			t.Errorf("want got expires %v for a/soon; want %v", expires, now.Add(time.Minute))
		}
		if updated.After(time.Now()) || now.Sub(updated) > time.Minute {
			t.Errorf("want got updated %v for %s", updated, key)
		}
		return key == "a/later"
	})
	if err != nil || len(got) != 1 || got[0].Key != "a/later" || fmt.Sprint(asked) != "[a/later a/soon]" {
		t.Errorf("Settled with want = %+v, %v after asking %v; want only a/later, after asking about a/later and a/soon", got, err, asked)
	}
}

// A compaction vouches for the file it wrote (ledger.db.checked), as does
// an Open for what it checked, and the next Open checks only the records
// after that prefix. Damage inside the
// prefix changes its hash, so it is found as before; a damaged or stale
// checked file only costs the checks it would have saved.
func TestCheckedPrefix(t *testing.T) {
	dir, l := compactableLedger(t)
	mustClose(t, l)
	compacted := readFile(t, dbPath(dir))
	if n := checkedPrefix(dbPath(dir), compacted); n != int64(len(compacted)) {
		t.Fatalf("after compaction the checked file vouches for %d of %d bytes", n, len(compacted))
	}
	opened := func() (int64, error) {
		t.Helper()
		before := recordChecks.Load()
		l, err := Open(dir)
		if err == nil {
			mustClose(t, l)
		}
		return recordChecks.Load() - before, err
	}
	if n, err := opened(); err != nil || n != 0 {
		t.Fatalf("Open of a vouched-for file: %d records checked, %v; want none", n, err)
	}
	// A record appended after the prefix is checked; the prefix is not.
	l = mustOpen(t, dir)
	mustAdmit(t, l, testEntry("a/4", time.Now().Add(time.Hour)))
	mustClose(t, l)
	if n, err := opened(); err != nil || n != 1 {
		t.Fatalf("Open after one more record: %d records checked, %v; want 1", n, err)
	}
	// That Open vouched for what it checked: the next one checks nothing.
	if n, err := opened(); err != nil || n != 0 {
		t.Fatalf("Open after an Open that checked the new record: %d records checked, %v; want none", n, err)
	}
	// A checked file that does not match (stale, damaged, foreign) vouches
	// for nothing: every record is checked.
	for _, bad := range []string{"", "bridge-ledger-checked v1 12 00\n", "garbage", checkedHeader + " 99999999 " + strings.Repeat("0", 64) + "\n"} {
		if err := os.WriteFile(dbPath(dir)+checkedSuffix, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if n, err := opened(); err != nil || n != 4 {
			t.Fatalf("checked file %q: %d records checked, %v; want all 4", bad, n, err)
		}
	}
	// Damage inside the vouched-for prefix: the hash no longer matches, the
	// record is checked and the ledger refused as before.
	writeChecked(dbPath(dir), compacted)
	data := readFile(t, dbPath(dir))
	i := bytes.Index(data, []byte(`"state":"uncertain"`))
	copy(data[i:], `"state":"uncretain"`)
	if err := os.WriteFile(dbPath(dir), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := opened(); !errors.Is(err, ErrDamaged) {
		t.Fatalf("damage inside the vouched-for prefix: %v; want ErrDamaged", err)
	}
}

// respSetLen counts what respSet writes, across the lengths where the
// length prefixes gain a digit.
func TestRespSetLen(t *testing.T) {
	for _, k := range []int{0, 1, 9, 10, 67, 99, 100} {
		for _, v := range []int{0, 9, 10, 99, 100, 775, 999, 1000, 10000} {
			if got, want := respSetLen(k, v), int64(len(respSet(strings.Repeat("k", k), strings.Repeat("v", v)))); got != want {
				t.Errorf("respSetLen(%d, %d) = %d; want %d", k, v, got, want)
			}
		}
	}
}

// A time the record format cannot write (an agent signs its request's
// expiry, and a rejected request is recorded whatever it says) is recorded
// as the nearest one it can, and a record that would not read back (an op
// name that is not UTF-8) is refused before it is written: either would
// otherwise make the next Open refuse the whole ledger.
func TestRecordsAlwaysReadBack(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	far := testEntry("a/far", time.Unix(1<<40, 0)) // year 36812
	far.State = StateRejected
	got := mustAdmit(t, l, far)
	if got.Expires.Year() != 9999 {
		t.Fatalf("a far expiry was recorded as %v", got.Expires)
	}
	early := testEntry("a/early", time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC))
	early.State = StateRejected
	if got := mustAdmit(t, l, early); got.Expires.Year() != 0 {
		t.Fatalf("an expiry before year 0 was recorded as %v", got.Expires)
	}
	mustAdmit(t, l, testEntry("a/bad-op", time.Now().Add(time.Hour)))
	if _, err := l.Transition("a/bad-op", []State{StateSeen}, StateClaimed, func(e *Entry) { e.Op = "op\xff" }); err == nil {
		t.Fatal("a record with an op that is not UTF-8 was written")
	}
	if _, err := l.Transition("a/bad-op", []State{StateSeen}, StateClaimed, func(e *Entry) { e.Op = "op" }); err != nil {
		t.Fatalf("the ledger is not usable after a refused record: %v", err)
	}
	mustClose(t, l)
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	if e, err := l.Get("a/far"); err != nil || !e.Expires.Equal(time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)) {
		t.Fatalf("after reopening: %+v, %v", e, err)
	}
}

// TestLazyWrites: a lazy write (seen, pending, claimed) costs no fsync and
// is visible at once; the next durable write fsyncs it with its own, and a
// crash before that (a power cut: the file as of the last fsync) finds the
// entry in its state before, never in a state it did not reach.
// A file left by a process killed after lazy writes holds them in the page
// cache only: Open flushes it, so that what it then calls durable is.
func TestOpenAfterCrashFlushesLazyWrites(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	mustAdmit(t, l, testEntry("a/1", exp))
	if _, _, err := l.AdmitLazy(testEntry("a/2", exp)); err != nil {
		t.Fatal(err)
	}
	// The killed process's file, as the next Open finds it.
	left, err := os.ReadFile(filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	again := t.TempDir()
	if err := os.WriteFile(filepath.Join(again, dbFile), left, 0o600); err != nil {
		t.Fatal(err)
	}
	copyArchive(t, dir, again)
	var syncs int
	syncFile = func(f *os.File) error {
		if filepath.Base(f.Name()) == dbFile {
			syncs++
		}
		return f.Sync()
	}
	defer func() { syncFile = (*os.File).Sync }()
	l2 := mustOpen(t, again)
	defer mustClose(t, l2)
	if syncs == 0 {
		t.Fatal("Open did not flush a file whose last writes may be in the page cache only")
	}
	if !l2.Durable("a/2") || l2.SyncedSize() != int64(len(left)) {
		t.Fatalf("after Open: Durable(a/2) %v, synced %d of %d", l2.Durable("a/2"), l2.SyncedSize(), len(left))
	}
}

func TestLazyWrites(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	defer mustClose(t, l)
	path := filepath.Join(dir, dbFile)
	var syncs int
	var atSync []byte // the file as of the last fsync: what a power cut keeps
	syncFile = func(f *os.File) error {
		syncs++
		err := f.Sync()
		atSync, _ = os.ReadFile(path)
		return err
	}
	defer func() { syncFile = (*os.File).Sync }()
	exp := time.Now().Add(time.Hour)

	mustAdmit(t, l, testEntry("a/1", exp)) // durable: the baseline
	if _, _, err := l.AdmitLazy(testEntry("a/2", exp)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TransitionLazy("a/1", []State{StateSeen}, StateClaimed, nil); err != nil {
		t.Fatal(err)
	}
	if syncs != 1 {
		t.Fatalf("%d fsyncs for one durable and two lazy writes, want 1", syncs)
	}
	if e, err := l.Get("a/1"); err != nil || e.State != StateClaimed {
		t.Fatalf("a lazy write is not visible at once: %v %v", e.State, err)
	}
	if l.Durable("a/1") || l.Durable("a/2") {
		t.Fatal("Durable says yes before any fsync covered the lazy writes")
	}
	// A power cut now: both lazy writes are gone, a/1 is seen as before.
	lost := filepath.Join(t.TempDir(), "lost")
	if err := os.MkdirAll(lost, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lost, dbFile), atSync, 0o600); err != nil {
		t.Fatal(err)
	}
	copyArchive(t, dir, lost)
	cut := mustOpen(t, lost)
	if e, err := cut.Get("a/1"); err != nil || e.State != StateSeen {
		t.Errorf("after a power cut a/1 is %v (%v), want seen", e.State, err)
	}
	if _, err := cut.Get("a/2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after a power cut the lazy admit is there: %v", err)
	}
	mustClose(t, cut)
	syncs = 1 // opening the copy fsynced its own files

	// Entering running is durable, and takes the lazy writes with it.
	if _, err := l.Transition("a/1", []State{StateClaimed}, StateRunning, nil); err != nil {
		t.Fatal(err)
	}
	if syncs != 2 || !l.Durable("a/1") || !l.Durable("a/2") {
		t.Fatalf("after a durable write: %d fsyncs, durable %v %v; want 2, true, true", syncs, l.Durable("a/1"), l.Durable("a/2"))
	}
	if _, err := l.TransitionLazy("a/1", []State{StateRunning}, StateDone, nil); err == nil {
		t.Error("a lazy transition into done was taken")
	}
	if _, _, err := l.AdmitLazy(Entry{Key: "a/3", State: StateRejected, ManifestSHA256: "x", Expires: exp}); err == nil {
		t.Error("a lazy admit into rejected was taken")
	}
	// A clean Close makes a lazy write durable.
	if _, _, err := l.AdmitLazy(testEntry("a/4", exp)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if syncs != 3 {
		t.Errorf("Close with a lazy write pending: %d fsyncs, want 3", syncs)
	}
	l = mustOpen(t, dir)
	if _, err := l.Get("a/4"); err != nil {
		t.Errorf("a lazy write before a clean Close: %v", err)
	}
}

// Missing names the keys without an entry, across its batches, in order.
func TestMissing(t *testing.T) {
	l := mustOpen(t, t.TempDir())
	var keys, want []string
	for i := range 2500 {
		k := fmt.Sprintf("a/id%04d", i)
		keys = append(keys, k)
		if i%7 == 0 {
			want = append(want, k)
			continue
		}
		if _, _, err := l.AdmitLazy(Entry{Key: k, ManifestSHA256: "x", Expires: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Missing(keys)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("missing %d keys (%v...), want %d", len(got), got[:min(3, len(got))], len(want))
	}
}

// BenchmarkMissing100k is the daemon's one check of its finished cache
// against the ledger after a start beside 100,000 finished requests.
func BenchmarkMissing100k(b *testing.B) {
	l, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("agent/%032x", i)
		if _, _, err := l.AdmitLazy(Entry{Key: keys[i], ManifestSHA256: "x", Expires: time.Now().Add(time.Hour)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		if missing, err := l.Missing(keys); err != nil || len(missing) != 0 {
			b.Fatal(len(missing), err)
		}
	}
}
