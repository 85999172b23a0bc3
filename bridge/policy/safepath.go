package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/syncbridge/bridge/bridge/internal/safepath"
)

// SafePATH is value, a PATH, without the entries a program must not be
// looked up in (UnsafePathDir: relative or empty ones, those another user
// could write or swap), and why each dropped one was. An op's environment
// gets its PATH through it: what the op itself runs by name (a script's
// commands, a build's compiler, `#!/usr/bin/env python3`) follows the rule
// its own program does.
func SafePATH(value string) (kept string, dropped []string) {
	var out []string
	for _, dir := range filepath.SplitList(value) {
		why := UnsafePathDir(dir)
		if why == "" || filepath.IsAbs(dir) {
			// "." or ".." in an entry is resolved by the kernel through
			// whatever the names before it are when the op runs, not when
			// it is checked (a missing name someone makes later: the red
			// team of e587665).
			for _, part := range strings.Split(dir, string(filepath.Separator)) {
				if part == "." || part == ".." {
					why = "holds . or .., resolved only when the op runs"
				}
			}
		}
		if why != "" && why != "holds . or .., resolved only when the op runs" && filepath.IsAbs(dir) {
			// Not there yet (a tool directory made later): kept when only
			// this user or root could make it, as anything on its way —
			// and where its first missing name would be made, a sticky
			// directory is not enough (it stops others renaming, not
			// creating: the red team of 887f99e).
			if resolved, exists, w := safepath.WalkOwned(dir); !exists && w == "" && madeOnlyByUs(resolved) {
				why = ""
			}
		}
		if why != "" {
			if dir == "" {
				dir = "(empty: the working directory)"
			}
			dropped = append(dropped, fmt.Sprintf("%q (%s)", dir, why))
			continue
		}
		if !slices.Contains(out, dir) {
			out = append(out, dir)
		}
	}
	return strings.Join(out, string(filepath.ListSeparator)), dropped
}

// defaultOpPATH is where a program an op runs by name is looked for when
// the op gets no PATH at all: what the C library and env use then.
const defaultOpPATH = "/usr/bin:/bin"

// madeOnlyByUs reports whether the nearest existing directory above path
// (resolved, absolute, missing) lets no one but this user or root create
// a name in it.
func madeOnlyByUs(path string) bool {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if _, err := os.Lstat(dir); err == nil {
			return safepath.UnsafeDir(dir, true) == ""
		}
		if dir == filepath.Dir(dir) {
			return false
		}
	}
}
