package agent

import "github.com/rjeczalik/notify"

// waitEvents: a file written in place is complete at InCloseWrite, one
// published by temp and rename at InMovedTo (the host's publish, and most
// sync clients').
var waitEvents = []notify.Event{notify.InCloseWrite, notify.InMovedTo}
