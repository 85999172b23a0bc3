package syncsafe

import (
	"github.com/rjeczalik/notify"
	"golang.org/x/sys/unix"
)

// watchEvents: InCloseWrite (a writer finished) and InMovedTo (a client's
// temp renamed into place) are the ones that say "complete now"; Create
// reports new directories (to walk them), Remove and Rename keep the root's
// own fate visible.
var watchEvents = []notify.Event{notify.InCloseWrite, notify.InMovedTo, notify.Create, notify.Remove, notify.Rename}

// eventKind reads the directory bit inotify already gave us (no I/O).
// inotify's queue overflow never reaches us (notify swallows it), so loss is
// only ever inferred from the channel.
func eventKind(ei notify.EventInfo) (isDir, loss bool) {
	if ev, ok := ei.Sys().(*unix.InotifyEvent); ok {
		return ev.Mask&unix.IN_ISDIR != 0, false
	}
	return false, false
}
