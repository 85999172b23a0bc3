//go:build unix

package syncsafe

import (
	"os"
	"strconv"
	"syscall"

	"github.com/rjeczalik/notify"
	"golang.org/x/sys/unix"
)

// CloseOnExec marks every descriptor of this process from 3 up
// close-on-exec, whatever opened it, so that no program this process starts
// inherits one by accident. Go opens its own descriptors close-on-exec;
// libraries that make system calls of their own may not (notify creates its
// epoll instance and its wake-up pipe without the flag, and one byte written
// to that pipe is notify's order to stop watching).
func CloseOnExec() {
	if closeRangeCloexec() == nil {
		return
	}
	// Before Linux 5.11, and on other systems: /dev/fd lists this process's
	// descriptors (on Linux a link to /proc/self/fd).
	ents, err := os.ReadDir("/dev/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// watch is notify.Watch with the descriptors it may create (its first
// watch, or the first after all were stopped) made close-on-exec before any
// fork can copy them: Go's fork lock is held for writing meanwhile, as the
// os and syscall packages expect of code that creates descriptors.
func watch(path string, c chan<- notify.EventInfo, events ...notify.Event) error {
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	err := notify.Watch(path, c, events...)
	CloseOnExec()
	return err
}
