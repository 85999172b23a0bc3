package syncsafe

import (
	"os"

	"golang.org/x/sys/unix"
)

// flushOpenFlag opens a file to fsync it: reading is enough here.
const flushOpenFlag = os.O_RDONLY

func (f *Folder) syncFS() error { return errNoSyncFS }

// syncData hands a file's bytes to the drive (fsync(2)); Go's Sync is
// F_FULLFSYNC here, a flush of the drive's whole cache, which flushDrive
// does once for all of them.
func syncData(file *os.File) error { return unix.Fsync(int(file.Fd())) }

// flushDrive flushes the drive's cache once (F_FULLFSYNC on the folder).
func (f *Folder) flushDrive() error {
	d, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer d.Close()
	_, err = unix.FcntlInt(d.Fd(), unix.F_FULLFSYNC, 0)
	return err
}
