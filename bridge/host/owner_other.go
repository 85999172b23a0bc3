//go:build !unix

package host

import "io/fs"

// fileOwner: no uids here.
func fileOwner(fs.FileInfo) (int, bool) { return 0, false }
