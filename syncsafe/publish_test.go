//go:build unix

package syncsafe

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

// tempsIn lists "~$*.tmp" names in dir.
func tempsIn(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if isOurTemp(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestPublishTempMode checks, from inside the write func, that the temp
// exists with mode 0600 even under umask 0, in the staging dir or in the
// target dir.
func TestPublishTempMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	for _, staged := range []bool{false, true} {
		t.Run(fmt.Sprintf("staged=%v", staged), func(t *testing.T) {
			var opts []FolderOption
			staging := ""
			if staged {
				staging = t.TempDir()
				opts = append(opts, WithStaging(staging))
			}
			f, dir := newFolder(t, opts...)
			tempDir := dir
			if staged {
				tempDir = staging
			}
			var seen []string
			err := f.Publish("out", func(w io.Writer) error {
				seen = tempsIn(t, tempDir)
				for _, n := range seen {
					fi, err := os.Lstat(filepath.Join(tempDir, n))
					if err != nil {
						return err
					}
					if fi.Mode() != 0o600 {
						t.Errorf("temp %s mode %v, want 0600", n, fi.Mode())
					}
				}
				if staged && len(tempsIn(t, dir)) != 0 {
					t.Error("staged publish put a temp into the folder")
				}
				_, err := io.WriteString(w, "data")
				return err
			})
			must(t, err)
			if len(seen) != 1 {
				t.Fatalf("temps during write: %v, want exactly one", seen)
			}
			if !staged && seen[0] != "~$out.tmp" {
				t.Errorf("in-folder temp %q, want ~$out.tmp", seen[0])
			}
			fi, err := os.Lstat(filepath.Join(dir, "out"))
			must(t, err)
			if fi.Mode() != 0o600 {
				t.Errorf("published mode %v, want 0600", fi.Mode())
			}
			if l := append(tempsIn(t, dir), tempsIn(t, tempDir)...); len(l) != 0 {
				t.Errorf("temps left after success: %v", l)
			}
		})
	}
}

func TestPublishNoTempLeft(t *testing.T) {
	for _, staged := range []bool{false, true} {
		t.Run(fmt.Sprintf("staged=%v", staged), func(t *testing.T) {
			staging := t.TempDir()
			var opts []FolderOption
			if staged {
				opts = append(opts, WithStaging(staging))
			}
			f, dir := newFolder(t, opts...)
			must(t, f.MkdirAll("sub"))
			boom := errors.New("boom")
			err := f.Publish("sub/fail", func(w io.Writer) error {
				io.WriteString(w, "partial")
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("Publish with failing write = %v, want boom", err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "sub", "fail")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("failed publish left the final file: %v", err)
			}
			must(t, f.Publish("sub/ok", writeString("content"), WithMode(0o644)))
			b, _ := os.ReadFile(filepath.Join(dir, "sub", "ok"))
			if string(b) != "content" {
				t.Errorf("published %q", b)
			}
			if fi, _ := os.Lstat(filepath.Join(dir, "sub", "ok")); fi.Mode() != 0o644 {
				t.Errorf("WithMode: mode %v", fi.Mode())
			}
			// Without its directory fsync (a later publish makes it durable)
			// the file is placed the same way, and refuses an overwrite.
			must(t, f.Publish("sub/first", writeString("first"), WithoutDirSync()))
			if b, _ := os.ReadFile(filepath.Join(dir, "sub", "first")); string(b) != "first" {
				t.Errorf("WithoutDirSync: published %q", b)
			}
			if err := f.Publish("sub/first", writeString("again"), WithoutDirSync()); !errors.Is(err, ErrExists) {
				t.Errorf("WithoutDirSync over an existing file: %v", err)
			}
			// Without any fsync (a durable copy elsewhere holds the bytes:
			// the host's result pair) it is placed the same way too.
			must(t, f.Publish("sub/quick", writeString("quick"), WithoutSync(), WithMode(0o644)))
			must(t, f.PublishReplace("sub/quick", writeString("quicker"), WithoutSync(), WithMode(0o644)))
			if b, _ := os.ReadFile(filepath.Join(dir, "sub", "quick")); string(b) != "quicker" {
				t.Errorf("WithoutSync: published %q", b)
			}
			if err := f.Publish("sub/quick", writeString("again"), WithoutSync()); !errors.Is(err, ErrExists) {
				t.Errorf("WithoutSync over an existing file: %v", err)
			}
			if l := append(tempsIn(t, filepath.Join(dir, "sub")), tempsIn(t, staging)...); len(l) != 0 {
				t.Errorf("temps left: %v", l)
			}
		})
	}
}

func TestPublishRefusesOverwrite(t *testing.T) {
	staging := t.TempDir()
	f, dir := newFolder(t, WithStaging(staging))
	writeFile(t, filepath.Join(dir, "taken"), "original")
	must(t, os.Symlink("nowhere", filepath.Join(dir, "dangling")))
	for _, rel := range []string{"taken", "dangling"} {
		if err := f.Publish(rel, writeString("new")); !errors.Is(err, ErrExists) {
			t.Errorf("Publish(%s) = %v, want ErrExists", rel, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "taken"))
	if string(b) != "original" {
		t.Errorf("overwritten: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("publish followed a dangling symlink")
	}

	// Racing publishers of one name, both past the early existence check
	// before either moves: the no-replace move must let exactly one win.
	for round := 0; round < 20; round++ {
		rel := fmt.Sprintf("race%d", round)
		var ready sync.WaitGroup
		ready.Add(2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = f.Publish(rel, func(w io.Writer) error {
					ready.Done()
					ready.Wait()
					_, err := fmt.Fprintf(w, "writer %d", i)
					return err
				})
			}()
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			if err == nil {
				wins++
			} else if !errors.Is(err, ErrExists) {
				t.Errorf("round %d: %v", round, err)
			}
		}
		if wins != 1 {
			t.Errorf("round %d: %d winners (%v), want 1", round, wins, errs)
		}
	}
	if l := append(tempsIn(t, dir), tempsIn(t, staging)...); len(l) != 0 {
		t.Errorf("temps left: %v", l)
	}
}

func TestPublishReplace(t *testing.T) {
	f, dir := newFolder(t, WithStaging(t.TempDir()))
	must(t, f.PublishReplace("status", writeString("one")))
	must(t, f.PublishReplace("status", writeString("two")))
	b, _ := os.ReadFile(filepath.Join(dir, "status"))
	if string(b) != "two" {
		t.Errorf("status = %q", b)
	}
}

func TestPublishConcurrentDistinct(t *testing.T) {
	for _, staged := range []bool{false, true} {
		t.Run(fmt.Sprintf("staged=%v", staged), func(t *testing.T) {
			var opts []FolderOption
			if staged {
				opts = append(opts, WithStaging(t.TempDir()))
			}
			f, dir := newFolder(t, opts...)
			const n = 64
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := f.Publish(fmt.Sprintf("f%02d", i), writeString(fmt.Sprint(i))); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			for i := range n {
				b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)))
				if err != nil || string(b) != fmt.Sprint(i) {
					t.Errorf("f%02d = %q, %v", i, b, err)
				}
			}
			if l := tempsIn(t, dir); len(l) != 0 {
				t.Errorf("temps left: %v", l)
			}
		})
	}
}

