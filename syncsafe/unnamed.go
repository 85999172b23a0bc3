package syncsafe

import (
	"os"
)

// UnnamedTemp makes a private scratch file in dir (a spool for an output
// or payload) that leaves nothing behind however the process ends: on Unix
// its name is removed at once, and on Windows, which will not remove a
// file a handle holds open without sharing its deletion (Go's os.Open does
// not share it), the file is made to be deleted when its last handle
// closes, the process's end included. pattern is os.CreateTemp's.
func UnnamedTemp(dir, pattern string) (*os.File, error) {
	return unnamedTemp(dir, pattern)
}
