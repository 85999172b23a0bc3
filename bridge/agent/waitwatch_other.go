//go:build !linux

package agent

import "github.com/rjeczalik/notify"

// waitEvents: the portable set; a poke only makes the wait look again.
var waitEvents = []notify.Event{notify.Create, notify.Write, notify.Rename}
