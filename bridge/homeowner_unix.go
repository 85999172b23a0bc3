//go:build unix

package bridge

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// foreignHome says why dir (absolute) must not become this user's home, or
// "": a directory another user owns, or that group or others may write, or
// one reached through a link another user owns (root aside), would hold
// this user's keys where someone else can read, replace or plant files —
// and `serve` would then refuse it with a hint to chown it, adopting
// whatever was planted (the third red team's finding). A path that does
// not exist yet is fine: init creates it 0700.
func foreignHome(dir string) string {
	p := string(filepath.Separator)
	for _, part := range strings.Split(strings.Trim(dir, string(filepath.Separator)), string(filepath.Separator)) {
		parent := p
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if err != nil {
			break // not there yet
		}
		if fi.Mode()&fs.ModeSymlink != 0 && !ownedBy(fi, true) {
			return fmt.Sprintf("%s is a link another user owns", p)
		}
		// Whoever may write a directory on the way (without the sticky
		// bit, as /tmp has) may rename what is below it and put their
		// own in its place.
		if pi, err := os.Stat(parent); err == nil && pi.Mode().Perm()&0o022 != 0 && pi.Mode()&fs.ModeSticky == 0 {
			return fmt.Sprintf("%s, on its path, lets group or others rename what is in it (mode %04o, no sticky bit)", parent, pi.Mode().Perm())
		} else if err == nil && !ownedBy(pi, true) {
			return fmt.Sprintf("%s, on its path, is another user's: they may rename what is in it", parent)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return "" // created below, or refused as not a directory
	}
	if !ownedBy(fi, false) {
		return "another user owns it"
	}
	if m := fi.Mode().Perm(); m&0o022 != 0 {
		return fmt.Sprintf("group or others may write it (mode %04o): what is in it may not be yours", m)
	}
	return ""
}

// ownedBy reports whether this user (or root, if root is allowed) owns fi.
func ownedBy(fi fs.FileInfo, root bool) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Uid == uint32(os.Geteuid()) || (root && st.Uid == 0)
}
