package syncsafe

import (
	"os"

	"golang.org/x/sys/unix"
)

// place moves src/srcName to dst/dstName. Without replace it uses
// renameat2(RENAME_NOREPLACE), which fails with EEXIST if anything (even a
// dangling symlink) is at the new name; filesystems without the flag get
// link+unlink, which refuses to overwrite in the same way.
func place(src dirH, srcName string, dst dirH, dstName string, replace bool) error {
	if replace {
		return renameReplace(src, srcName, dst, dstName)
	}
	err := unix.Renameat2(src.fd(), srcName, dst.fd(), dstName, unix.RENAME_NOREPLACE)
	switch err {
	case nil:
		return nil
	case unix.EINVAL, unix.ENOSYS, unix.EOPNOTSUPP:
		return linkUnlink(src, srcName, dst, dstName)
	}
	return &os.LinkError{Op: "renameat2", Old: srcName, New: dstName, Err: err}
}
