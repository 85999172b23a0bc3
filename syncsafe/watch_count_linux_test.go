package syncsafe

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// inotifyWatches counts the kernel watches this process holds.
func inotifyWatches(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	n := 0
	for _, fd := range fds {
		b, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", fd.Name()))
		if err == nil {
			n += bytes.Count(b, []byte("inotify wd:"))
		}
	}
	return n
}

// TestWatcherWatchesOnlyWalkedDirs: directories Skip leaves out cost no
// kernel watch, however many a folder writer makes; each one would take
// one of the user's inotify watches, which Syncthing and IDEs need too.
func TestWatcherWatchesOnlyWalkedDirs(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "agent"), 0o755))
	before := inotifyWatches(t)
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, Debounce: -1,
		Skip: func(rel string, isDir bool) bool { return isDir && strings.Contains(rel, "/") }})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := w.Next(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		must(t, os.MkdirAll(filepath.Join(root, "agent", fmt.Sprintf("junk%03d", i), "deeper"), 0o755))
	}
	writeFile(t, filepath.Join(root, "agent", "req"), "x")
	for {
		b, err := w.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Paths) > 0 {
			break
		}
	}
	if _, err := w.fullWalk(); err != nil {
		t.Fatal(err)
	}
	if got := inotifyWatches(t) - before; got != 3 {
		t.Errorf("%d kernel watches for the root, its parent and one walked directory, want 3", got)
	}
}
