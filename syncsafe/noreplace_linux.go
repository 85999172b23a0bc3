package syncsafe

import (
	"os"

	"golang.org/x/sys/unix"
)

// RenameNoReplace moves oldpath to newpath unless something is at newpath
// already: then it fails with an error that is fs.ErrExist, and both stay
// as they were. On Linux one renameat2(RENAME_NOREPLACE); on a filesystem
// without the flag, a link and an unlink, which refuse to overwrite alike.
func RenameNoReplace(oldpath, newpath string) error {
	err := renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	switch err {
	case nil:
		return nil
	case unix.EINVAL, unix.ENOSYS, unix.EOPNOTSUPP:
		return linkThenRemove(oldpath, newpath)
	}
	return &os.LinkError{Op: "renameat2", Old: oldpath, New: newpath, Err: err}
}

// renameat2 is unix.Renameat2 (a variable: a test makes the kernel refuse
// the flag, as an older filesystem does).
var renameat2 = unix.Renameat2
