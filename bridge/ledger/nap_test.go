package ledger

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// setNap shortens how long l waits unused before it naps.
func setNap(l *Ledger, d time.Duration) {
	l.dur.Lock()
	l.napAfter = d
	l.dur.Unlock()
	l.napTimer.Reset(d)
}

// waitNaps waits until l has napped at least n times in all.
func waitNaps(t *testing.T, l *Ledger, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if naps, _ := l.Naps(); naps >= n {
			return
		}
		if time.Now().After(deadline) {
			naps, wakes := l.Naps()
			t.Fatalf("the ledger napped %d times (woke %d) in 20 s, want %d", naps, wakes, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An unused ledger closes buntdb (its one-second ticker stops with it) and
// opens it again at the next use: reads and writes work as before, a lazy
// write is on disk before the nap, and the ledger reopens to the same
// entries.
func TestNapAndWake(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := mustOpen(t, dir)
	exp := time.Now().Add(time.Hour)
	mustAdmit(t, l, testEntry("a/1", exp))
	if _, _, err := l.AdmitLazy(testEntry("a/2", exp)); err != nil {
		t.Fatal(err)
	}
	if l.Durable("a/2") {
		t.Fatal("a lazy write is durable before any fsync")
	}
	setNap(l, 20*time.Millisecond)
	waitNaps(t, l, 1)
	l.dur.RLock()
	asleep := l.db == nil
	l.dur.RUnlock()
	if !asleep {
		t.Fatal("the ledger counted a nap with buntdb open")
	}
	// The nap flushed the lazy write, and says so.
	if !l.Durable("a/2") {
		t.Error("a lazy write is not durable after the nap")
	}
	if fi, err := os.Stat(dbPath(dir)); err != nil || fi.Size() != l.SyncedSize() {
		t.Errorf("synced size %d, file %v, %v", l.SyncedSize(), fi.Size(), err)
	}
	// A read wakes it.
	if e, err := l.Get("a/1"); err != nil || e.State != StateSeen {
		t.Fatalf("Get after a nap: %+v, %v", e, err)
	}
	if _, wakes := l.Naps(); wakes != 1 {
		t.Errorf("woke %d times, want 1", wakes)
	}
	// So does a write, after another nap; and a compare-and-set still loses.
	waitNaps(t, l, 2)
	mustTransition(t, l, "a/1", StateSeen, StateClaimed)
	if _, err := l.Transition("a/1", []State{StateSeen}, StateClaimed, nil); !errors.Is(err, ErrWrongState) {
		t.Fatalf("a second claim after a nap: %v, want ErrWrongState", err)
	}
	waitNaps(t, l, 3)
	mustClose(t, l) // closes while napping
	l = mustOpen(t, dir)
	defer mustClose(t, l)
	for key, want := range map[string]State{"a/1": StateClaimed, "a/2": StateSeen} {
		if e, err := l.Get(key); err != nil || e.State != want {
			t.Errorf("%s after a reopen: %+v, %v; want %s", key, e, err, want)
		}
	}
}

// Naps come and go while goroutines run lifecycles and read: every key
// still runs once, and nothing fails (run with -race).
func TestNapsUnderConcurrentUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := mustOpen(t, dir)
	setNap(l, time.Millisecond)
	const workers, per = 6, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				key := fmt.Sprintf("a/%d-%d", w/2, i)
				if _, _, err := l.Admit(testEntry(key, time.Now().Add(time.Hour))); err != nil {
					t.Error(err)
					return
				}
				if _, err := l.Transition(key, []State{StateSeen}, StateClaimed, nil); errors.Is(err, ErrWrongState) {
					continue
				} else if err != nil {
					t.Error(err)
					return
				}
				for _, s := range []State{StateRunning, StateDone} {
					if _, err := l.Transition(key, []State{prev(s)}, s, nil); err != nil {
						t.Error(err)
						return
					}
				}
				if _, err := l.Get(key); err != nil {
					t.Error(err)
				}
				time.Sleep(time.Duration(i%3) * time.Millisecond) // room for a nap now and then
			}
		})
	}
	wg.Wait()
	naps, wakes := l.Naps()
	t.Logf("%d naps, %d wakes", naps, wakes)
	if wakes == 0 {
		t.Error("the ledger never woke: the test took no nap")
	}
	all, err := l.List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != workers/2*per {
		t.Fatalf("%d entries, want %d", len(all), workers/2*per)
	}
	for _, e := range all {
		if e.State != StateDone || e.Runs != 1 {
			t.Errorf("%s: state %s, runs %d", e.Key, e.State, e.Runs)
		}
	}
	mustClose(t, l)
}

// A ledger file removed or replaced while the ledger napped is not taken for
// the ledger when it wakes (buntdb would open a new empty file by the name,
// or an older copy, and forget requests that ran): the ledger refuses all
// work, as after a failed fsync, and creates nothing.
func TestWakeRefusesAReplacedFile(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"removed", "replaced"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			l := mustOpen(t, dir)
			exp := time.Now().Add(time.Hour)
			mustAdmit(t, l, testEntry("a/1", exp))
			old := readFile(t, dbPath(dir))
			mustTransition(t, l, "a/1", StateSeen, StateClaimed)
			setNap(l, 10*time.Millisecond)
			waitNaps(t, l, 1)
			if err := os.Rename(dbPath(dir), dbPath(dir)+".moved"); err != nil {
				t.Fatal(err)
			}
			if how == "replaced" {
				// An older copy: a1 still seen, as if it never was claimed.
				if err := os.WriteFile(dbPath(dir), old, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := l.Get("a/1"); err == nil || !strings.Contains(err.Error(), "removed or replaced") {
				t.Fatalf("Get after the file was %s: %v, want a refusal", how, err)
			}
			if _, err := l.Transition("a/1", []State{StateSeen}, StateClaimed, nil); err == nil {
				t.Fatalf("a claim after the file was %s succeeded", how)
			}
			if _, err := os.Stat(dbPath(dir)); how == "removed" && !os.IsNotExist(err) {
				t.Fatalf("the wake created %s: %v", dbPath(dir), err)
			}
			if _, wakes := l.Naps(); wakes != 0 {
				t.Errorf("woke %d times on a file not its own", wakes)
			}
			l.Close()
		})
	}
}
