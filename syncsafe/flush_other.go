//go:build !linux && !windows

package syncsafe

import "os"

// flushOpenFlag opens a file to fsync it: reading is enough here.
const flushOpenFlag = os.O_RDONLY

func (f *Folder) syncFS() error { return errNoSyncFS }
