//go:build unix

package policy

import (
	"os"
	"syscall"
)

// ownerOf is the uid owning a file.
func ownerOf(fi os.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}
