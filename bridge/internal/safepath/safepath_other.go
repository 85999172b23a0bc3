//go:build !unix

package safepath

import (
	"io/fs"
	"os"
)

// WalkOwned: ownership and modes are Unix checks; the path is taken as it is.
func WalkOwned(path string) (resolved string, exists bool, why string) {
	_, err := os.Stat(path)
	return path, err == nil, ""
}

// Chain: ownership and modes are Unix checks; the path is taken as it is.
func Chain(path string, depth int) (string, string) { return path, "" }

// UnsafeDir: ownership and modes are Unix checks.
func UnsafeDir(string, bool) string { return "" }

// RootsOwn: ownership is a Unix check.
func RootsOwn(string) bool { return false }

// Owned: ownership is a Unix check.
func Owned(fs.FileInfo) bool { return true }
