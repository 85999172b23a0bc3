//go:build unix

package main

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pipeReady reports whether a read of f would not block within wait (data
// is there, or the writer has closed it), and whether bytes are there to
// read, without reading them.
func pipeReady(f *os.File, wait time.Duration) (ready, data bool) {
	return pollReady(f.Fd(), wait)
}

// pollReady is pipeReady on the descriptor fd, for a look that goes on
// beside the command (watchPipe): it holds no *os.File another goroutine
// might close.
func pollReady(fd uintptr, wait time.Duration) (ready, data bool) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(wait)
	for {
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds()))
		if err == unix.EINTR && time.Now().Before(deadline) {
			continue
		}
		if err != nil || n == 0 {
			return false, false
		}
		// A closed, empty pipe is POLLHUP alone (Linux); where a system
		// also sets POLLIN for it, the worst is a needless warning.
		return fds[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0, fds[0].Revents&unix.POLLIN != 0
	}
}
