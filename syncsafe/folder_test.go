//go:build unix

package syncsafe

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestReadFile(t *testing.T) {
	f, dir := newFolder(t)
	outside := filepath.Join(t.TempDir(), "secret")
	writeFile(t, outside, "secret")
	writeFile(t, filepath.Join(dir, "a", "ok"), "hello")
	writeFile(t, filepath.Join(dir, "big"), strings.Repeat("x", 100))
	must(t, os.Symlink(outside, filepath.Join(dir, "abs-link")))
	must(t, os.Symlink("../"+filepath.Base(filepath.Dir(outside))+"/secret", filepath.Join(dir, "rel-link")))
	must(t, os.Symlink("a/ok", filepath.Join(dir, "inner-link")))
	must(t, os.Symlink(filepath.Dir(outside), filepath.Join(dir, "dirlink")))
	must(t, os.Symlink("a", filepath.Join(dir, "innerdir")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	if l, err := net.Listen("unix", filepath.Join(dir, "sock")); err == nil {
		defer l.Close()
	} else {
		t.Logf("no unix socket: %v", err)
	}

	got, err := f.ReadFile("a/ok", 5)
	if err != nil || string(got) != "hello" {
		t.Fatalf("ReadFile(a/ok) = %q, %v", got, err)
	}
	if _, err := f.ReadFile("big", 99); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadFile(big, 99) = %v, want ErrTooLarge", err)
	}
	if b, err := f.ReadFile("big", 100); err != nil || len(b) != 100 {
		t.Errorf("ReadFile(big, 100) = %d bytes, %v", len(b), err)
	}
	for _, rel := range []string{"abs-link", "rel-link", "inner-link", "fifo", "a", "sock"} {
		if _, err := f.ReadFile(rel, 1<<20); !errors.Is(err, ErrNotRegular) {
			if rel == "sock" && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			t.Errorf("ReadFile(%s) = %v, want ErrNotRegular", rel, err)
		}
	}
	// Through a symlinked directory: refused, inside the root or not.
	for _, rel := range []string{"dirlink/secret", "innerdir/ok"} {
		if b, err := f.ReadFile(rel, 1<<20); err == nil {
			t.Errorf("ReadFile(%s) = %q, want an error", rel, b)
		}
	}
	for _, rel := range []string{"../secret", "/etc/passwd", "a/../a/ok", "a//ok", "", "a\\ok"} {
		if _, err := f.ReadFile(rel, 1<<20); err == nil {
			t.Errorf("ReadFile(%q) succeeded", rel)
		}
	}
	if _, err := f.ReadFile("missing", 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile(missing) = %v, want ErrNotExist", err)
	}
}

// TestReadFileSwapRace swaps a FIFO and a regular file at one name while
// reading it: every read must end with the content or a refusal, never
// block on the FIFO, never return FIFO data.
func TestReadFileSwapRace(t *testing.T) {
	f, dir := newFolder(t)
	name := filepath.Join(dir, "x")
	writeFile(t, name, "regular")
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo-src"), 0o600))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				_ = os.Remove(filepath.Join(dir, "fifo-tmp"))
				_ = syscall.Mkfifo(filepath.Join(dir, "fifo-tmp"), 0o600)
				_ = os.Rename(filepath.Join(dir, "fifo-tmp"), name)
			} else {
				_ = os.WriteFile(filepath.Join(dir, "reg-tmp"), []byte("regular"), 0o644)
				_ = os.Rename(filepath.Join(dir, "reg-tmp"), name)
			}
		}
	}()
	done := make(chan struct{})
	var ok, refused int
	go func() {
		defer close(done)
		for i := 0; i < 3000; i++ {
			b, err := f.ReadFile("x", 100)
			switch {
			case err == nil && string(b) == "regular":
				ok++
			case err == nil:
				t.Errorf("read %q", b)
			default:
				refused++
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("ReadFile blocked (FIFO opened in blocking mode?)")
	}
	close(stop)
	wg.Wait()
	t.Logf("reads: %d ok, %d refused", ok, refused)
	// Under heavy load every racing read may meet a swap; once the swapping
	// stops, a regular file at the name must read normally again. (Remove
	// first: the swapper may have left a FIFO there, and writing to a FIFO
	// would block.)
	must(t, os.Remove(name))
	writeFile(t, name, "regular")
	if b, err := f.ReadFile("x", 100); err != nil || string(b) != "regular" {
		t.Errorf("after the race: %q, %v", b, err)
	}
}

func TestOpen(t *testing.T) {
	f, dir := newFolder(t)
	writeFile(t, filepath.Join(dir, "p"), "payload")
	file, size, err := f.Open("p", 7)
	if err != nil || size != 7 {
		t.Fatalf("Open = %d, %v", size, err)
	}
	b := make([]byte, 16)
	n, _ := file.Read(b)
	file.Close()
	if string(b[:n]) != "payload" {
		t.Errorf("read %q", b[:n])
	}
	if _, _, err := f.Open("p", 6); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Open over cap = %v, want ErrTooLarge", err)
	}
}

