//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly

package host

import (
	"io/fs"
	"time"
)

// fileCtime: where no change time is known (Windows, Plan 9), the
// modification time stands in for it.
func fileCtime(fi fs.FileInfo) time.Time { return fi.ModTime() }
