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
	real, why := walkChain(dir, 0)
	if why != "" {
		return why
	}
	fi, err := os.Stat(real)
	switch {
	case err != nil:
		return "missing"
	case !fi.IsDir():
		return "not a directory"
	}
	return unsafeDir(real, true) // its own directory: what is put in it is run
}

// unsafeChain says why another user could change what path names, or "".
// Everything the kernel traverses to reach it counts, as ssh's StrictModes
// checks a key file's directories, and every link met on the way, at any
// depth: each directory a name is looked up in must be owned by root or
// this user and not writable by group or others (a sticky one, as /tmp,
// only above the program's own directory: it protects what is in it), and
// each link must be owned by root or this user. Otherwise whoever may
// write one of them can rename or re-point what is below and put their own
// in its place, between the lookup and the exec too (the red teams of
// issue 26).
func unsafeChain(path string) string {
	_, why := walkChain(path, 0)
	return why
}

// walkChain resolves path (absolute) component by component as the kernel
// does, checking as unsafeChain says, and returns the resolved path.
func walkChain(path string, depth int) (string, string) {
	if depth > 40 {
		return "", "too many links"
	}
	parts := strings.Split(path, string(filepath.Separator))
	var names []string
	for _, p := range parts {
		if p != "" && p != "." {
			names = append(names, p)
		}
	}
	cur := string(filepath.Separator)
	for i, name := range names {
		if name == ".." {
			cur = filepath.Dir(cur) // cur is resolved: its parent is physical
			continue
		}
		if why := unsafeDir(cur, i == len(names)-1); why != "" {
			return "", why
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", "not resolvable"
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if !owned(fi) {
			return "", fmt.Sprintf("reached through a link another user owns (%s)", next)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", "not resolvable"
		}
		if !filepath.IsAbs(target) {
			target = cur + string(filepath.Separator) + target
		}
		rest := strings.Join(names[i+1:], string(filepath.Separator))
		return walkChain(target+string(filepath.Separator)+rest, depth+1)
	}
	return cur, ""
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
