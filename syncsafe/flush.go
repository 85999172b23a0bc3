package syncsafe

import (
	"errors"
	"io/fs"
	"math"
	"path"
	"slices"
)

// Flush makes the files at rels, published WithoutSync, durable with their
// directory entries, and returns those it could not make durable: on Linux
// by one syncfs(2) of the folder's file system, which flushes them all at
// once (and whatever else that file system holds dirty), unless that is a
// FUSE file system, whose server may take a syncfs for nothing; elsewhere,
// and there, by an fsync of each file that is there and of each directory
// that holds one. A name that is gone is not returned: nothing of it is
// left to flush. One that holds something else than a regular file, or
// that could not be flushed, is. For a batch, now and then, not per file:
// what vouches for published files (a cache of their sizes and times) must
// not vouch for what a power cut could take.
func (f *Folder) Flush(rels []string) (failed []string) {
	if len(rels) == 0 {
		return nil
	}
	if f.syncFS() == nil {
		return nil
	}
	return f.flushEach(rels)
}

// flushEachMax bounds the files one Flush takes file by file: it runs on
// the daemon's control loop, and a flush per file is dear where a drive's
// cache is flushed whole (macOS, Windows). The rest are returned as not
// flushed, for the next Flush.
const flushEachMax = 4096

// flushEach is Flush file by file.
func (f *Folder) flushEach(rels []string) (failed []string) {
	all := rels
	if len(rels) > flushEachMax {
		rels, failed = rels[:flushEachMax], slices.Clone(rels[flushEachMax:])
	}
	byDir := map[string][]string{}
	for _, rel := range rels {
		file, _, err := f.openRegularFlag(rel, math.MaxInt64, flushOpenFlag)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = syncData(file)
			file.Close()
		}
		if err != nil {
			failed = append(failed, rel)
			continue
		}
		byDir[path.Dir(rel)] = append(byDir[path.Dir(rel)], rel)
	}
	for dir, in := range byDir {
		h, err := f.openDirH(dir)
		if err == nil {
			err = f.syncDir(h)
			h.close()
		}
		if err != nil {
			failed = append(failed, in...)
		}
	}
	if err := f.flushDrive(); err != nil {
		return all
	}
	return failed
}

// errNoSyncFS: no syncfs that can be trusted here; Flush goes file by file.
var errNoSyncFS = errors.New("no syncfs here")
