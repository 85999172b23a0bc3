package syncsafe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// LstatIn lstats names in dir, a slice of FileInfo in the same order with
// nil for a name that does not exist. Each name is one path component. On
// Linux the directory is opened once and each name costs one fstatat,
// instead of an open, fstat and close of each path: a rescan checks that
// thousands of finished requests' results are still in place this way.
func (f *Folder) LstatIn(dir string, names []string) ([]fs.FileInfo, error) {
	if err := cleanRel(dir); err != nil {
		return nil, fmt.Errorf("lstat in: %w", err)
	}
	for _, n := range names {
		if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\\\x00") {
			return nil, fmt.Errorf("lstat in %s: %q is not a name", dir, n)
		}
	}
	out := make([]fs.FileInfo, len(names))
	if ok, err := f.fastLstatIn(dir, names, out); ok {
		return out, err
	}
	if fi, err := f.Lstat(dir); err != nil {
		return nil, fmt.Errorf("lstat in: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("lstat in %s: not a directory", dir)
	}
	for i, n := range names {
		fi, err := f.Lstat(dir + "/" + n)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		out[i] = fi
	}
	return out, nil
}

// Looker is a directory of the folder held open for repeated looks at
// names in it (Lstat): on Linux one open that follows no link, then one
// fstatat per look that follows none either; elsewhere each look is the
// folder's Lstat of the path. A waiter that asks every millisecond whether
// a file has come pays one system call a look, and no link planted in the
// folder leads it elsewhere. Where openat2 opened the directory (Linux)
// the looks stay with it, even if another is put at its name since;
// elsewhere, or where openat2 would not, they follow the name, each
// refusing a link on the way as Lstat does.
type Looker struct {
	f   *Folder
	dir string
	d   *os.File // nil: the portable path
}

// Looker opens dir for looks by name. Close it.
func (f *Folder) Looker(dir string) (*Looker, error) {
	if err := cleanRel(dir); err != nil {
		return nil, fmt.Errorf("looker: %w", err)
	}
	d, err := f.lookerDir(dir)
	if err != nil {
		return nil, fmt.Errorf("looker %s: %w", dir, err)
	}
	if d == nil {
		// The portable path: each look refuses a linked parent; refuse
		// one at the directory's own name now, as the open does.
		if fi, err := f.Lstat(dir); err != nil {
			return nil, fmt.Errorf("looker: %w", err)
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("looker %s: not a directory", dir)
		}
	}
	return &Looker{f: f, dir: dir, d: d}, nil
}

// Lstat describes the entry name in the directory without following a
// link; an absent one is an error that matches fs.ErrNotExist.
func (l *Looker) Lstat(name string) (fs.FileInfo, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
		return nil, fmt.Errorf("lstat in %s: %q is not a name", l.dir, name)
	}
	if l.d == nil {
		return l.f.Lstat(l.dir + "/" + name)
	}
	return lstatAt(l.d, name)
}

// Close releases the directory.
func (l *Looker) Close() error {
	if l.d == nil {
		return nil
	}
	return l.d.Close()
}
