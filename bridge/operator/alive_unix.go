//go:build unix

package operator

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// processAlive reports whether a live process (not a zombie) has this pid.
func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	if err != nil && err != unix.EPERM {
		return false
	}
	// A zombie is not alive: a daemon killed outright is one until its
	// parent reaps it, and nothing of it can be read meanwhile.
	stat, rerr := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if rerr != nil {
		return true // no /proc: trust kill
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || (stat[i+2] != 'Z' && stat[i+2] != 'X')
}
