package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The cgroup mechanism of containment (contain_linux.go): one child
// cgroup per run, killed whole at its end.

// cgroupRun is the cgroup of one run.
type cgroupRun struct {
	dir string
	fd  int // the directory, open for CLONE_INTO_CGROUP; -1 once closed
}

func newCgroupRun(dir string) (*cgroupRun, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create a cgroup: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open a cgroup: %w", err)
	}
	return &cgroupRun{dir: dir, fd: fd}, nil
}

func (c *cgroupRun) procs() []int {
	data, _ := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// signal signals every process in the cgroup outside group pgid (0: all).
func (c *cgroupRun) signal(pgid int, sig syscall.Signal) {
	for _, pid := range c.procs() {
		if pgid == 0 || !inGroup(pid, pgid) {
			_ = unix.Kill(pid, sig)
		}
	}
}

func inGroup(pid, pgid int) bool {
	g, err := unix.Getpgid(pid)
	return err == nil && g == pgid
}

// kill writes cgroup.kill (Linux 5.14), which kills every process in the
// cgroup at once, forks in flight included; before 5.14 it signals each
// listed process, and await repeats that until the cgroup is empty.
func (c *cgroupRun) kill() {
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		c.signal(0, syscall.SIGKILL)
	}
}

// populated reads cgroup.events; a dead process (a zombie) no longer counts.
func (c *cgroupRun) populated() bool {
	data, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
	if err != nil {
		return len(c.procs()) > 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "populated "); ok {
			return v != "0"
		}
	}
	return len(c.procs()) > 0
}

func (c *cgroupRun) await(d time.Duration) bool {
	deadline := time.Now().Add(d)
	c.kill()
	for c.populated() {
		if time.Now().After(deadline) {
			return false
		}
		c.kill()
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// release closes the directory and removes the cgroup, which fails (EBUSY)
// only while a process lives in it: the run then reports one in its notes.
func (c *cgroupRun) release() {
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
		_ = os.Remove(c.dir)
	}
}
