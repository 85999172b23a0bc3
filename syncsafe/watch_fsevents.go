//go:build darwin && !kqueue && cgo

package syncsafe

import "github.com/rjeczalik/notify"

// watchEvents subscribes to FSEvents' own loss flags: notify drops them
// unless asked for, and each means "rescan now".
var watchEvents = []notify.Event{notify.Create, notify.Remove, notify.Write, notify.Rename,
	notify.FSEventsMustScanSubDirs, notify.FSEventsUserDropped, notify.FSEventsKernelDropped}

const fseventsLoss = notify.FSEventsMustScanSubDirs | notify.FSEventsUserDropped | notify.FSEventsKernelDropped

func eventKind(ei notify.EventInfo) (isDir, loss bool) {
	loss = ei.Event()&fseventsLoss != 0
	if ev, ok := ei.Sys().(*notify.FSEvent); ok {
		if notify.Event(ev.Flags)&fseventsLoss != 0 {
			loss = true
		}
		isDir = notify.Event(ev.Flags)&notify.FSEventsIsDir != 0
	}
	return isDir, loss
}
