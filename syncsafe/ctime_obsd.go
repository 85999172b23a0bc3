//go:build openbsd || dragonfly

package syncsafe

import (
	"io/fs"
	"syscall"
	"time"
)

// ChangeTime is when fi's inode last changed (ctime_linux.go).
func ChangeTime(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Unix())
	}
	return fi.ModTime()
}
