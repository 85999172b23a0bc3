package syncsafe

import (
	"os"

	"golang.org/x/sys/unix"
)

// flushOpenFlag opens a file to fsync it: reading is enough here.
const flushOpenFlag = os.O_RDONLY

func syncData(file *os.File) error { return file.Sync() }

func (f *Folder) flushDrive() error { return nil }

// syncFS flushes the folder's whole file system (syncfs(2)), unless it is
// a FUSE one (rclone's mount): the kernel passes a syncfs to a FUSE server
// only if it asked for them, and returns success either way.
func (f *Folder) syncFS() error {
	d, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer d.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(d.Fd()), &st); err != nil {
		return err
	}
	if st.Type == unix.FUSE_SUPER_MAGIC {
		return errNoSyncFS
	}
	return unix.Syncfs(int(d.Fd()))
}
