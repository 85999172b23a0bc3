//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly

package syncsafe

import (
	"io/fs"
	"time"
)

// ChangeTime: where no change time is known (Windows, Plan 9), the
// modification time stands in for it.
func ChangeTime(fi fs.FileInfo) time.Time { return fi.ModTime() }
