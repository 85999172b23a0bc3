package policy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
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
		if why != "" && filepath.IsAbs(dir) {
			// Not there yet (a tool directory made later): kept when only
			// this user or root could make it, as anything on its way.
			if _, exists, w := WalkOwned(dir); !exists && w == "" {
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
