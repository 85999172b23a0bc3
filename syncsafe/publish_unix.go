//go:build unix

package syncsafe

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// openReadFlags: a FIFO (or device) swapped in between Lstat and open must
// not block the open.
const openReadFlags = syscall.O_NONBLOCK

// openDirFlags: what opens a directory through the root must refuse
// anything else at its name at once: a FIFO swapped in for it would block
// a plain open until a writer came (a folder writer stalling the watcher),
// and a link would be followed where it stays inside the root.
const openDirFlags = syscall.O_DIRECTORY | syscall.O_NONBLOCK | syscall.O_NOFOLLOW

// dirH is an open directory; files are created, opened, removed and moved
// relative to its descriptor, so no path is resolved twice.
type dirH struct {
	f  *os.File
	id [2]uint64 // device and inode: which directory a shared fsync covers (dirsync.go)
}

type stagingDir struct {
	h    dirH
	path string
}

func openStaging(dir string) (*stagingDir, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	fi, err := d.Stat()
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("%s: not a directory", dir)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	return &stagingDir{h: dirH{f: d}, path: dir}, nil
}

func (s *stagingDir) close() error { return s.h.f.Close() }

// openDirH opens dir of the folder through the root and makes sure it is the
// very directory that Lstat saw (no symlink followed).
func (f *Folder) openDirH(dir string) (dirH, error) {
	var fi os.FileInfo
	if dir != "." {
		var err error
		if fi, err = f.Lstat(dir); err != nil {
			return dirH{}, err
		}
		if !fi.IsDir() {
			return dirH{}, fmt.Errorf("%s: not a directory", dir)
		}
	}
	d, err := f.openFile(dir, os.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return dirH{}, err
	}
	st, err := d.Stat()
	if err != nil || (fi != nil && !os.SameFile(fi, st)) {
		d.Close()
		return dirH{}, fmt.Errorf("%s: directory replaced while opening", dir)
	}
	h := dirH{f: d}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		h.id = [2]uint64{uint64(sys.Dev), uint64(sys.Ino)}
	}
	return h, nil
}

func (h dirH) fd() int { return int(h.f.Fd()) }

func (h dirH) close() error { return h.f.Close() }

func (h dirH) sync() error { return h.f.Sync() }

// syncID names the directory for sharing fsyncs; ok is false when unknown.
func (h dirH) syncID() (any, bool) { return h.id, h.id != [2]uint64{} }

func (h dirH) create(name string) (*os.File, error) {
	fd, err := unix.Openat(h.fd(), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

func (h dirH) open(name string) (*os.File, error) {
	fd, err := unix.Openat(h.fd(), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// lstat reports whether name exists in the directory (a symlink counts).
func (h dirH) lstat(name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(h.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "fstatat", Path: name, Err: err}
	}
	return nil
}

// regularSince reports whether name is a regular file in the directory
// (a link is not followed) and its modification time.
func (h dirH) regularSince(name string) (bool, time.Time, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(h.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false, time.Time{}, &os.PathError{Op: "fstatat", Path: name, Err: err}
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG, time.Unix(st.Mtim.Unix()), nil
}

func (h dirH) remove(name string) error {
	if err := unix.Unlinkat(h.fd(), name, 0); err != nil {
		return &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	return nil
}

// linkUnlink moves without replacing where no rename flag exists: link(2)
// fails with EEXIST if anything is at the new name.
func linkUnlink(src dirH, srcName string, dst dirH, dstName string) error {
	if err := unix.Linkat(src.fd(), srcName, dst.fd(), dstName, 0); err != nil {
		return &os.LinkError{Op: "linkat", Old: srcName, New: dstName, Err: err}
	}
	// A failed unlink leaves only our temp behind, which SweepTemps removes.
	_ = unix.Unlinkat(src.fd(), srcName, 0)
	return nil
}

func renameReplace(src dirH, srcName string, dst dirH, dstName string) error {
	if err := unix.Renameat(src.fd(), srcName, dst.fd(), dstName); err != nil {
		return &os.LinkError{Op: "renameat", Old: srcName, New: dstName, Err: err}
	}
	return nil
}

func isCrossDevice(err error) bool { return errors.Is(err, unix.EXDEV) }

func isTransient(err error) bool {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case unix.EBUSY, unix.ETXTBSY, unix.EINTR, unix.EAGAIN:
		return true
	}
	return false
}
