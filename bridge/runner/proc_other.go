//go:build !unix

package runner

import (
	"io/fs"
	"os"
	"runtime"
	"syscall"
	"time"
)

// Without process groups and signals the ladder is a single step: the
// leader is killed at once, and its descendants are not reached.
var ladder = []syscall.Signal{syscall.SIGKILL}

type leader struct {
	pid    int
	p      *os.Process
	exited chan struct{}
	state  *os.ProcessState
	err    error
}

func launch(path string, argv []string, attr *os.ProcAttr, _ *hold) (*leader, error) {
	p, err := os.StartProcess(path, argv, attr)
	if err != nil {
		return nil, err
	}
	l := &leader{pid: p.Pid, p: p, exited: make(chan struct{})}
	go func() {
		l.state, l.err = p.Wait()
		close(l.exited)
	}()
	return l, nil
}

func (l *leader) reap() (exitStatus, error) {
	<-l.exited
	if l.err != nil {
		return exitStatus{}, l.err
	}
	code, sig := exitInfo(l.state)
	return exitStatus{code: code, signal: sig, cpu: l.state.UserTime() + l.state.SystemTime()}, nil
}

func signalGroup(l *leader, sig syscall.Signal) error {
	if sig != syscall.SIGKILL {
		return nil
	}
	return l.p.Kill()
}

func exitInfo(st *os.ProcessState) (int, string) { return st.ExitCode(), "" }

func isExecutable(fi fs.FileInfo) bool { return fi.Mode().IsRegular() }

func supervisionNotes() []string {
	return []string{"no process groups on " + runtime.GOOS + ": only the program itself is killed, not its descendants"}
}

func awaitGroupGone(*leader, time.Duration) bool { return true }
