//go:build !unix

package policy

import (
	"os"
	"path/filepath"
)

// UnsafePathDir says why a program must not be looked up in dir, or "":
// another user could put one there (a directory writable by group or
// others, or owned by someone other than root and this user), and a
// program the policy names by its bare name would be theirs.
func UnsafePathDir(dir string) string {
	if !filepath.IsAbs(dir) {
		return "not absolute"
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "missing"
	}
	return ""
}

// unsafeProgram says why the program file fi must not run, or "".
func unsafeProgram(os.FileInfo) string { return "" }

// unsafeChain: ownership and modes are Unix checks.
func unsafeChain(string) string { return "" }

// unsafeInterpreter: ownership and modes are Unix checks.
func unsafeInterpreter(string, func() string, int) string { return "" }
