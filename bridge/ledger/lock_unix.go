//go:build unix

package ledger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// acquireLock takes an exclusive, non-blocking flock(2) on dir/ledger.lock.
// flock locks belong to the open file description, so a second Open in the
// same process conflicts just like one from another process.
func acquireLock(dir string) (*fileLock, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock ledger: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock ledger %s: %w", path, err)
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			lerr = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB)
			if lerr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		lerr = err
	}
	if lerr != nil {
		pid := readPID(f)
		_ = f.Close()
		if errors.Is(lerr, unix.EWOULDBLOCK) {
			return nil, lockedError("lock", path, pid)
		}
		return nil, fmt.Errorf("lock ledger %s: %w", path, lerr)
	}
	writePID(f)
	return &fileLock{f: f}, nil
}

// readPID returns the pid written by the holder, or 0 if unknown.
func readPID(f *os.File) int {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
