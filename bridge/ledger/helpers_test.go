package ledger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The test binary doubles as the child process of the crash and lock tests:
// with LEDGER_CHILD set, TestMain runs the child instead of the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("LEDGER_CHILD"); mode != "" {
		os.Exit(child(mode, os.Getenv("LEDGER_DIR")))
	}
	os.Exit(m.Run())
}

func child(mode, dir string) int {
	if n, err := strconv.Atoi(os.Getenv("LEDGER_ARCHIVE_EVERY")); err == nil {
		archiveEvery = n
	}
	switch mode {
	case "crash":
		// Runs request lifecycles until it is killed. A line is printed
		// only after the call returned: the parent treats it as a promise
		// that the state is durable.
		l, err := Open(dir)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		start, _ := strconv.Atoi(os.Getenv("LEDGER_START"))
		// Four writers at once, so that the kill also lands inside group
		// commits of several changes.
		var mu sync.Mutex
		say := func(a ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Println(a...)
		}
		fail := make(chan struct{})
		var once sync.Once
		for w := range 4 {
			go func() {
				for i := start + w*100_000; ; i++ {
					key := fmt.Sprintf("agent/%08d", i)
					if _, _, err := l.Admit(testEntry(key, time.Now().Add(time.Hour))); err != nil {
						say("error", err)
						once.Do(func() { close(fail) })
						return
					}
					say(StateSeen, key)
					for _, s := range []State{StateClaimed, StateRunning, StateDone} {
						if _, err := l.Transition(key, []State{prev(s)}, s, nil); err != nil {
							say("error", err)
							once.Do(func() { close(fail) })
							return
						}
						say(s, key)
					}
				}
			}()
		}
		<-fail
		return 1
	case "hold":
		if _, err := Open(dir); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("ready")
		for {
			time.Sleep(time.Hour)
		}
	case "try":
		l, err := Open(dir)
		var le *Error
		if errors.As(err, &le) && errors.Is(err, ErrLocked) {
			fmt.Println("locked", le.PID)
			return 3
		}
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("opened")
		if err := l.Close(); err != nil {
			return 1
		}
		return 0
	}
	fmt.Println("unknown child mode", mode)
	return 2
}

// lifecycle is the order the crash child walks through.
var lifecycle = []State{StateSeen, StateClaimed, StateRunning, StateDone}

func prev(s State) State {
	for i, v := range lifecycle {
		if v == s && i > 0 {
			return lifecycle[i-1]
		}
	}
	panic("no previous state for " + string(s))
}

func testEntry(key string, expires time.Time) Entry {
	return Entry{
		Key:            key,
		Agent:          strings.SplitN(key, "/", 2)[0],
		ID:             key[strings.LastIndex(key, "/")+1:],
		ManifestSHA256: fmt.Sprintf("%064x", len(key)),
		Expires:        expires,
	}
}

func mustOpen(t *testing.T, dir string) *Ledger {
	t.Helper()
	l, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func mustClose(t *testing.T, l *Ledger) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func mustAdmit(t *testing.T, l *Ledger, e Entry) Entry {
	t.Helper()
	got, created, err := l.Admit(e)
	if err != nil || !created {
		t.Fatalf("Admit(%s) = created %v, %v", e.Key, created, err)
	}
	return got
}

func mustTransition(t *testing.T, l *Ledger, key string, from, to State) Entry {
	t.Helper()
	e, err := l.Transition(key, []State{from}, to, nil)
	if err != nil {
		t.Fatalf("Transition(%s, %s → %s): %v", key, from, to, err)
	}
	return e
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func appendFile(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func dbPath(dir string) string { return filepath.Join(dir, dbFile) }

// copyArchive copies the archive beside a ledger.db a test copied to
// another directory (what a crash leaves of it: every append is fsynced
// before it returns).
func copyArchive(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(from, archiveFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(to, archiveFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// runOnce admits key and takes it through claimed and running to done, as
// a worker that competes for it would: it reports false, with no error,
// when another worker claimed it first.
func runOnce(l *Ledger, key string) (bool, error) {
	if _, _, err := l.Admit(testEntry(key, time.Now().Add(time.Hour))); err != nil {
		return false, err
	}
	if _, err := l.Transition(key, []State{StateSeen}, StateClaimed, nil); errors.Is(err, ErrWrongState) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	for _, s := range []State{StateRunning, StateDone} {
		if _, err := l.Transition(key, []State{prev(s)}, s, nil); err != nil {
			return false, err
		}
	}
	return true, nil
}

// competeForKeys runs workers goroutines over per keys each, two workers on
// each key ("a/<w/2>-<i>"), each key run by the worker that claims it first
// (runOnce); after, if not nil, is called with each key a worker ran. It
// returns once all are done.
func competeForKeys(t *testing.T, l *Ledger, workers, per int, after func(key string)) {
	t.Helper()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				key := fmt.Sprintf("a/%d-%d", w/2, i)
				ran, err := runOnce(l, key)
				if err != nil {
					t.Error(err)
					return
				}
				if ran && after != nil {
					after(key)
				}
			}
		})
	}
	wg.Wait()
}

// checkRanOnce checks that l holds n entries, each done, run once, with
// the four steps of its lifecycle.
func checkRanOnce(t *testing.T, l *Ledger, n int) {
	t.Helper()
	all, err := l.List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n {
		t.Fatalf("%d entries, want %d", len(all), n)
	}
	for _, e := range all {
		if e.State != StateDone || e.Runs != 1 || len(e.History) != 4 {
			t.Errorf("%s: state %s, runs %d, history %v", e.Key, e.State, e.Runs, e.History)
		}
	}
}
