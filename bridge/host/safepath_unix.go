//go:build unix

package host

import (
	"os"
	"path/filepath"
	"syscall"
)

// unsafePathDir says why dir must not be on a service's PATH, or "".
func unsafePathDir(dir string) string {
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
