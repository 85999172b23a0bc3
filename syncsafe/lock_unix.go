//go:build unix

package syncsafe

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// lockFile uses flock(2): the lock belongs to the open file description, so
// a second open in the same process conflicts too, and it dies with the
// process.
func lockFile(path string) (*os.File, error) {
	// Opened as it is first, and with O_CREATE only when missing: a lock
	// taken often (the agent's request records, at every ack) then asks
	// for no creation (the cost budget counts opens that may create).
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	}
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, ErrLocked
		}
		return nil, os.NewSyscallError("flock", err)
	}
	return f, nil
}

func unlockFile(f *os.File) error {
	return os.NewSyscallError("flock", unix.Flock(int(f.Fd()), unix.LOCK_UN))
}
