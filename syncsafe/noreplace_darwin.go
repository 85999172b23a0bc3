package syncsafe

import (
	"os"

	"golang.org/x/sys/unix"
)

// RenameNoReplace moves oldpath to newpath unless something is at newpath
// already: then it fails with an error that is fs.ErrExist, and both stay
// as they were. One renamex_np(RENAME_EXCL); a filesystem without it gets
// a link and an unlink.
func RenameNoReplace(oldpath, newpath string) error {
	err := unix.RenamexNp(oldpath, newpath, unix.RENAME_EXCL)
	switch err {
	case nil:
		return nil
	case unix.ENOTSUP, unix.EINVAL:
		return linkThenRemove(oldpath, newpath)
	}
	return &os.LinkError{Op: "renamex_np", Old: oldpath, New: newpath, Err: err}
}
