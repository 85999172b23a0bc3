package syncsafe

import (
	"io/fs"
	"os"
	"path"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS resolves a whole path
// below the folder's root in one system call and refuses a symlink in any
// component: what os.Root and checkParents do one component at a time, at
// O(depth²) opens per call. The bridge's paths are four deep and a round
// trip makes dozens of such calls, so this is the common path on Linux
// (5.6 and later); anything unexpected falls back to the portable one, which
// then gives the same answer or the precise error.

// noOpenat2 is set once openat2 turns out to be missing or forbidden
// (ENOSYS on old kernels, EPERM under some seccomp filters).
var noOpenat2 atomic.Bool

const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// resolve opens rel below the root with flags. ok is false when the caller
// must take the portable path instead; a missing file is an answer
// (fs.ErrNotExist), every other failure is not.
func (f *Folder) resolve(rel string, flags int) (file *os.File, ok bool, err error) {
	return openBeneath(f.rootDir, rel, flags)
}

// openBeneath is resolve for any holder of a root directory handle.
func openBeneath(root *os.File, rel string, flags int) (file *os.File, ok bool, err error) {
	if root == nil || noOpenat2.Load() {
		return nil, false, nil
	}
	fd, err := unix.Openat2(int(root.Fd()), rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolveFlags})
	switch err {
	case nil:
		return os.NewFile(uintptr(fd), path.Base(rel)), true, nil
	case unix.ENOENT:
		return nil, true, &fs.PathError{Op: "openat2", Path: rel, Err: err}
	case unix.ENOSYS, unix.EPERM:
		noOpenat2.Store(true)
		return nil, false, nil
	}
	// Not ok: the portable path answers, precisely; the error is what
	// openat2 said, for a caller that takes no portable path.
	return nil, false, &fs.PathError{Op: "openat2", Path: rel, Err: err}
}

// openDirFast opens the directory rel below root for listing its names and
// types. Unlike a directory opened through an os.Root, whose ReadDir lstats
// every entry, its entries take their type from getdents (and fstatat
// relative to it where the file system does not say): a walk of n files
// costs no n lstats. Their Info must not be used (it would lstat by a name
// relative to the process).
func openDirFast(root *os.File, rel string) (*os.File, bool, error) {
	d, ok, err := openBeneath(root, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if ok || root == nil || noOpenat2.Load() {
		return d, ok, err
	}
	// openat2 answered, and not with a directory (a FIFO, a file or a link
	// at its name, or one on the way): that is the answer.
	return nil, true, err
}

// fastLstat is Lstat by openat2: an O_PATH descriptor of rel itself (a final
// symlink is not followed) and fstat.
func (f *Folder) fastLstat(rel string) (fs.FileInfo, bool, error) {
	file, ok, err := f.resolve(rel, unix.O_PATH|unix.O_NOFOLLOW)
	if !ok || err != nil {
		return nil, ok, err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return nil, false, nil
	}
	return fi, true, nil
}

// fastOpen opens rel with flags (O_NOFOLLOW is added) by openat2.
func (f *Folder) fastOpen(rel string, flags int) (*os.File, bool, error) {
	return f.resolve(rel, flags|unix.O_NOFOLLOW)
}

// rootFromDir makes an os.Root of the open directory d by its descriptor
// (/proc/self/fd), so that nothing is looked up by name again. ok is false
// only where /proc is not mounted: any other failure (the directory's mode
// changed so that opening it again is refused, say) is the answer.
func rootFromDir(d *os.File) (r *os.Root, ok bool, err error) {
	r, err = os.OpenRoot("/proc/self/fd/" + strconv.Itoa(int(d.Fd())))
	if err != nil && !procFDs() {
		return nil, false, nil
	}
	return r, true, err
}

// procFDs reports whether /proc/self/fd is there.
func procFDs() bool {
	_, err := os.Stat("/proc/self/fd")
	return err == nil
}
