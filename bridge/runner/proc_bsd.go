//go:build unix && !linux

package runner

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// leader is the started program: the process whose pid is also the id of
// its process group.
type leader struct {
	pid    int
	p      *os.Process
	exited chan struct{} // closed once the leader has exited and been reaped
	state  *os.ProcessState
	err    error
}

// launch starts the program in a process group of its own. Without
// waitid(WNOWAIT) the leader is reaped as soon as it exits, so the group kill
// that follows has a small window in which the pid could be reused; and there
// is no Pdeathsig: a daemon killed outright leaves its children running.
func launch(path string, argv []string, attr *os.ProcAttr, _ *hold) (*leader, error) {
	attr.Sys = &syscall.SysProcAttr{Setpgid: true}
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

func supervisionNotes() []string { return nil }

// groupAlive reports whether any process, zombies included, is in process
// group pgid.
func groupAlive(pgid int) bool { return unix.Kill(-pgid, 0) != unix.ESRCH }
