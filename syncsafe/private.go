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

// CreateFileAtomic is WriteFileAtomic for a file that must never be
// replaced once it exists (a secret other files were derived from): the
// complete temp is hard-linked to p, which fails with fs.ErrExist if p is
// there, so of two racing creators exactly one wins and the other reads the
// winner's content.
func CreateFileAtomic(p string, data []byte) error {
	dir := filepath.Dir(p)
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	// The temp goes either way: after the link p holds the data.
	defer os.Remove(tmp.Name())
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
	if err := os.Link(tmp.Name(), p); err != nil {
		return err
	}
	return SyncDir(dir)
}
