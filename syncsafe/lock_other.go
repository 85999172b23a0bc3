//go:build !unix

package syncsafe

import (
	"errors"
	"os"
	"syscall"
)

// lockFile opens the file with no sharing allowed: while we hold it, any
// other open (in this or another process) fails with a sharing violation,
// and the OS closes it when the process dies.
func lockFile(path string) (*os.File, error) {
	p, err := syscall.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	h, err := syscall.CreateFile(p, syscall.GENERIC_READ|syscall.GENERIC_WRITE, 0, nil,
		syscall.OPEN_ALWAYS, syscall.FILE_ATTRIBUTE_NORMAL, 0)
	if err != nil {
		if errors.Is(err, syscall.Errno(32)) { // ERROR_SHARING_VIOLATION
			return nil, ErrLocked
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(h), path), nil
}

func unlockFile(*os.File) error { return nil }
