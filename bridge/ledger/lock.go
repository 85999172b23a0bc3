package ledger

import (
	"fmt"
	"os"
	"strconv"
)

// fileLock is an exclusive lock on the sidecar file dir/ledger.lock. The
// lock is on a separate file, not on ledger.db, because a shrink or a repair
// replaces the database file's inode. The operating system drops the lock
// when the holder dies, so a crash never leaves a stale lock behind.
type fileLock struct{ f *os.File }

func (l *fileLock) release() error {
	// Closing the descriptor releases the lock; the pid stays in the file as
	// information only, a reader never trusts it.
	return l.f.Close()
}

// writePID records the holder for the "locked by pid N" message.
func writePID(f *os.File) {
	// Best effort: the lock is already held, the pid only helps humans.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
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
		Hint: "only one bridge process may use a state directory: stop the other one (bridge serve) or use another --state dir",
	}
}
