package syncsafe

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrLocked: another holder (another process, or another handle in this
// one) has the lock; the error text names the pid found in the lock file.
var ErrLocked = errors.New("locked by another process")

// Lockfile is an exclusive lock on a sidecar file. It lives outside the
// synced folder (locks do not sync). The kernel releases it when the process
// dies, so a stale file never blocks; the pid inside is diagnostics only.
type Lockfile struct {
	f    *os.File
	path string
}

// Lock takes the exclusive lock on path without waiting, creating the file
// (mode 0600) if needed, and writes our pid into it.
func Lock(path string) (*Lockfile, error) {
	f, err := lockFile(path)
	if errors.Is(err, ErrLocked) {
		return nil, fmt.Errorf("lock %s: %w (pid %s)", path, ErrLocked, holderPID(path))
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// Diagnostics only; a failure here does not weaken the lock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lockfile{f: f, path: path}, nil
}

// Unlock releases the lock. The file stays: removing it would let a waiter
// lock the unlinked inode while a newcomer locks a fresh file.
func (l *Lockfile) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := unlockFile(l.f)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	if err != nil {
		return fmt.Errorf("unlock %s: %w", l.path, err)
	}
	return nil
}

// holderPID reads the pid the holder wrote, for the error message.
func holderPID(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	s := strings.TrimSpace(string(b))
	if _, err := strconv.Atoi(s); err != nil {
		return "unknown"
	}
	return s
}