func TestPublishBadNames(t *testing.T) {
	f, dir := newFolder(t)
	for _, rel := range []string{"Bad", "x.tmp", "../x", "/x", "a/../b", "missing-dir/x", "~$x.tmp", ""} {
		if err := f.Publish(rel, writeString("x")); err == nil {
			t.Errorf("Publish(%q) succeeded", rel)
		}
	}
	must(t, os.Symlink(t.TempDir(), filepath.Join(dir, "link")))
	if err := f.Publish("link/x", writeString("x")); err == nil {
		t.Error("Publish through a symlinked directory succeeded")
	}
}

// TestPublishCrossDevice stages on another filesystem: the EXDEV move must
// fall back to an in-folder temp, publish, and leave no temp anywhere.
func TestPublishCrossDevice(t *testing.T) {
	dir := t.TempDir()
	staging, err := os.MkdirTemp("/dev/shm", "syncsafe-staging")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.RemoveAll(staging)
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(staging, &b) != nil || a.Dev == b.Dev {
		t.Skip("/dev/shm is on the same filesystem as the temp dir")
	}
	f, err := OpenFolder(dir, WithStaging(staging))
	must(t, err)
	defer f.Close()
	must(t, f.Publish("one", writeString("first")))
	if !f.crossDev.Load() {
		t.Error("EXDEV not detected")
	}
	must(t, f.Publish("two", writeString("second")))
	for name, want := range map[string]string{"one": "first", "two": "second"} {
		got, _ := os.ReadFile(filepath.Join(dir, name))
		if string(got) != want {
			t.Errorf("%s = %q", name, got)
		}
	}
	if l := append(tempsIn(t, dir), tempsIn(t, staging)...); len(l) != 0 {
		t.Errorf("temps left: %v", l)
	}
	if err := f.Publish("one", writeString("again")); !errors.Is(err, ErrExists) {
		t.Errorf("cross-device overwrite: %v, want ErrExists", err)
	}
}

