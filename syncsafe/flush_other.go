//go:build !linux && !windows && !darwin

package syncsafe

import "os"

// flushOpenFlag opens a file to fsync it: reading is enough here.
const flushOpenFlag = os.O_RDONLY

func (f *Folder) syncFS() error { return errNoSyncFS }

func syncData(file *os.File) error { return file.Sync() }

func (f *Folder) flushDrive() error { return nil }
