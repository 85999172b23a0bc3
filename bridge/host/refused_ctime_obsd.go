//go:build openbsd || dragonfly

package host

import (
	"io/fs"
	"syscall"
	"time"
)

// fileCtime is when fi's inode last changed (refused_ctime_linux.go).
func fileCtime(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Unix())
	}
	return fi.ModTime()
}
