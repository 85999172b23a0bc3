package syncsafe

import (
	"os"
	"syscall"
)

// RenameNoReplace moves oldpath to newpath unless something is at newpath
// already: then it fails with an error that is fs.ErrExist, and both stay
// as they were. MoveFileW without MOVEFILE_REPLACE_EXISTING never replaces,
// and needs no hard links (FAT and exFAT have none).
func RenameNoReplace(oldpath, newpath string) error {
	from, err := syscall.UTF16PtrFromString(oldpath)
	if err != nil {
		return &os.LinkError{Op: "movefile", Old: oldpath, New: newpath, Err: err}
	}
	to, err := syscall.UTF16PtrFromString(newpath)
	if err != nil {
		return &os.LinkError{Op: "movefile", Old: oldpath, New: newpath, Err: err}
	}
	if err := syscall.MoveFile(from, to); err != nil {
		return &os.LinkError{Op: "movefile", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}
