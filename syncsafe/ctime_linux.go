package syncsafe

import (
	"io/fs"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ChangeTime is when fi's inode last changed: any write, and any change of
// its times, sets it to now, and nobody can set it otherwise. A file
// rewritten in place at the same size with its old modification time put
// back still gets a new one.
func ChangeTime(fi fs.FileInfo) time.Time {
	switch st := fi.Sys().(type) {
	case *syscall.Stat_t:
		return time.Unix(st.Ctim.Unix())
	case *unix.Stat_t:
		return time.Unix(st.Ctim.Unix())
	}
	return fi.ModTime()
}
