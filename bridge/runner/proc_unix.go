//go:build unix

package runner

import (
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ladder is the order of signals sent to the process group on timeout or
// cancel, Grace apart: SIGINT (what Ctrl-C sends, so tools clean up as they
// would at a terminal), SIGTERM, then SIGKILL.
var ladder = []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL}

// signalGroup signals the leader's whole process group. ESRCH (nobody left)
// is not an error worth reporting.
func signalGroup(l *leader, sig syscall.Signal) error {
	err := unix.Kill(-l.pid, sig)
	if err == unix.ESRCH {
		return nil
	}
	return err
}

func exitInfo(st *os.ProcessState) (int, string) {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, unix.SignalName(ws.Signal())
	}
	return st.ExitCode(), ""
}

func isExecutable(fi fs.FileInfo) bool {
	return fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// awaitGroupGone polls until no live process is left in the leader's group,
// for at most d.
func awaitGroupGone(l *leader, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for groupAlive(l.pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
