//go:build darwin || freebsd || netbsd

package syncsafe

import (
	"io/fs"
	"syscall"
	"time"
)

// ChangeTime is when fi's inode last changed (ctime_linux.go): a
// sync client sets modification times from the other side, and nobody sets
// this one.
func ChangeTime(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctimespec.Unix())
	}
	return fi.ModTime()
}
