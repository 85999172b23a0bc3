//go:build unix

package syncsafe

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// scanDir reports what os.ReadDir reports, names and kinds, across many
// reads of its buffer, whether the file system gives each entry's type or
// fstatat must find it.
func TestScanDirMatchesReadDir(t *testing.T) {
	dir := t.TempDir()
	// Names of 200 bytes: 3,000 of them are about ten reads of the buffer.
	for i := range 3000 {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%0200d", i)), nil, 0o600))
	}
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700))
	must(t, os.Symlink("sub", filepath.Join(dir, "link")))
	must(t, os.Symlink("nowhere", filepath.Join(dir, "dangling")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	des, err := os.ReadDir(dir)
	must(t, err)
	var want []string
	for _, de := range des {
		k := entryOther
		switch {
		case de.Type().IsRegular():
			k = entryFile
		case de.IsDir():
			k = entryDir
		}
		want = append(want, fmt.Sprintf("%d %s", k, de.Name()))
	}
	slices.Sort(want)
	for _, unknown := range []bool{false, true} {
		typesUnknown = unknown
		d, err := os.Open(dir)
		must(t, err)
		var got []string
		var buf []byte
		err = scanDir(d, dir, &buf, func(name []byte, kind entryKind) {
			got = append(got, fmt.Sprintf("%d %s", kind, name))
		})
		d.Close()
		typesUnknown = false
		must(t, err)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("types unknown %v: scanDir gave %d entries, os.ReadDir %d; first difference at %d",
				unknown, len(got), len(want), firstDiff(got, want))
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A listing read again because it may not be reused unread (at every tenth
// full walk, or too fresh) is kept only if the directory holds the same
// entries of the same kinds: a file replaced by a directory of its name, or
// renamed, behind a modification time put back (a file system that keeps
// none), is seen by that read; an unchanged directory is kept, not built
// again.
func TestListingReadAgainIsKeptOnlyIfUnchanged(t *testing.T) {
	defer func(d time.Duration) { listingTrust = d }(listingTrust)
	listingTrust = time.Minute
	root := t.TempDir()
	a := filepath.Join(root, "a")
	writeFile(t, filepath.Join(a, "one"), "x")
	writeFile(t, filepath.Join(a, "x"), "x")
	old := time.Now().Add(-time.Hour)
	must(t, os.Chtimes(a, old, old))
	must(t, os.Chtimes(root, old, old))
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, Debounce: -1, EventsFirst: true})
	w.started = true // Next's goroutine is this test's: walks are called directly
	w.rescan = time.NewTimer(time.Hour)
	walk := func() []string {
		t.Helper()
		b, err := w.fullWalk()
		must(t, err)
		return b.Paths
	}
	if got := fmt.Sprint(walk()); got != "[a/one a/x]" {
		t.Fatalf("first walk: %s", got)
	}
	kept := w.listings["a"]
	for range maxListingReuse + 1 {
		if got := fmt.Sprint(walk()); got != "[a/one a/x]" {
			t.Fatalf("walk of an unchanged folder: %s", got)
		}
	}
	if w.stats.confirmedLists.Load() < 1 || w.listings["a"] != kept {
		t.Fatalf("%d listings read again and kept in %d walks (a's kept: %v), want a's", w.stats.confirmedLists.Load(),
			maxListingReuse+1, w.listings["a"] == kept)
	}
	for _, change := range []struct {
		what string
		do   func()
		want string
	}{
		{"a file replaced by a directory of its name", func() {
			must(t, os.Remove(filepath.Join(a, "x")))
			must(t, os.Mkdir(filepath.Join(a, "x"), 0o700))
		}, "[a/one]"},
		{"a file renamed", func() { must(t, os.Rename(filepath.Join(a, "one"), filepath.Join(a, "two"))) }, "[a/two]"},
	} {
		change.do()
		must(t, os.Chtimes(a, old, old))
		var got string
		for range maxListingReuse + 1 {
			if got = fmt.Sprint(walk()); got == change.want {
				break
			}
		}
		if got != change.want {
			t.Fatalf("%s behind a modification time put back: %d walks give %s, want %s", change.what, maxListingReuse+1,
				got, change.want)
		}
	}
	if !strings.Contains(fmt.Sprint(w.listings["a"].dirs), "a/x") {
		t.Fatalf("a's listing has no directory x: %v", w.listings["a"].dirs)
	}
}

// A FIFO, a file or a link where a watched directory was (a folder writer
// swapping them, between a walk's look at the parent and its open of the
// child) is not listed, and the open does not wait for a FIFO's writer: by
// openat2, and through the root where openat2 is missing.
func TestListOfWhatIsNoLongerADirectoryDoesNotBlock(t *testing.T) {
	root := t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "real"), 0o700))
	must(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600))
	writeFile(t, filepath.Join(root, "file"), "x")
	must(t, os.Symlink("real", filepath.Join(root, "link")))
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, EventsFirst: true})
	defer setNoOpenat2(true)()
	for _, fallback := range []bool{false, true} {
		setNoOpenat2(fallback)
		for _, name := range []string{"fifo", "file", "link"} {
			done := make(chan error, 1)
			go func() { _, err := w.list(name); done <- err }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("openat2 missing %v: %s listed as a directory", fallback, name)
				}
			case <-time.After(10 * time.Second):
				// Let the open go, or the test binary would hang on exit.
				if f, err := os.OpenFile(filepath.Join(root, name), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
				t.Fatalf("openat2 missing %v: listing %s did not return in 10 s", fallback, name)
			}
		}
	}
}

