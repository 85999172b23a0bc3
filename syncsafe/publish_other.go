//go:build !unix

package syncsafe

import (
	"errors"
	"os"
	"path"
	"syscall"
	"time"
)

// openReadFlags: Windows has no FIFOs in a synced folder to guard against.
const openReadFlags = 0

// openDirFlags: see openReadFlags.
const openDirFlags = 0

// dirH is a directory of the root; without *at system calls every operation
// goes through the root by relative path.
type dirH struct {
	root *os.Root
	dir  string
}

// stagingDir is unused here: WithStaging is ignored (see its doc).
type stagingDir struct {
	h    dirH
	path string
}

func openStaging(string) (*stagingDir, error) { return nil, nil }

func (s *stagingDir) close() error { return nil }

func (f *Folder) openDirH(dir string) (dirH, error) {
	if dir != "." {
		fi, err := f.Lstat(dir)
		if err != nil {
			return dirH{}, err
		}
		if !fi.IsDir() {
			return dirH{}, errors.New(dir + ": not a directory")
		}
	}
	return dirH{root: f.root, dir: dir}, nil
}

func (h dirH) close() error { return nil }

// syncID names the directory for sharing fsyncs: its path in the root.
func (h dirH) syncID() (any, bool) { return h.dir, true }

func (h dirH) sync() error {
	syncDirRel(h.root, h.dir)
	return nil
}

func (h dirH) create(name string) (*os.File, error) {
	return h.root.OpenFile(path.Join(h.dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
}

func (h dirH) open(name string) (*os.File, error) { return h.root.Open(path.Join(h.dir, name)) }

func (h dirH) remove(name string) error { return h.root.Remove(path.Join(h.dir, name)) }

// lstat reports whether name exists in the directory (a symlink counts).
func (h dirH) lstat(name string) error {
	_, err := h.root.Lstat(path.Join(h.dir, name))
	return err
}

// regularSince reports whether name is a regular file in the directory
// (a link is not followed) and its modification time.
func (h dirH) regularSince(name string) (bool, time.Time, error) {
	fi, err := h.root.Lstat(path.Join(h.dir, name))
	if err != nil {
		return false, time.Time{}, err
	}
	return fi.Mode().IsRegular(), fi.ModTime(), nil
}

func place(src dirH, srcName string, dst dirH, dstName string, replace bool) error {
	from, to := path.Join(src.dir, srcName), path.Join(dst.dir, dstName)
	if replace {
		return src.root.Rename(from, to)
	}
	// A hard link refuses to overwrite; os.Rename on Windows would replace.
	if err := src.root.Link(from, to); err != nil {
		return err
	}
	_ = src.root.Remove(from)
	return nil
}

func isCrossDevice(error) bool { return false }

func isTransient(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case 5, 32, 33: // ERROR_ACCESS_DENIED, ERROR_SHARING_VIOLATION, ERROR_LOCK_VIOLATION
		return true
	}
	return false
}
