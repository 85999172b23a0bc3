package syncsafe

import (
	"errors"
	"io/fs"
	"math"
	"path"
)

// Flush makes the files at rels, published WithoutSync, durable with their
// directory entries: on Linux by one syncfs(2) of the folder's file system,
// which flushes them all at once (and whatever else that file system holds
// dirty); elsewhere by an fsync of each file that is there and of each
// directory that holds one. A name that is gone is skipped: nothing of it
// is left to flush. For a batch, now and then, not per file: what vouches
// for published files (a cache of their sizes and times) must not outlive
// a power cut that takes them.
func (f *Folder) Flush(rels []string) error {
	if len(rels) == 0 {
		return nil
	}
	if err := f.syncFS(); err == nil {
		return nil
	} else if !errors.Is(err, errNoSyncFS) {
		return err
	}
	return f.flushEach(rels)
}

// flushEach is Flush file by file, for a platform without syncfs.
func (f *Folder) flushEach(rels []string) error {
	dirs := map[string]bool{}
	for _, rel := range rels {
		file, _, err := f.openRegular(rel, math.MaxInt64)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		err = file.Sync()
		file.Close()
		if err != nil {
			return err
		}
		dirs[path.Dir(rel)] = true
	}
	for dir := range dirs {
		h, err := f.openDirH(dir)
		if err != nil {
			return err
		}
		err = f.syncDir(h)
		h.close()
		if err != nil {
			return err
		}
	}
	return nil
}

// errNoSyncFS: the platform has no syncfs(2); Flush goes file by file.
var errNoSyncFS = errors.New("no syncfs on this platform")