func TestSweepTemps(t *testing.T) {
	staging := t.TempDir()
	f, dir := newFolder(t, WithStaging(staging))
	old := time.Now().Add(-2 * time.Hour)
	for _, p := range []string{
		filepath.Join(dir, "~$a.tmp"), filepath.Join(dir, "~$b.tmp"), filepath.Join(dir, "~$report.docx"),
		filepath.Join(dir, "keep"), filepath.Join(staging, "~$x.0011223344556677.tmp"), filepath.Join(staging, "ledger.db"),
	} {
		writeFile(t, p, "x")
		must(t, os.Chtimes(p, old, old))
	}
	writeFile(t, filepath.Join(dir, "~$fresh.tmp"), "x") // a publisher at work
	must(t, os.Mkdir(filepath.Join(dir, "~$dir.tmp"), 0o755))
	must(t, os.Chtimes(filepath.Join(dir, "~$dir.tmp"), old, old))

	// A leftover in-folder temp does not block its name: the publish goes
	// around it under a unique temp name.
	if err := f.Publish("a", writeString("x")); err != nil {
		t.Errorf("staged Publish(a) = %v", err)
	}
	g, err := OpenFolder(dir)
	must(t, err)
	defer g.Close()
	if err := g.Publish("b", writeString("x")); err != nil {
		t.Errorf("Publish(b) beside a leftover temp = %v", err)
	}

	n, err := f.SweepTemps(".", time.Hour)
	must(t, err)
	if n != 2 {
		t.Errorf("SweepTemps removed %d, want 2", n)
	}
	n, err = f.SweepStaging(time.Hour)
	must(t, err)
	if n != 1 {
		t.Errorf("SweepStaging removed %d, want 1", n)
	}
	for _, p := range []string{"~$report.docx", "keep", "~$fresh.tmp", "~$dir.tmp"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(staging, "ledger.db")); err != nil {
		t.Errorf("ledger.db removed: %v", err)
	}
	for _, p := range []string{filepath.Join(dir, "~$a.tmp"), filepath.Join(staging, "~$x.0011223344556677.tmp")} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s not removed", p)
		}
	}
}

