package syncsafe

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestReadFileDevice(t *testing.T) {
	f, dir := newFolder(t)
	dev, err := os.Lstat("/dev/null")
	if err != nil || dev.Mode()&fs.ModeDevice == 0 {
		t.Skip("no /dev/null device")
	}
	rdev := dev.Sys().(*syscall.Stat_t).Rdev
	if err := syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o600, int(rdev)); err != nil {
		t.Skipf("cannot mknod (not root?): %v", err)
	}
	if _, err := f.ReadFile("null", 10); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadFile(device) = %v, want ErrNotRegular", err)
	}
}

// The folder tests again on the portable path that kernels without openat2
// (or seccomp filters that forbid it) take: the answers must be the same.
func TestPortablePathWithoutOpenat2(t *testing.T) {
	noOpenat2.Store(true)
	defer noOpenat2.Store(false)
	for name, test := range map[string]func(*testing.T){
		"ReadFile": TestReadFile, "ReadFileSwapRace": TestReadFileSwapRace, "Open": TestOpen, "List": TestList,
		"MkdirAllRemove": TestMkdirAllRemove, "PublishRefusesOverwrite": TestPublishRefusesOverwrite,
		"PublishBadNames": TestPublishBadNames, "ReadFileDevice": TestReadFileDevice, "LstatIn": TestLstatIn, "Looker": TestLooker,
	} {
		t.Run(name, test)
	}
}

// Parents that are symlinks or files are refused by the openat2 path as by
// the portable one, for reading and for publishing.
func TestSymlinkedParentsRefused(t *testing.T) {
	for _, portable := range []bool{false, true} {
		noOpenat2.Store(portable)
		f, dir := newFolder(t)
		writeFile(t, filepath.Join(dir, "real", "sub", "file"), "x")
		must(t, os.Symlink("real", filepath.Join(dir, "alias")))
		must(t, os.Symlink("real/sub", filepath.Join(dir, "real", "sublink")))
		writeFile(t, filepath.Join(dir, "plain"), "y")
		for _, rel := range []string{"alias/sub/file", "real/sublink/file", "plain/file"} {
			if _, err := f.Lstat(rel); err == nil || errors.Is(err, fs.ErrNotExist) {
				t.Errorf("portable=%v: Lstat(%s) = %v, want a refusal", portable, rel, err)
			}
			if _, err := f.ReadFile(rel, 10); err == nil {
				t.Errorf("portable=%v: ReadFile(%s) succeeded", portable, rel)
			}
			if err := f.Publish(filepath.Dir(rel)+"/new", func(w io.Writer) error { return nil }); err == nil {
				t.Errorf("portable=%v: Publish under %s succeeded", portable, filepath.Dir(rel))
			}
		}
		if fi, err := f.Lstat("alias"); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("portable=%v: Lstat(alias) = %v, %v: want the link itself", portable, fi, err)
		}
		if _, err := f.Lstat("real/sub/missing"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("portable=%v: Lstat(missing) = %v", portable, err)
		}
	}
	noOpenat2.Store(false)
}

// Opening the watched directory again (at start, and whenever it was
// replaced) never waits on a FIFO a folder writer swaps in at its name
// between the look at it and the open: os.Root's own opens of a directory
// would wait for the FIFO's writer for ever (a red team's finding). The
// swaps are atomic exchanges, as fast as the machine makes them.
func TestOpeningTheRootNeverWaitsOnAFIFOSwappedIn(t *testing.T) {
	f, root := newFolder(t)
	must(t, os.Mkdir(filepath.Join(root, "w"), 0o700))
	must(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600))
	viaFolder, err := f.Watch("w", WatchOptions{Rescan: time.Hour, EventsFirst: true})
	must(t, err)
	defer viaFolder.Close()
	byPath, err := NewWatcher(filepath.Join(root, "w"), WatchOptions{Rescan: time.Hour, EventsFirst: true})
	must(t, err)
	defer byPath.Close()
	stop := make(chan struct{})
	swapped := make(chan int)
	go func() {
		n := 0
		defer func() { swapped <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, "w"), unix.AT_FDCWD, filepath.Join(root, "fifo"), unix.RENAME_EXCHANGE) == nil {
				n++
			}
		}
	}()
	done := make(chan int)
	go func() {
		opened := 0
		for range 3000 {
			for _, w := range []*Watcher{viaFolder, byPath} {
				if r, d, _, err := w.openRoot(); err == nil {
					opened++
					r.Close()
					if d != nil {
						d.Close()
					}
				}
			}
		}
		done <- opened
	}()
	select {
	case opened := <-done:
		close(stop)
		swaps := <-swapped
		t.Logf("%d of 6000 opens found the directory, %d swaps", opened, swaps)
		if swaps == 0 || opened == 6000 {
			t.Fatalf("%d swaps, %d of 6000 opens found the directory: no open met the FIFO, nothing was tested", swaps, opened)
		}
	case <-time.After(60 * time.Second):
		close(stop)
		<-swapped
		// Let the stuck open go, or the test binary would hang on exit.
		for _, name := range []string{"w", "fifo"} {
			if w, err := os.OpenFile(filepath.Join(root, name), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
		}
		t.Fatal("opening the watched directory waited on a FIFO swapped in at its name")
	}
}
