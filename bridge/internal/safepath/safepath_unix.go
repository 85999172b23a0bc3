//go:build unix

package safepath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// WalkOwned resolves path (absolute) as the kernel would, through every
// link at any depth, checking each directory it traverses and each link as
// Chain does (a sticky directory on the way is fine) — for a
// directory this user is to keep private files in, such as a home. It stops
// at the first name that does not exist yet: exists is then false, and
// resolved is where it would be made. why is "" when nobody else could
// rename, swap or re-point anything on the way.
func WalkOwned(path string) (resolved string, exists bool, why string) {
	return walkChainIn(path, 0, true)
}

// Chain resolves path (absolute) component by component as the kernel
// does, checking each directory it traverses and each link met (see the package
// doc; depth counts the links followed so far), and returns the resolved
// path, or why not: another user could change what it names.
func Chain(path string, depth int) (string, string) {
	real, _, why := walkChainIn(path, depth, false)
	return real, why
}

// walkChainIn is Chain; dirs: every component is a directory on the
// way (none holds a program: a sticky one is fine), and a missing name ends
// the walk without a complaint.
func walkChainIn(path string, depth int, dirs bool) (string, bool, string) {
	fail := func(why string) (string, bool, string) { return "", false, why }
	if depth > 40 {
		return fail("too many links")
	}
	parts := strings.Split(path, string(filepath.Separator))
	var names []string
	for _, p := range parts {
		if p != "" && p != "." {
			names = append(names, p)
		}
	}
	cur := string(filepath.Separator)
	// The device of cur: where the next step's differs, it crosses a
	// mount point, checked once (foreignMount).
	curDev, ok := devOf(cur)
	if !ok {
		return fail("not resolvable")
	}
	for i, name := range names {
		if name == ".." {
			// cur is resolved, so its parent is physical; but what cur is
			// must not change under us either: leaving it, the kernel
			// goes through it, and whoever may rename it (its own
			// owner, another user in a sticky directory) could make it
			// a link elsewhere (red team of 5a0daa3: a directory of
			// someone else's in /tmp, then `..` twice).
			// (Its parent was checked on the way down: a sticky one
			// lets only cur's owner, checked here, rename it.)
			if why := UnsafeDir(cur, false); why != "" {
				return fail(why)
			}
			cur = filepath.Dir(cur)
			if curDev, ok = devOf(cur); !ok {
				return fail("not resolvable")
			}
			continue
		}
		if why := UnsafeDir(cur, !dirs && i == len(names)-1); why != "" {
			return fail(why)
		}
		next := filepath.Join(cur, name)
		if next == "/proc" || next == "/dev/fd" {
			// Its links (/proc/self/cwd, /dev/fd/N) name what the
			// process that follows them has: the daemon would check one
			// file and the op, in its own directory, run another.
			return fail("under /proc, whose links name each process's own files")
		}
		fi, err := os.Lstat(next)
		if dirs && errors.Is(err, fs.ErrNotExist) {
			// A "." or ".." after a name that does not exist yet is
			// resolved through whatever that name becomes (someone
			// else's link, made later), not as the path reads: refused
			// (the red team of 7a39ede: an interpreter ran from there).
			for _, rest := range names[i:] {
				if rest == ".." || rest == "." {
					return fail("holds . or .. after a name that does not exist yet")
				}
			}
			return filepath.Join(append([]string{cur}, names[i:]...)...), false, ""
		}
		if err != nil {
			return fail("not resolvable")
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && uint64(st.Dev) != curDev {
				if why := foreignMount(next); why != "" {
					return fail(why)
				}
				curDev = uint64(st.Dev)
			}
			cur = next
			continue
		}
		if !Owned(fi) {
			return fail(fmt.Sprintf("reached through a link another user owns (%s)", next))
		}
		target, err := os.Readlink(next)
		if err != nil {
			return fail("not resolvable")
		}
		if !filepath.IsAbs(target) {
			target = cur + string(filepath.Separator) + target
		}
		rest := strings.Join(names[i+1:], string(filepath.Separator))
		return walkChainIn(target+string(filepath.Separator)+rest, depth+1, dirs)
	}
	return cur, true, ""
}

// UnsafeDir checks one directory on a program's path. last: the directory
// that holds the program (or the PATH entry itself), where even the sticky
// bit does not make group or others' write safe (they may add a program).
func UnsafeDir(dir string, last bool) string {
	fi, err := os.Stat(dir)
	if err != nil {
		return "not resolvable"
	}
	if !Owned(fi) {
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

// RootsOwn reports whether root owns path and nobody else may write it.
func RootsOwn(path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0 && fi.Mode().Perm()&0o022 == 0
}

// devOf is the device of path, followed.
func devOf(path string) (uint64, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, false
	}
	return uint64(st.Dev), true
}

// Owned reports whether root or this user owns fi.
func Owned(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Uid == 0 || st.Uid == uint32(os.Geteuid())
}
