package syncsafe

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// RenameNoReplace moves oldpath to newpath unless something is at newpath
// already: then it fails with an error that is fs.ErrExist, and both stay
// as they were. MoveFileW without MOVEFILE_REPLACE_EXISTING never replaces,
// and needs no hard links (FAT and exFAT have none).
func RenameNoReplace(oldpath, newpath string) error {
	from, err := syscall.UTF16PtrFromString(longPath(oldpath))
	if err != nil {
		return &os.LinkError{Op: "movefile", Old: oldpath, New: newpath, Err: err}
	}
	to, err := syscall.UTF16PtrFromString(longPath(newpath))
	if err != nil {
		return &os.LinkError{Op: "movefile", Old: oldpath, New: newpath, Err: err}
	}
	if err := syscall.MoveFile(from, to); err != nil {
		return &os.LinkError{Op: "movefile", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}

// longPath gives an absolute path the \\?\ prefix that lifts Windows'
// 260-character limit, as package os does for its own calls (a home deep
// in a profile directory can pass it); a UNC path becomes \\?\UNC\...
func longPath(p string) string {
	if len(p) < 248 || strings.HasPrefix(p, `\\?\`) {
		return p
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	if strings.HasPrefix(abs, `\\`) {
		return `\\?\UNC\` + abs[2:]
	}
	return `\\?\` + abs
}
