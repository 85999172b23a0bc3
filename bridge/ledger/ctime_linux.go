package ledger

import (
	"os"
	"syscall"
)

// changeTime is fi's change time (ctime), in nanoseconds: any write or
// metadata change moves it, and no tool can set it back.
func changeTime(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ctim.Nano()
	}
	return fi.ModTime().UnixNano()
}
