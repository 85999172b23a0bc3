package syncsafe

import (
	"io"
	"os"
	"path/filepath"
)

// WriteFileAtomic writes a private file (0600), one that is never in a
// synced folder (a home's keys, records and copies), by temp, fsync, rename
// and directory fsync, so a crash leaves the old or the new content.
func WriteFileAtomic(p string, data []byte) error {
	return placeTemp(p, writeAll(data), os.Rename, true, true)
}

// WriteFileUnsynced is WriteFileAtomic without its two fsyncs, for a
// private copy that something durable already holds (the host's kept
// manifest, carried in the ledger's record while anything reads it). While
// the machine runs, a reader finds the old content or the new one, never a
// mix; a power cut may leave the old content, the new, none, or a torn file
// under the name, and a reader must tell them apart (by a hash it knows).
func WriteFileUnsynced(p string, data []byte) error {
	return placeTemp(p, writeAll(data), os.Rename, true, false)
}

// WriteFileAtomicFrom is WriteFileAtomic for content that write produces
// as a stream (a sealed output): it is never held in memory whole. An
// error from write leaves no file.
func WriteFileAtomicFrom(p string, write func(w io.Writer) error) error {
	return placeTemp(p, write, os.Rename, true, true)
}

func writeAll(data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
}

// CreateFileAtomic is WriteFileAtomic for a file that must never be
// replaced once it exists (a secret other files were derived from): the
// complete temp is hard-linked to p, which fails with fs.ErrExist if p is
// there, so of two racing creators exactly one wins and the other reads the
// winner's content.
func CreateFileAtomic(p string, data []byte) error {
	return placeTemp(p, writeAll(data), os.Link, false, true)
}

// placeTemp writes what write produces to a complete temp (0600, as CreateTemp
// makes it) beside p, puts it at p with place, and removes the temp if it is
// still there (moves: place takes its name, as a rename does). durable
// fsyncs the temp before it is placed and the directory after.
func placeTemp(p string, write func(io.Writer) error, place func(oldpath, newpath string) error, moves, durable bool) error {
	dir := filepath.Dir(p)
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	placed := false
	defer func() {
		if !placed {
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if durable {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := place(tmp.Name(), p); err != nil {
		return err
	}
	placed = moves // a rename took the temp's name; a link leaves it, to be removed
	if !durable {
		return nil
	}
	return SyncDir(dir)
}
