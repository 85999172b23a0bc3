package runner

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/syncbridge/bridge/syncsafe"
	"golang.org/x/sys/unix"
)

// leader is the started program: the process whose pid is also the id of
// its process group.
type leader struct {
	pid int
	p   *os.Process // a child of this process; nil under a keeper
	kp  *keeper     // the keeper that started it, if one did
	// exited is closed when the leader has exited. It is not yet reaped
	// then: the zombie keeps its pid, and so the process group id, from
	// being reused while the runner still signals the group.
	exited chan struct{}
}

// launch starts the program in a session of its own (so also a process
// group of its own, whose id is its pid), with Pdeathsig SIGKILL so that it
// does not outlive its parent, the daemon or its keeper, killed outright
// (only the leader: the rest of the run is ended by the cgroup's or the
// keeper's end).
//
// Pdeathsig fires when the *thread* that forked the child exits, not the
// process, and Go exits threads (a goroutine that ends while locked to its
// thread takes the thread with it). So the fork happens on a goroutine locked
// to its thread, which stays locked, and alive, until the leader has exited.
//
// A session rather than only a group: setpgid can only join a group of the
// caller's session, so no process of the op can join the daemon's group or
// another op's, and the daemon's session holds only what the daemon started
// itself (doc.go, "Containment"). The program has no controlling terminal.
//
// h puts the program into the run's containment from its birth: a keeper
// starts it, or it is born in the run's cgroup.
func launch(path string, argv []string, attr *os.ProcAttr, h *hold) (*leader, error) {
	if h.kind == containKeeper {
		return h.kp.launch(path, argv, attr)
	}
	attr.Sys = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	l := &leader{exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		// No descriptor but the three given reaches the program, whatever
		// library opened one without close-on-exec.
		syscall.ForkLock.Lock()
		syncsafe.CloseOnExec()
		syscall.ForkLock.Unlock()
		err := h.start(attr.Sys, func() (int, error) {
			p, err := os.StartProcess(path, argv, attr)
			if err != nil {
				return 0, err
			}
			l.p, l.pid = p, p.Pid
			return p.Pid, nil
		})
		if err != nil {
			started <- err
			return
		}
		started <- nil
		var info unix.Siginfo
		for {
			// WNOWAIT: learn of the exit without reaping; reap() reaps.
			err := unix.Waitid(unix.P_PID, l.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				break
			}
		}
		close(l.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return l, nil
}

// reap reaps the leader: its exit and its CPU time (its own and that of
// the children it waited for).
func (l *leader) reap() (exitStatus, error) {
	if l.kp != nil {
		return l.kp.reap()
	}
	st, err := l.p.Wait()
	if err != nil {
		return exitStatus{}, err
	}
	code, sig := exitInfo(st)
	return exitStatus{code: code, signal: sig, cpu: st.UserTime() + st.SystemTime()}, nil
}

// shimExecutable is the daemon's own binary. /proc/self/exe names the
// running image even if the file was replaced or removed since.
func shimExecutable() (string, string) { return "/proc/self/exe", "" }

func supervisionNotes() []string { return nil }

// preparedExec holds execve's arguments converted before the shim sets its
// limits: once RLIMIT_AS is below what the Go runtime has already reserved,
// no allocation may be needed on the way to execve.
type preparedExec struct {
	path       *byte
	argv, envv []*byte
}

func prepareExec(path string, argv, env []string) (*preparedExec, error) {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return nil, err
	}
	a, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return nil, err
	}
	e, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return nil, err
	}
	return &preparedExec{p, a, e}, nil
}

// exec replaces the process image; it returns only on failure. The raw
// execve (rather than syscall.Exec) also means Go's restoring of the soft
// RLIMIT_NOFILE it raised at start-up does not happen: see doc.go.
func (x *preparedExec) exec() error {
	_, _, errno := syscall.RawSyscall(syscall.SYS_EXECVE,
		uintptr(unsafe.Pointer(x.path)),
		uintptr(unsafe.Pointer(&x.argv[0])),
		uintptr(unsafe.Pointer(&x.envv[0])))
	return errno
}

// writeStatus writes the shim's report to its status pipe with a raw
// write, which does not enter the scheduler (quiesce says why). A pipe the
// runner made and reads: it does not block on a report of a few bytes.
func writeStatus(b []byte) {
	_, _, _ = unix.RawSyscall(unix.SYS_WRITE, shimStatusFD, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
}

// groupAlive reports whether a live process is in process group pgid.
// kill(-pgid, 0) also counts zombies, and orphaned members are reaped by
// init, which in some containers takes seconds; so when it finds someone,
// /proc says whether any member is still more than a zombie.
func groupAlive(pgid int) bool {
	if unix.Kill(-pgid, 0) == unix.ESRCH {
		return false
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return true // no /proc: trust kill
	}
	want := []byte(strconv.Itoa(pgid))
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold anything, so parse
		// after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || len(b) < i+3 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 || !bytes.Equal(f[2], want) {
			continue
		}
		if st := f[0][0]; st != 'Z' && st != 'X' {
			return true
		}
	}
	return false
}
