//go:build unix

package policy

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// UnsafePathDir says why a program must not be looked up in dir, or "":
// another user could put one there or swap the directory (see
// unsafeChain), and a program the policy names by its bare name would be
// theirs.
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
	}
	return unsafeChain(dir)
}

// unsafeChain says why another user could change what path names, or "":
// every directory from the root to it, on the path as written and on the
// one its links resolve to, must be owned by root or this user and not
// writable by group or others (a sticky one, as /tmp, only protects what
// is in it, which is then checked as any other), the way ssh's StrictModes
// checks a key file's directories. Otherwise whoever may write one of them
// can rename what is below and put their own in its place, between the
// lookup and the exec too (the third red team of issue 26).
func unsafeChain(path string) string {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "not resolvable"
	}
	for _, p := range []string{path, real} {
		for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
			if why := unsafeDir(dir, dir == filepath.Dir(p)); why != "" {
				return why
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
		if p == path {
			// The last element itself, when it is a directory (a PATH
			// entry) or a link: links are not checked by their mode.
			if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
				if why := unsafeDir(p, true); why != "" {
					return why
				}
			}
		}
	}
	return ""
}

// unsafeDir checks one directory on a program's path. last: the directory
// that holds the program (or the PATH entry itself), where even the sticky
// bit does not make group or others' write safe (they may add a program).
func unsafeDir(dir string, last bool) string {
	fi, err := os.Stat(dir)
	if err != nil {
		return "not resolvable"
	}
	if !owned(fi) {
		return fmt.Sprintf("owned by another user (%s)", dir)
	}
	if m := fi.Mode(); m.Perm()&0o022 != 0 && (last || m&fs.ModeSticky == 0) {
		if strings.TrimSuffix(dir, "/") == "" {
			dir = "/"
		}
		if last {
			return "writable by group or others"
		}
		return fmt.Sprintf("under %s, which group or others may write", dir)
	}
	return ""
}

// owned reports whether root or this user owns fi.
func owned(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Uid == 0 || st.Uid == uint32(os.Geteuid())
}

// unsafeProgram says why the program file fi must not run, or "": another
// user could change it.
func unsafeProgram(fi os.FileInfo) string {
	if fi.Mode().Perm()&0o022 != 0 {
		return "writable by group or others"
	}
	if !owned(fi) {
		return "owned by another user"
	}
	return ""
}
