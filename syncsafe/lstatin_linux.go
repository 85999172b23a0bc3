package syncsafe

import (
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// fastLstatIn is LstatIn by a directory opened with openat2 and fstatat of
// each name relative to it (AT_SYMLINK_NOFOLLOW: a link is reported, never
// followed). ok is false when the portable path must answer.
func (f *Folder) fastLstatIn(dir string, names []string, out []fs.FileInfo) (ok bool, err error) {
	d, ok, err := f.resolve(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if !ok {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("lstat in %s: %w", dir, err)
	}
	defer d.Close()
	for i, n := range names {
		var st unix.Stat_t
		switch err := unix.Fstatat(int(d.Fd()), n, &st, unix.AT_SYMLINK_NOFOLLOW); err {
		case nil:
			out[i] = &statInfo{name: n, st: st}
		case unix.ENOENT:
		default:
			return true, fmt.Errorf("lstat in %s: %s: %w", dir, n, err)
		}
	}
	return true, nil
}

// statInfo is an fs.FileInfo from a stat_t. Its methods take a pointer, so
// that Sys gives the stat_t it holds rather than a copy made on the heap at
// each call (a rescan asks for the inode and change time of thousands).
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s *statInfo) Sys() any           { return &s.st }

func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	if s.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// lookerDir opens dir for a Looker: by openat2 beneath the root, no link
// followed; nil (and no error) where openat2 cannot, for the portable path.
func (f *Folder) lookerDir(dir string) (*os.File, error) {
	d, ok, err := f.resolve(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if !ok {
		// The portable path answers, precisely: a link at the final name
		// (openat2 says ENOTDIR, O_DIRECTORY with O_NOFOLLOW) is refused
		// there.
		return nil, nil
	}
	return d, err
}

// lstatAt is an fstatat of name relative to d that follows no link.
func lstatAt(d *os.File, name string) (fs.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "fstatat", Path: name, Err: err}
	}
	return &statInfo{name: name, st: st}, nil
}
