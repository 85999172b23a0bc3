//go:build unix

package trust

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/syncbridge/bridge/bridge/internal/safepath"
)

// foreignHome says why dir (absolute) must not become this user's home, or
// "": a directory another user owns, or that group or others may write, or
// one reached through a link another user owns (root aside), would hold
// this user's keys where someone else can read, replace or plant files —
// and `serve` would then refuse it with a hint to chown it, adopting
// whatever was planted (the third red team's finding). A path that does
// not exist yet is fine: init creates it 0700.
func foreignHome(dir string) string {
	// Every directory on the way, through every link at any depth: whoever
	// may write one (without the sticky bit, as /tmp has) or owns one, or
	// owns a link on the way, may rename or re-point what is below it and
	// put their own in its place (the red team of 8612227: a link of ours
	// into another user's directory was followed unchecked).
	real, exists, why := safepath.WalkOwned(dir)
	if why != "" {
		return "on its path: " + why
	}
	if !exists {
		return "" // created below, and checked again once it is
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.IsDir() {
		return "" // refused as not a directory
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
