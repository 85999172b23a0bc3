//go:build windows

package ledger

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// errSharingViolation is ERROR_SHARING_VIOLATION, which the syscall package
// does not name.
const errSharingViolation = syscall.Errno(32)

// acquireLock opens dir/ledger.lock with no sharing allowed: while the handle
// is open every other open of the file fails, and Windows closes the handle
// when the process dies. Because nobody else can open the file, the holder's
// pid cannot be read and the error names "another process".
func acquireLock(dir string) (*fileLock, error) {
	path := filepath.Join(dir, lockFile)
	p, err := syscall.UTF16PtrFromString(path)
	if err != nil {
		return nil, fmt.Errorf("lock ledger %s: %w", path, err)
	}
	h, err := syscall.CreateFile(p, syscall.GENERIC_READ|syscall.GENERIC_WRITE, 0, nil,
		syscall.OPEN_ALWAYS, syscall.FILE_ATTRIBUTE_NORMAL, 0)
	if err == errSharingViolation {
		return nil, lockedError("lock", path, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("lock ledger %s: %w", path, err)
	}
	f := os.NewFile(uintptr(h), path)
	writePID(f)
	return &fileLock{f: f}, nil
}
