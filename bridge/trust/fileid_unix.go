//go:build unix

package trust

import (
	"io/fs"
	"syscall"
)

// fileIdentity is the device and inode of a file: a file replaced by
// rename gets a new inode even within one tick of the modification time.
func fileIdentity(fi fs.FileInfo) [2]int64 {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]int64{}
	}
	return [2]int64{int64(st.Dev), int64(st.Ino)}
}
