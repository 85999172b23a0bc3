//go:build !linux && !(darwin && !kqueue && cgo)

package syncsafe

import "github.com/rjeczalik/notify"

// watchEvents: the portable set. Whether a path is a directory is found out
// by Lstat when the batch is built.
var watchEvents = []notify.Event{notify.Create, notify.Remove, notify.Write, notify.Rename}

func eventKind(notify.EventInfo) (isDir, loss bool) { return false, false }