func TestList(t *testing.T) {
	f, dir := newFolder(t)
	writeFile(t, filepath.Join(dir, "d", "file"), "abc")
	must(t, os.Mkdir(filepath.Join(dir, "d", "sub"), 0o755))
	must(t, os.Symlink("/etc", filepath.Join(dir, "d", "link")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "d", "pipe"), 0o600))
	got, err := f.List("d")
	if err != nil {
		t.Fatal(err)
	}
	// Neither the link nor the FIFO is a file or a directory.
	want := []Entry{{"file", 0}, {"link", fs.ModeIrregular}, {"pipe", fs.ModeIrregular}, {"sub", fs.ModeDir}}
	if len(got) != len(want) {
		t.Fatalf("List = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("List[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := f.List("d/link"); err == nil {
		t.Error("List through a symlink succeeded")
	}
	if _, err := f.List("."); err != nil {
		t.Errorf("List(.) = %v", err)
	}
}

func TestMkdirAllRemove(t *testing.T) {
	f, dir := newFolder(t)
	must(t, f.MkdirAll("hosts/abc/to-host"))
	if fi, err := os.Stat(filepath.Join(dir, "hosts/abc/to-host")); err != nil || !fi.IsDir() {
		t.Fatalf("MkdirAll: %v", err)
	}
	must(t, f.MkdirAll("hosts/abc/to-host")) // idempotent
	for _, bad := range []string{"Hosts", "a/../b", "x.tmp", "../x", "/abs"} {
		if err := f.MkdirAll(bad); err == nil {
			t.Errorf("MkdirAll(%q) succeeded", bad)
		}
	}
	must(t, os.Symlink(t.TempDir(), filepath.Join(dir, "escape")))
	if err := f.MkdirAll("escape/x"); err == nil {
		t.Error("MkdirAll through a symlink succeeded")
	}
	writeFile(t, filepath.Join(dir, "hosts/abc/mine"), "x")
	must(t, f.Remove("hosts/abc/mine"))
	if _, err := os.Lstat(filepath.Join(dir, "hosts/abc/mine")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove left the file: %v", err)
	}
	writeFile(t, filepath.Join(dir, "Foreign.txt"), "x")
	if err := f.Remove("Foreign.txt"); err == nil {
		t.Error("Remove of a foreign name succeeded")
	}
}

func TestMarker(t *testing.T) {
	f, dir := newFolder(t)
	if err := CheckMarker(f); !errors.Is(err, ErrNoMarker) {
		t.Fatalf("CheckMarker(empty) = %v, want ErrNoMarker", err)
	}
	must(t, WriteMarker(f))
	must(t, CheckMarker(f))
	must(t, WriteMarker(f)) // idempotent
	b, _ := os.ReadFile(filepath.Join(dir, MarkerName))
	if string(b) != "syncbridge folder v1\n" {
		t.Errorf("marker = %q", b)
	}

	g, gdir := newFolder(t)
	writeFile(t, filepath.Join(gdir, MarkerName), "syncbridge folder v2\n")
	err := CheckMarker(g)
	if err == nil || errors.Is(err, ErrNoMarker) || !strings.Contains(err.Error(), "v2") {
		t.Errorf("CheckMarker(wrong) = %v", err)
	}
	if err := WriteMarker(g); err == nil {
		t.Error("WriteMarker over a wrong marker succeeded")
	}
	b, _ = os.ReadFile(filepath.Join(gdir, MarkerName))
	if !bytes.Equal(b, []byte("syncbridge folder v2\n")) {
		t.Errorf("WriteMarker changed a foreign marker to %q", b)
	}

	// A marker still being copied in place (empty, or a beginning of its
	// content) is not yet synced, not another program's folder.
	zeros := strings.Repeat("\x00", len(MarkerContent))
	for _, part := range []string{"", "syncbridge fol", MarkerContent[:len(MarkerContent)-1], zeros, "syncbridge" + zeros[10:]} {
		p, pdir := newFolder(t)
		writeFile(t, filepath.Join(pdir, MarkerName), part)
		err := CheckMarker(p)
		if !errors.Is(err, ErrNoMarker) || !strings.Contains(err.Error(), "still be copying") ||
			!strings.Contains(err.Error(), fmt.Sprintf("holds %d of its", len(strings.TrimRight(part, "\x00")))) {
			t.Errorf("CheckMarker(%q) = %v, want ErrNoMarker saying it is still being copied", part, err)
		}
		if err := WriteMarker(p); err == nil {
			t.Errorf("WriteMarker over a marker being copied (%q) succeeded", part)
		}
		if b, _ := os.ReadFile(filepath.Join(pdir, MarkerName)); string(b) != part {
			t.Errorf("WriteMarker changed a marker being copied from %q to %q", part, b)
		}
	}

	// Not a copy under way: longer than the content, or other bytes after
	// a prefix.
	for _, other := range []string{MarkerContent + "\x00", "syncbridge" + zeros[10:] + "\x00", "syncbridge\x00x", "sync\n"} {
		p, pdir := newFolder(t)
		writeFile(t, filepath.Join(pdir, MarkerName), other)
		if err := CheckMarker(p); err == nil || errors.Is(err, ErrNoMarker) {
			t.Errorf("CheckMarker(%q) = %v, want another program's folder", other, err)
		}
	}

	h, hdir := newFolder(t)
	must(t, os.Symlink(filepath.Join(dir, MarkerName), filepath.Join(hdir, MarkerName)))
	if err := CheckMarker(h); err == nil || errors.Is(err, ErrNoMarker) {
		t.Errorf("CheckMarker(symlink) = %v, want a refusal", err)
	}
}

// RemoveAll clears a directory planted at one of our names, links inside it
// removed, not followed; it refuses foreign names and paths through links.
func TestRemoveAll(t *testing.T) {
	f, dir := newFolder(t)
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "keep"), "x")
	must(t, os.MkdirAll(filepath.Join(dir, "hosts/abc/id.result/deep"), 0o755))
	writeFile(t, filepath.Join(dir, "hosts/abc/id.result/deep/f"), "x")
	must(t, os.Symlink(outside, filepath.Join(dir, "hosts/abc/id.result/link")))
	must(t, f.RemoveAll("hosts/abc/id.result"))
	if _, err := os.Lstat(filepath.Join(dir, "hosts/abc/id.result")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("RemoveAll left the directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Fatalf("RemoveAll followed a link out of the folder: %v", err)
	}
	must(t, os.Symlink(outside, filepath.Join(dir, "hosts/esc")))
	if err := f.RemoveAll("hosts/esc/keep"); err == nil {
		t.Error("RemoveAll through a link succeeded")
	}
	if err := f.RemoveAll("Foreign"); err == nil {
		t.Error("RemoveAll of a foreign name succeeded")
	}
}

// TestFolderWatchStartsBesideAFIFO: a folder writer who puts a FIFO (or
// nothing) at the watched directory's name as the watcher starts costs the
// caller ErrRootGone until a directory is back, as it would later: Watch
// neither fails (a daemon that could not start) nor waits on the FIFO.
func TestFolderWatchStartsBesideAFIFO(t *testing.T) {
	for _, what := range []string{"fifo", "nothing"} {
		t.Run(what, func(t *testing.T) {
			f, dir := newFolder(t)
			must(t, os.Mkdir(filepath.Join(dir, "hosts"), 0o755))
			root := filepath.Join(dir, "hosts", "to-host")
			if what == "fifo" {
				must(t, syscall.Mkfifo(root, 0o600))
			}
			w, err := f.Watch("hosts/to-host", WatchOptions{Rescan: time.Hour, Debounce: -1, EventsFirst: true})
			must(t, err)
			t.Cleanup(func() { w.Close() })
			for range 2 {
				nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
					if err == nil {
						t.Fatalf("a batch from no directory: %+v", b)
					}
					return errors.Is(err, ErrRootGone)
				})
			}
			os.Remove(root)
			writeFile(t, filepath.Join(root, "f"), "x")
			nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
				// Not "replaced": there was none before it.
				return err == nil && b.Full && !b.Replaced && slices.Equal(b.Paths, []string{"f"})
			})
			// Watched from then on: a new file is seen by an event (or
			// a walk one brought on), never by the timer: the rescan is
			// an hour away, and the look for the gone root was one.
			timer := w.stats.timerWalks.Load()
			writeFile(t, filepath.Join(root, "g"), "x")
			nextUntil(t, w, 10*time.Second, func(b Batch, err error) bool {
				return err == nil && slices.Contains(b.Paths, "g")
			})
			if n := w.stats.timerWalks.Load() - timer; n != 0 {
				t.Errorf("%d walks by the timer: the new root's watch should have said it", n)
			}
		})
	}
}
