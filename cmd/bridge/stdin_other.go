//go:build !unix

package main

import (
	"os"
	"time"
)

// pipeReady cannot ask without reading here: it says "not known", and the
// caller leaves the pipe unread unless the op needs it.
func pipeReady(*os.File, time.Duration) (ready, data bool) { return false, false }

func pollReady(uintptr, time.Duration) (ready, data bool) { return false, false }
