//go:build unix

package policy

import (
	"os"
	"path/filepath"
	"syscall"
)

// UnsafePathDir says why a program must not be looked up in dir, or "":
// another user could put one there (a directory writable by group or
// others, or owned by someone other than root and this user), and a
// program the policy names by its bare name would be theirs.
func UnsafePathDir(dir string) string {
	if !filepath.IsAbs(dir) {
		return "not absolute"
	}
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return "missing"
	case !fi.IsDir():
		return "not a directory"
	case fi.Mode().Perm()&0o022 != 0:
		return "writable by group or others"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && st.Uid != uint32(os.Geteuid()) {
		return "owned by another user"
	}
	return ""
}

// unsafeProgram says why the program file fi must not run, or "": another
// user could change it.
func unsafeProgram(fi os.FileInfo) string {
	if fi.Mode().Perm()&0o022 != 0 {
		return "writable by group or others"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && st.Uid != uint32(os.Geteuid()) {
		return "owned by another user"
	}
	return ""
}
