package ledger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/syncbridge/bridge/syncsafe"
)

// fileLock is an exclusive lock on the sidecar file dir/ledger.lock. The
// lock is on a separate file, not on ledger.db, because a shrink or a repair
// replaces the database file's inode. The operating system drops the lock
// when the holder dies, so a crash never leaves a stale lock behind.
type fileLock struct{ lk *syncsafe.Lockfile }

func (l *fileLock) release() error { return l.lk.Unlock() }

// acquireLock takes the lock without waiting; a held lock is ErrLocked with
// the holder's pid.
func acquireLock(dir string) (*fileLock, error) {
	path := filepath.Join(dir, lockFile)
	lk, err := syncsafe.Lock(path)
	if errors.Is(err, syncsafe.ErrLocked) {
		return nil, lockedError("lock", path, holderPID(path))
	}
	if err != nil {
		return nil, fmt.Errorf("lock ledger: %w", err)
	}
	return &fileLock{lk: lk}, nil
}

// holderPID returns the pid the holder wrote into the lock file, or 0.
func holderPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

func lockedError(op, path string, pid int) error {
	who := "another process"
	if pid > 0 {
		who = fmt.Sprintf("pid %d", pid)
	}
	if pid == os.Getpid() {
		who += " (this process)"
	}
	return &Error{
		Op:   op,
		Path: path,
		PID:  pid,
		Err:  fmt.Errorf("%w by %s", ErrLocked, who),
		Hint: "only one bridge process may use a state directory: stop the other one (bridge serve) or use another --home",
	}
}
