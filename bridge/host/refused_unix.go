//go:build unix

package host

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// fileIno is the inode of fi, from os.Lstat or from syncsafe's LstatIn
// (which describes files with x/sys/unix's Stat_t).
func fileIno(fi fs.FileInfo) uint64 {
	switch st := fi.Sys().(type) {
	case *syscall.Stat_t:
		return uint64(st.Ino)
	case *unix.Stat_t:
		return uint64(st.Ino)
	}
	return 0
}