func TestRetryTransient(t *testing.T) {
	calls := 0
	err := retryTransient(func() error {
		calls++
		if calls < 3 {
			return &os.LinkError{Op: "renameat2", Old: "a", New: "b", Err: syscall.EBUSY}
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("transient: err %v after %d calls, want nil after 3", err, calls)
	}
	calls = 0
	err = retryTransient(func() error {
		calls++
		return &os.LinkError{Op: "renameat2", Old: "a", New: "b", Err: syscall.EEXIST}
	})
	if !errors.Is(err, fs.ErrExist) || calls != 1 {
		t.Errorf("permanent: err %v after %d calls, want EEXIST after 1", err, calls)
	}
	calls = 0
	err = retryTransient(func() error {
		calls++
		return syscall.ETXTBSY
	})
	if !errors.Is(err, syscall.ETXTBSY) || calls < 3 {
		t.Errorf("always busy: err %v after %d calls, want ETXTBSY after several", err, calls)
	}
}

// TestPublishAroundSquattedTemp: a directory (or file, or link) a folder
// writer planted at the fixed in-folder temp name must not block the
// publish, with or without a staging directory on another file system.
func TestPublishAroundSquattedTemp(t *testing.T) {
	for _, crossDev := range []bool{false, true} {
		t.Run(fmt.Sprintf("crossDev=%v", crossDev), func(t *testing.T) {
			var f *Folder
			var dir string
			if crossDev {
				f, dir = newFolder(t, WithStaging(t.TempDir()))
				f.crossDev.Store(true) // as after a first EXDEV
			} else {
				f, dir = newFolder(t)
			}
			writeFile(t, filepath.Join(dir, "~$a.result.tmp", "junk", "deeper"), "x")
			writeFile(t, filepath.Join(dir, "~$b.result.tmp"), "squatter")
			must(t, os.Symlink("/", filepath.Join(dir, "~$c.result.tmp")))
			for _, name := range []string{"a.result", "b.result", "c.result"} {
				if err := f.Publish(name, func(w io.Writer) error { _, err := io.WriteString(w, "mine"); return err }); err != nil {
					t.Fatalf("publish %s beside a squatted temp: %v", name, err)
				}
				if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != "mine" {
					t.Fatalf("%s = %q, %v", name, b, err)
				}
			}
		})
	}
}

// TestSweepTempsNeverTakesATempBeingWritten: a temp this Folder's publish
// is writing survives SweepTemps with no age guard, even when its time
// says it is a day old (a clock stepped back, a file server's clock), at
// its fixed name and at the unique one a leftover sends it to; the
// leftovers go.
func TestSweepTempsNeverTakesATempBeingWritten(t *testing.T) {
	f, dir := newFolder(t)
	d := filepath.Join(dir, "d")
	writeFile(t, filepath.Join(d, "~$s.tmp"), "a crash's, at s's fixed temp name")
	type pub struct {
		name    string
		writing chan struct{}
		done    chan error
	}
	release := make(chan struct{})
	var pubs []pub
	// r at its fixed temp name, s at a unique one (a leftover stands at
	// its fixed one), q twice: the second sent to a unique name by the
	// first, which keeps its own.
	for i, name := range []string{"r", "s", "q", "q"} {
		p := pub{name, make(chan struct{}), make(chan error, 1)}
		publish := f.Publish
		if i >= 2 {
			publish = f.PublishReplace
		}
		go func() {
			p.done <- publish("d/"+name, func(w io.Writer) error {
				close(p.writing)
				<-release
				_, err := io.WriteString(w, "ok")
				return err
			})
		}()
		<-p.writing
		pubs = append(pubs, p)
	}
	ents, err := os.ReadDir(d)
	must(t, err)
	day := time.Now().Add(-24 * time.Hour)
	var temps []string
	for _, e := range ents {
		if isOurTemp(e.Name()) {
			must(t, os.Chtimes(filepath.Join(d, e.Name()), day, day))
			temps = append(temps, e.Name())
		}
	}
	if len(temps) != 5 {
		t.Fatalf("temps %v: want r's, s's unique one, q's two and the leftover", temps)
	}
	n, err := f.SweepTemps("d", 0)
	if err != nil || n != 1 {
		t.Errorf("SweepTemps = %d, %v; want the leftover alone", n, err)
	}
	if _, err := os.Lstat(filepath.Join(d, "~$s.tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the leftover is still there: %v", err)
	}
	close(release)
	for _, p := range pubs {
		if err := <-p.done; err != nil {
			t.Fatalf("publish %s: %v", p.name, err)
		}
		if b, err := os.ReadFile(filepath.Join(d, p.name)); err != nil || string(b) != "ok" {
			t.Errorf("%s: %q, %v", p.name, b, err)
		}
	}
	// Given back: a leftover at a name once taken is swept again.
	writeFile(t, filepath.Join(d, "~$r.tmp"), "left")
	if n, err := f.SweepTemps("d", 0); err != nil || n != 1 {
		t.Errorf("SweepTemps after the publishes = %d, %v; want 1", n, err)
	}
}

// TestSweepTempsKnowsATempByItsDirectory: a folder writer who renames the
// directory a publish is writing into to another directory's path does not
// make the sweep of that path take the temp for a leftover.
func TestSweepTempsKnowsATempByItsDirectory(t *testing.T) {
	f, dir := newFolder(t)
	must(t, os.MkdirAll(filepath.Join(dir, "a"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "b"), 0o755))
	writing, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- f.Publish("b/r", func(w io.Writer) error {
			close(writing)
			<-release
			_, err := io.WriteString(w, "ok")
			return err
		})
	}()
	<-writing
	must(t, os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "a.old")))
	must(t, os.Rename(filepath.Join(dir, "b"), filepath.Join(dir, "a")))
	day := time.Now().Add(-24 * time.Hour)
	must(t, os.Chtimes(filepath.Join(dir, "a", "~$r.tmp"), day, day))
	if n, err := f.SweepTemps("a", 0); err != nil || n != 0 {
		t.Errorf("SweepTemps = %d, %v: took the temp being written", n, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("publish: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a", "r")); err != nil || string(b) != "ok" {
		t.Errorf("a/r: %q, %v", b, err)
	}
}

