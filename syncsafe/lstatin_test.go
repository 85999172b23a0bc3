package syncsafe

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// LstatIn answers as Lstat of each path does: a file's size and time, a
// link as a link, nil for a missing name; a parent that is a link is
// refused, and so is a name that is not one component.
func TestLstatIn(t *testing.T) {
	f, dir := newFolder(t)
	writeFile(t, filepath.Join(dir, "d", "a.result"), "hello")
	must(t, os.Mkdir(filepath.Join(dir, "d", "sub"), 0o755))
	must(t, os.Symlink("a.result", filepath.Join(dir, "d", "link")))
	must(t, os.Symlink("d", filepath.Join(dir, "alias")))
	names := []string{"a.result", "missing", "sub", "link"}
	got, err := f.LstatIn("d", names)
	if err != nil || len(got) != len(names) {
		t.Fatalf("LstatIn = %v, %v", got, err)
	}
	for i, n := range names {
		want, werr := f.Lstat("d/" + n)
		switch {
		case errors.Is(werr, fs.ErrNotExist):
			if got[i] != nil {
				t.Errorf("%s: got %v for a missing name", n, got[i])
			}
		case got[i] == nil:
			t.Errorf("%s: got nil, want %v", n, want)
		case got[i].Name() != n || got[i].Size() != want.Size() || !got[i].ModTime().Equal(want.ModTime()) || got[i].Mode() != want.Mode():
			t.Errorf("%s: got %s %d %v %v, want %d %v %v", n, got[i].Name(), got[i].Size(), got[i].ModTime(), got[i].Mode(), want.Size(), want.ModTime(), want.Mode())
		}
	}
	if _, err := f.LstatIn("alias", names); err == nil {
		t.Error("LstatIn through a linked directory succeeded")
	}
	for _, bad := range []string{"", "..", "a/b", "."} {
		if _, err := f.LstatIn("d", []string{bad}); err == nil {
			t.Errorf("LstatIn(%q) accepted a name that is not one component", bad)
		}
	}
	if got, err := f.LstatIn("nodir", []string{"x"}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LstatIn in a missing directory = %v, %v; want ErrNotExist", got, err)
	}
}

// A Looker answers as Lstat of each path does, on the directory it opened
// once: a file's size and time, a link as a link (never followed), an
// error matching ErrNotExist for a missing name; a directory that is a link
// is refused, and so is a name that is not one component. A file that
// comes after the open is seen.
func TestLooker(t *testing.T) {
	f, dir := newFolder(t)
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "a.result"), "elsewhere, longer")
	writeFile(t, filepath.Join(dir, "d", "a.result"), "hello")
	must(t, os.Mkdir(filepath.Join(dir, "d", "sub"), 0o755))
	must(t, os.Symlink(filepath.Join(outside, "a.result"), filepath.Join(dir, "d", "link")))
	must(t, os.Symlink(outside, filepath.Join(dir, "alias")))
	must(t, os.Symlink("d", filepath.Join(dir, "inalias")))
	l, err := f.Looker("d")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, n := range []string{"a.result", "link", "missing"} {
		got, err := l.Lstat(n)
		want, werr := f.Lstat("d/" + n)
		switch {
		case errors.Is(werr, fs.ErrNotExist):
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: %v, %v for a missing name; want ErrNotExist", n, got, err)
			}
		case err != nil:
			t.Errorf("%s: %v, want %v", n, err, want)
		case got.Size() != want.Size() || !got.ModTime().Equal(want.ModTime()) || got.Mode() != want.Mode():
			t.Errorf("%s: got %d %v %v, want %d %v %v", n, got.Size(), got.ModTime(), got.Mode(), want.Size(), want.ModTime(), want.Mode())
		}
	}
	if fi, err := l.Lstat("link"); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("a link looked at: %v, %v; want the link itself", fi, err)
	}
	writeFile(t, filepath.Join(dir, "d", "later"), "x")
	if _, err := l.Lstat("later"); err != nil {
		t.Errorf("a file made after the open: %v", err)
	}
	for _, bad := range []string{"", "..", "a/b", "."} {
		if _, err := l.Lstat(bad); err == nil {
			t.Errorf("Lstat(%q) accepted a name that is not one component", bad)
		}
	}
	if l, err := f.Looker("d/sub"); err != nil {
		t.Errorf("a Looker on d/sub: %v", err)
	} else {
		l.Close()
	}
	for _, alias := range []string{"alias", "inalias", "inalias/sub"} {
		if l, err := f.Looker(alias); err == nil {
			l.Close()
			t.Errorf("a Looker on %s, a linked directory: it would look where the link says", alias)
		}
	}
	if _, err := f.Looker("nodir"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a Looker on a missing directory: %v; want ErrNotExist", err)
	}
}
