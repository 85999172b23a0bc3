//go:build unix

package main

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pipeReady reports whether a read of f would not block within wait: data
// is there, or the writer has closed it (end of input).
func pipeReady(f *os.File, wait time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
	deadline := time.Now().Add(wait)
	for {
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds()))
		if err == unix.EINTR && time.Now().Before(deadline) {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0
	}
}
