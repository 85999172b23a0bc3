package runner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The cgroup mechanism of containment (contain_linux.go): one child cgroup
// per run, killed whole at its end, its emptiness learnt from cgroup.events
// and its CPU from cpu.stat.

// cgroupRun is the cgroup of one run.
type cgroupRun struct {
	dir string
	rel string // its path in the hierarchy; "" for one no sweep spares
	fd  int    // the directory, open for CLONE_INTO_CGROUP; -1 once closed
}

// newCgroupRun makes the cgroup name under parent, whose path in the
// hierarchy is parentRel ("": the cgroup of a probe, not listed in
// spare.cgroups).
func newCgroupRun(parent, parentRel, name string) (*cgroupRun, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create a cgroup: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open a cgroup: %w", err)
	}
	c := &cgroupRun{dir: dir, fd: fd}
	if parentRel != "" {
		c.rel = path.Join(parentRel, name)
		spare.mu.Lock()
		spare.cgroups[c.rel] = true
		spare.mu.Unlock()
	}
	return c, nil
}

// unlist ends the run's cgroup's protection from sweepDaemon: what is left
// in it is no longer of a running op. Idempotent.
func (c *cgroupRun) unlist() {
	if c.rel != "" {
		spare.mu.Lock()
		delete(spare.cgroups, c.rel)
		spare.mu.Unlock()
	}
}

func cgroupProcs(dir string) []int {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// signal signals every process in the cgroup outside group pgid (0: all).
func (c *cgroupRun) signal(pgid int, sig syscall.Signal) { signalCgroup(c.dir, pgid, sig) }

// signalCgroup signals every process listed in the cgroup dir outside
// group pgid (0: all). A listed process may exit, be reaped and its pid be
// taken by another before the signal: a pidfd pins the process while its
// membership is checked (its /proc/PID/cgroup names this cgroup, or one
// below it), so only a member is ever signalled.
func signalCgroup(dir string, pgid int, sig syscall.Signal) {
	name := "/" + filepath.Base(dir)
	for _, pid := range cgroupProcs(dir) {
		if pgid != 0 && inGroup(pid, pgid) {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			if errors.Is(err, unix.ENOSYS) { // before Linux 5.3
				_ = unix.Kill(pid, sig)
			}
			continue
		}
		rel, err := cgroupRelOf(strconv.Itoa(pid))
		if err == nil && (strings.HasSuffix(rel, name) || strings.Contains(rel, name+"/")) {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		unix.Close(fd)
	}
}

func inGroup(pid, pgid int) bool {
	g, err := unix.Getpgid(pid)
	return err == nil && g == pgid
}

// kill writes cgroup.kill (Linux 5.14), which kills every process in the
// cgroup at once, forks in flight included; before 5.14 it signals each
// listed process, and await repeats that until the cgroup is empty.
func (c *cgroupRun) kill() { killCgroup(c.dir) }

func killCgroup(dir string) {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		signalCgroup(dir, 0, syscall.SIGKILL)
	}
}

func (c *cgroupRun) await(d time.Duration) bool { return awaitCgroup(c.dir, d) }

// awaitCgroup waits, for at most d, until cgroup.events says "populated 0"
// (a dead process, a zombie, no longer counts), killing what is in the
// cgroup meanwhile. A cgroup already empty, the common case once the leader
// is reaped, costs one read. The file is watched, not polled: a change of
// populated wakes poll(2) with POLLPRI.
func awaitCgroup(dir string, d time.Duration) bool {
	fd, err := unix.Open(filepath.Join(dir, "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return len(cgroupProcs(dir)) == 0
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(d)
	var buf [256]byte
	for killed := false; ; {
		n, err := unix.Pread(fd, buf[:], 0)
		if err != nil {
			return len(cgroupProcs(dir)) == 0
		}
		if !populated(buf[:n]) {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		if !killed {
			killCgroup(dir)
			killed = true
		} else {
			// cgroup.kill signals thread-group leaders; one that is a
			// zombie (its main thread exited, other threads live on) is
			// skipped by it, while kill(2) of its pid reaches the group.
			// Before 5.14, a fork may have raced the last round.
			signalCgroup(dir, 0, syscall.SIGKILL)
		}
		// Woken by the change; at most 50 ms, for the cases above.
		_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}, int(min(left, 50*time.Millisecond)/time.Millisecond)+1)
	}
}

func populated(events []byte) bool {
	for line := range bytes.Lines(events) {
		if v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("populated ")); ok {
			return string(v) != "0"
		}
	}
	return true
}

// cpuUsage is the CPU time every process of the run used while in its
// cgroup (cpu.stat's usage_usec, kept whether or not the cpu controller is
// enabled).
func (c *cgroupRun) cpuUsage() time.Duration {
	data, err := os.ReadFile(filepath.Join(c.dir, "cpu.stat"))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Duration(n) * time.Microsecond
		}
	}
	return 0
}

// release closes the directory and removes the cgroup with any the op made
// inside it, which fails (EBUSY) only while a process lives in one.
func (c *cgroupRun) release() {
	c.unlist()
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
		removeCgroupTree(c.dir, time.Second)
	}
}

// endCgroup kills what is in the cgroup dir and below, waits for it to
// empty, for at most d, and removes it. It returns how many processes it
// found there, and whether the cgroup is gone.
func endCgroup(dir string, d time.Duration) (int, bool) {
	n := 0
	var walk func(string)
	walk = func(dir string) {
		n += len(cgroupProcs(dir))
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				walk(filepath.Join(dir, e.Name()))
			}
		}
	}
	walk(dir)
	ok := awaitCgroup(dir, d) // cgroup.kill and populated cover the cgroups below
	removeCgroupTree(dir, time.Second)
	_, err := os.Stat(dir)
	return n, ok && os.IsNotExist(err)
}

// removeCgroupTree removes the cgroup dir and every cgroup below it, the
// deepest first: an op may make cgroups inside its own and move into them,
// and rmdir removes only an empty cgroup (no child, no live process). A
// child that is still busy (a killed process not quite dead) is tried
// again for at most d.
func removeCgroupTree(dir string, d time.Duration) {
	deadline := time.Now().Add(d)
	var remove func(string) bool
	remove = func(dir string) bool {
		// A run's cgroup has no child unless the op made one: rmdir at
		// once, and list only when that fails.
		for {
			err := unix.Rmdir(dir)
			if err == nil || err == unix.ENOENT {
				return true
			}
			if err == unix.EBUSY {
				ents, _ := os.ReadDir(dir)
				sub := false
				for _, e := range ents {
					if e.IsDir() {
						sub = true
						if !remove(filepath.Join(dir, e.Name())) {
							return false
						}
					}
				}
				if sub {
					continue
				}
			}
			if err != unix.EBUSY || time.Now().After(deadline) {
				return false
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	remove(dir)
}
