package runner

import (
	"bytes"
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Process-tree helpers for the keeper and for the daemon's own sweep: they
// look only below one process, through /proc/PID/task/TID/children (Linux
// 3.5, CONFIG_PROC_CHILDREN), so their cost follows the size of that
// subtree, never the number of processes on the machine.

// procStat is what is read of a process in /proc/PID/stat.
type procStat struct {
	pid, ppid, pgid, sid int
	dead                 bool // a zombie whose every thread has exited
	stopped              bool // stopped by a signal (T) or a tracer (t)
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// pid (comm) state ppid pgrp session ...; comm may hold anything, so
	// parse after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("bad stat")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 {
		return procStat{}, errors.New("bad stat")
	}
	st := procStat{pid: pid, dead: (f[0][0] == 'Z' || f[0][0] == 'X') && !liveThreads(pid), stopped: f[0][0] == 'T' || f[0][0] == 't'}
	st.ppid, _ = strconv.Atoi(string(f[1]))
	st.pgid, _ = strconv.Atoi(string(f[2]))
	st.sid, _ = strconv.Atoi(string(f[3]))
	return st, nil
}

// tracerOf is the pid of the process tracing pid (0: none, or unknown).
func tracerOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	_, rest, ok := bytes.Cut(b, []byte("\nTracerPid:"))
	if !ok {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	n, _ := strconv.Atoi(string(bytes.TrimSpace(line)))
	return n
}

// liveThreads reports whether the thread group of pid, whose leader is a
// zombie, still has other threads: a program whose main thread exits (the
// exit system call, not exit_group) lives on in them, and must not be taken
// for dead.
func liveThreads(pid int) bool {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	return err == nil && len(tasks) > 1
}

// childrenOf appends the children of process pid (0: this process) to dst:
// each thread lists the children it forked, and a child subreaper's main
// thread those it adopted.
func childrenOf(dst []int, pid int) []int {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/task"
	}
	f, err := os.Open(dir)
	if err != nil {
		return dst
	}
	tids, _ := f.Readdirnames(-1)
	f.Close()
	for _, tid := range tids {
		dst = appendChildren(dst, dir+"/"+tid+"/children")
	}
	return dst
}

// orphansOf appends the children of this process's main thread to dst: the
// children a child subreaper adopted are all there (the kernel hands an
// orphan to the subreaper's first live thread), and so are those the main
// thread forked. One file, whatever the number of threads.
func orphansOf(dst []int) []int {
	return appendChildren(dst, "/proc/self/task/"+strconv.Itoa(os.Getpid())+"/children")
}

func appendChildren(dst []int, file string) []int {
	fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return dst
	}
	defer unix.Close(fd)
	var buf [512]byte
	var data []byte
	for {
		n, err := unix.Read(fd, buf[:])
		if n <= 0 || err != nil {
			break
		}
		data = append(data, buf[:n]...)
	}
	for _, w := range bytes.Fields(data) {
		if c, err := strconv.Atoi(string(w)); err == nil && c > 0 {
			dst = append(dst, c)
		}
	}
	return dst
}

// edge is one process of a subtree and the parent it was listed under.
type edge struct{ pid, parent int }

// subtree lists every descendant of process root (0: this process), each
// with the parent it was found under, parents first.
func subtree(root int) []edge {
	var out []edge
	var kids []int
	kids = childrenOf(kids[:0], root)
	self := root
	if root == 0 {
		self = os.Getpid()
	}
	for _, k := range kids {
		out = append(out, edge{k, self})
	}
	for i := 0; i < len(out); i++ {
		kids = childrenOf(kids[:0], out[i].pid)
		for _, k := range kids {
			out = append(out, edge{k, out[i].pid})
		}
	}
	return out
}

// signalChild sends sig to pid if it is still the process that was listed
// as a child of one of parents: a pid that exited and was reused by an
// unrelated process is never signalled. A pidfd pins the process while its
// parent is checked (Linux 5.3; before that, the check and the kill are
// two steps). It reports whether the signal was sent.
func signalChild(pid int, sig unix.Signal, parents ...int) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if !errors.Is(err, unix.ENOSYS) {
			return false // gone
		}
		fd = -1
	}
	if fd >= 0 {
		defer unix.Close(fd)
	}
	st, err := readStat(pid)
	if err != nil {
		return false
	}
	// The stat read was of the process the pidfd holds only if that one
	// still lives now (a pid is reused only once its process is reaped).
	if fd >= 0 && unix.PidfdSendSignal(fd, 0, nil, 0) != nil {
		return false
	}
	ok := false
	for _, p := range parents {
		ok = ok || st.ppid == p
	}
	if !ok {
		return false
	}
	if fd >= 0 {
		return unix.PidfdSendSignal(fd, sig, nil, 0) == nil
	}
	return unix.Kill(pid, sig) == nil
}
