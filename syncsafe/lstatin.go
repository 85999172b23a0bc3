package syncsafe

import (
	"errors"
	"fmt"
	"io/fs"
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