// Flush makes files published WithoutSync durable: by syncfs on Linux, and
// file by file where there is none (flushEach, run here too). A name that
// is gone is skipped; one that is not a regular file is returned as not
// flushed, never opened (a FIFO would block the open), and the rest are
// flushed all the same.
func TestFlush(t *testing.T) {
	f, dir := newFolder(t)
	must(t, f.MkdirAll("sub"))
	must(t, f.Publish("sub/a", writeString("a"), WithoutSync()))
	must(t, f.Publish("sub/b", writeString("b"), WithoutSync()))
	rels := []string{"sub/a", "sub/b", "sub/gone"}
	if failed := f.Flush(rels); len(failed) != 0 {
		t.Fatalf("not flushed: %v", failed)
	}
	if failed := f.flushEach(rels); len(failed) != 0 {
		t.Fatalf("file by file, not flushed: %v", failed)
	}
	if failed := f.Flush(nil); len(failed) != 0 {
		t.Fatal(failed)
	}
	// File by file, one call takes flushEachMax names at most: the rest
	// are returned for the next.
	many := make([]string, flushEachMax+2)
	for i := range many {
		many[i] = fmt.Sprintf("sub/gone-%d", i)
	}
	if failed := f.flushEach(many); len(failed) != 2 || failed[0] != many[flushEachMax] {
		t.Errorf("%d names file by file: not flushed %v, want the last 2", len(many), failed)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "sub", "fifo"), 0o644); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	if failed := f.flushEach([]string{"sub/a", "sub/fifo", "sub/b"}); strings.Join(failed, " ") != "sub/fifo" {
		t.Errorf("a FIFO at a name among files: not flushed %v, want the FIFO alone", failed)
	}
	for _, rel := range []string{"sub/a", "sub/b"} {
		if b, _ := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel))); string(b) != rel[len(rel)-1:] {
			t.Errorf("%s holds %q", rel, b)
		}
	}
}
