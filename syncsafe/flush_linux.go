package syncsafe

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS flushes the folder's whole file system (syncfs(2)).
func (f *Folder) syncFS() error {
	d, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Syncfs(int(d.Fd()))
}
