// Package testkit is what the host's unit tests (bridge/host) and its system
// suites (bridge/host/systest) share: polling for a condition, files planted
// as a sync client delivers them, and a daemon run as a process of the test
// binary, which a test can signal, kill and count the rescans of.
//
// It does not import bridge/host (whose own tests import it): the daemon
// process is built by the caller, from the options the environment gives
// (Serve). It is imported only by test files.
package testkit

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// WaitFor polls cond until it holds or the timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A LockedBuffer is a bytes.Buffer that a daemon's logger and a test may
// use at once.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines is the words of the file at path (nil if there is none): the
// lines the test ops append to a count file.
func Lines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// PlantFile puts a file at dst the way a sync client does: complete, with
// the given mtime, by a rename from scratch (outside the folder).
func PlantFile(t testing.TB, scratch, dst string, data []byte, mtime time.Time) {
	t.Helper()
	tmp := filepath.Join(scratch, "plant-"+filepath.Base(dst))
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// Count is how many of the words of the file at path are word: how many
// times a test op appended it.
func Count(t testing.TB, path, word string) int {
	n := 0
	for _, l := range Lines(t, path) {
		if l == word {
			n++
		}
	}
	return n
}

// OpChildren lists the pids that the children of request id's op recorded
// (countFile.ID.children, one a line).
func OpChildren(t testing.TB, countFile, id string) []int {
	t.Helper()
	var pids []int
	for _, l := range Lines(t, countFile+"."+id+".children") {
		if n, err := strconv.Atoi(l); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// Alive reports whether pid is a live process (not a zombie).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
	return len(f) > 0 && f[0][0] != 'Z' && f[0][0] != 'X'
}

// ParallelByDefault runs up to n tests at once unless -test.parallel says
// otherwise; a TestMain calls it before m.Run. The host's tests mostly wait
// (on daemons, their processes, the folder's events), a fraction of a core
// each even under the race detector: run GOMAXPROCS at a time, as go test
// does by default, a 2-core machine would sit idle most of a package's run. Without the race detector 12
// at a time (about 0.9 of a core: `go test -short` of bridge/host went
// from 37 s to 31 s); under it 8, each test's CPU being several times more.
func ParallelByDefault(n int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(n))
	}
}
