//go:build !unix

package host

import "io/fs"

// Without an inode, size and modification time tell versions apart.
func fileIno(fs.FileInfo) uint64 { return 0 }
