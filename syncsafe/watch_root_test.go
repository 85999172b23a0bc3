package syncsafe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// nextUntil calls Next until ok accepts a batch (errors are handed to ok
// too), or fails the test after d.
func nextUntil(t *testing.T, w *Watcher, d time.Duration, ok func(Batch, error) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		b, err := w.Next(ctx)
		if ctx.Err() != nil {
			logStats(t, w)
			t.Fatalf("gave up after %v (last error %v)", d, err)
		}
		if ok(b, err) {
			return
		}
	}
}

// TestWatcherFollowsReplacedRoot: a sync client applies a remote rename of
// the watched directory as a rename away and a copy back. The watcher must
// not hold on to the directory moved away: it reports the root gone while
// it is, then watches the copy, whose new files raise events (the rescan is
// an hour away, so nothing else would find them).
func TestWatcherFollowsReplacedRoot(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "to-host")
	writeFile(t, filepath.Join(root, "a", "old"), "x")
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, Debounce: -1})
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool { return err == nil && b.Full })

	must(t, os.Rename(root, filepath.Join(parent, "away")))
	sawGone := false
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
		sawGone = sawGone || errors.Is(err, ErrRootGone)
		return sawGone
	})
	writeFile(t, filepath.Join(root, "a", "old"), "x") // the copy back
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
		return err == nil && b.Full && b.Replaced && slices.Contains(b.Paths, "a/old")
	})
	timerWalks := w.stats.timerWalks.Load() // looking again for the gone root
	writeFile(t, filepath.Join(root, "a", "new"), "x")
	writeFile(t, filepath.Join(root, "top"), "x")
	want := map[string]bool{"a/new": true, "top": true}
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
		for _, p := range b.Paths {
			delete(want, p)
		}
		return len(want) == 0
	})
	if w.stats.timerWalks.Load() != timerWalks {
		t.Errorf("the rescan timer found them, not events")
	}
}

// TestWatcherFollowsReplacedSubdir: the same for a directory below the
// root: its watch went away with the old one.
func TestWatcherFollowsReplacedSubdir(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a", "old"), "x")
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, Debounce: -1})
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool { return err == nil && b.Full })
	must(t, os.Rename(filepath.Join(root, "a"), filepath.Join(root, "b")))
	writeFile(t, filepath.Join(root, "a", "old"), "x")
	time.Sleep(50 * time.Millisecond)
	writeFile(t, filepath.Join(root, "a", "new"), "x")
	writeFile(t, filepath.Join(root, "b", "gone"), "x")
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool { return slices.Contains(b.Paths, "a/new") })
	// And later files in it, by event.
	for i := range 3 {
		name := filepath.Join("a", "later"+string(rune('0'+i)))
		time.Sleep(20 * time.Millisecond)
		writeFile(t, filepath.Join(root, name), "x")
		nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
			return slices.Contains(b.Paths, filepath.ToSlash(name))
		})
	}
	if w.stats.timerWalks.Load() != 0 {
		t.Errorf("the rescan timer found them, not events")
	}
}

// TestWatcherRootDeletedAndBack: a deleted root is ErrRootGone (never an
// empty listing, never the end of the watcher), and a new one is watched.
func TestWatcherRootDeletedAndBack(t *testing.T) {
	root := filepath.Join(t.TempDir(), "to-host")
	writeFile(t, filepath.Join(root, "f"), "x")
	w := newWatcher(t, root, WatchOptions{Rescan: 100 * time.Millisecond, Debounce: -1})
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool { return err == nil && b.Full })
	must(t, os.RemoveAll(root))
	for range 3 { // it stays gone, and says so each time it looks
		nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
			if err == nil && b.Full {
				t.Fatalf("a gone root listed as %v", b.Paths)
			}
			return errors.Is(err, ErrRootGone)
		})
	}
	writeFile(t, filepath.Join(root, "g"), "x")
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
		return err == nil && b.Full && b.Replaced && slices.Equal(b.Paths, []string{"g"})
	})
}

