package syncsafe

import (
	"os"
	"path/filepath"
)

// WriteFileAtomic writes a private file (0600), one that is never in a
// synced folder (a home's keys, records and copies), by temp, fsync, rename
// and directory fsync, so a crash leaves the old or the new content.
func WriteFileAtomic(p string, data []byte) error {
	dir := filepath.Dir(p)
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	// CreateTemp makes the file 0600.
	renamed := false
	defer func() {
		if !renamed {
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return err
	}
	renamed = true
	return SyncDir(dir)
}