// A listing's error names the directory by the watched path, whichever way
// the directory was opened (the root's own handle may be named by a
// descriptor that is gone by then).
func TestListErrorNamesTheWatchedPath(t *testing.T) {
	root := t.TempDir()
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, EventsFirst: true})
	defer setNoOpenat2(true)()
	for _, fallback := range []bool{false, true} {
		setNoOpenat2(fallback)
		_, err := w.list("gone")
		want := filepath.Join(w.dir, "gone")
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "/proc/") {
			t.Fatalf("openat2 missing %v: listing a missing directory: %v, want an error naming %s", fallback, err, want)
		}
	}
}

// TestUnchangedWalkIsSame: a full walk that finds every directory as the
// one before reports Same, with that batch's very slices and nothing built,
// whether it reused the listings or read them again to the same entries;
// a walk after a file is added or removed, or after Skip leaves a
// directory out or in again, is not Same and lists what is there.
func TestUnchangedWalkIsSame(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	a := filepath.Join(root, "a")
	writeFile(t, filepath.Join(a, "one"), "x")
	writeFile(t, filepath.Join(a, "x"), "x")
	writeFile(t, filepath.Join(root, "s", "hidden"), "x")
	must(t, os.Symlink("one", filepath.Join(a, "link")))
	var skipS atomic.Bool
	skip := func(rel string, isDir bool) bool { return isDir && rel == "s" && skipS.Load() }
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, Debounce: -1, EventsFirst: true, Skip: skip})
	w.started = true // Next's goroutine is this test's: walks are called directly
	w.rescan = time.NewTimer(time.Hour)
	walk := func(wantSame bool, want, wantIrregular string) Batch {
		t.Helper()
		b, err := w.fullWalk()
		must(t, err)
		if b.Same != wantSame || fmt.Sprint(b.Paths) != want || fmt.Sprint(b.Irregular) != wantIrregular {
			t.Fatalf("walk: Same %v, %v, irregular %v; want Same %v, %s, irregular %s", b.Same, b.Paths, b.Irregular,
				wantSame, want, wantIrregular)
		}
		return b
	}
	const all, links = "[a/one a/x s/hidden]", "[a/link]"
	first := walk(false, all, links)
	sames := w.stats.sameWalks.Load()
	for range maxListingReuse + 2 {
		b := walk(true, all, links)
		if &b.Paths[0] != &first.Paths[0] || &b.Irregular[0] != &first.Irregular[0] {
			t.Fatal("a Same walk built its batch again")
		}
	}
	if got := w.stats.sameWalks.Load() - sames; got != maxListingReuse+2 {
		t.Fatalf("%d walks counted Same, want %d", got, maxListingReuse+2)
	}
	writeFile(t, filepath.Join(a, "two"), "x")
	walk(false, "[a/one a/two a/x s/hidden]", links)
	walk(true, "[a/one a/two a/x s/hidden]", links)
	must(t, os.Remove(filepath.Join(a, "one")))
	walk(false, "[a/two a/x s/hidden]", links)
	walk(true, "[a/two a/x s/hidden]", links)
	skipS.Store(true)
	walk(false, "[a/two a/x]", "[a/link s]")
	walk(true, "[a/two a/x]", "[a/link s]")
	skipS.Store(false)
	walk(false, "[a/two a/x s/hidden]", links)
}