// TestFolderWatchNeverFollowsALink: Folder.Watch reaches its directory
// without a link, at the start and at every full walk.
func TestFolderWatchNeverFollowsALink(t *testing.T) {
	f, dir := newFolder(t)
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "to-host", "secret"), "x")
	must(t, os.Symlink(outside, filepath.Join(dir, "hosts")))
	// At the start: gone, not followed (and no error from Watch: what is
	// at the directory's name as it starts is the folder's, as later).
	w, err := f.Watch("hosts/to-host", WatchOptions{Rescan: 100 * time.Millisecond, Debounce: -1})
	must(t, err)
	t.Cleanup(func() { w.Close() })
	for range 2 {
		nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
			if err == nil {
				t.Fatalf("Watch followed a link at a parent: %v", b.Paths)
			}
			return errors.Is(err, ErrRootGone)
		})
	}
	must(t, os.Remove(filepath.Join(dir, "hosts")))
	writeFile(t, filepath.Join(dir, "hosts", "to-host", "f"), "x")
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
		return err == nil && b.Full && slices.Equal(b.Paths, []string{"f"})
	})
	// A link planted at a parent while it runs: gone, not followed.
	must(t, os.Rename(filepath.Join(dir, "hosts"), filepath.Join(dir, "old")))
	must(t, os.Symlink(outside, filepath.Join(dir, "hosts")))
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
		if err == nil && slices.Contains(b.Paths, "secret") {
			t.Fatal("listed the tree a link points to")
		}
		return errors.Is(err, ErrRootGone)
	})
}

// TestWatcherSeesRootGoByEvent: the root's removal and its coming back are
// seen by its parent's watch, not at the next rescan (an hour away here).
func TestWatcherSeesRootGoByEvent(t *testing.T) {
	old := rootRetry
	rootRetry = time.Hour
	t.Cleanup(func() { rootRetry = old })
	root := filepath.Join(t.TempDir(), "to-host")
	writeFile(t, filepath.Join(root, "f"), "x")
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, Debounce: -1})
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool { return err == nil && b.Full })
	must(t, os.Rename(root, root+".away")) // moved away first, as a sync client applies a rename
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool { return errors.Is(err, ErrRootGone) })
	writeFile(t, filepath.Join(root, "g"), "x")
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
		return err == nil && b.Full && b.Replaced && slices.Contains(b.Paths, "g")
	})
	// Again, now that the watches were armed anew for the new root (a new
	// user found the second time seen only at the rescan).
	must(t, os.RemoveAll(root))
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool { return errors.Is(err, ErrRootGone) })
	writeFile(t, filepath.Join(root, "h"), "x")
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
		return err == nil && b.Full && b.Replaced && slices.Contains(b.Paths, "h")
	})
	if n := w.stats.timerWalks.Load(); n != 0 {
		t.Errorf("%d walks by the timer: the parent's events should have said it", n)
	}
}

// TestWatcherNextHonoursCancelUnderWork: with work always pending (a folder
// writer's steady stream of events), a cancelled Next returns at once
// instead of walking: a daemon's stop waited tens of seconds for a gap.
func TestWatcherNextHonoursCancelUnderWork(t *testing.T) {
	root := t.TempDir()
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, Debounce: -1})
	nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool { return err == nil && b.Full })
	w.mu.Lock()
	w.needFull = true
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b, err := w.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with work pending and a cancelled context = %v (full %v), want context.Canceled", err, b.Full)
	}
}

// TestWatcherCloseDuringWalk: Close while another goroutine's Next walks
// must wait for the walk, not close the directory under it (the race
// detector saw it in an agent's wait).
func TestWatcherCloseDuringWalk(t *testing.T) {
	root := t.TempDir()
	for i := range 2000 {
		writeFile(t, filepath.Join(root, "d", fmt.Sprintf("f%04d", i)), "x")
	}
	for range 20 {
		w, err := NewWatcher(root, WatchOptions{Rescan: time.Hour, Debounce: -1})
		must(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				w.mu.Lock()
				w.needFull = true
				w.mu.Unlock()
				if _, err := w.Next(context.Background()); err != nil {
					return
				}
			}
		}()
		time.Sleep(5 * time.Millisecond)
		must(t, w.Close())
		<-done
	}
}
