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
	"io/fs"
	"os"
	"path/filepath"
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
