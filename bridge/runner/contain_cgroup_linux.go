package runner

import (
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

// The cgroup mechanism of containment (contain_linux.go): one child
// cgroup per run, killed whole at its end, and a sweep of the daemon's
// subtree for the processes of ops that moved out of their cgroup.

// cgroupRun is the cgroup of one run.
type cgroupRun struct {
	dir string
	rel string // its path in the hierarchy; "" for one no sweep spares
	fd  int    // the directory, open for CLONE_INTO_CGROUP; -1 once closed
}

// newCgroupRun makes the cgroup name under parent, whose path in the
// hierarchy is parentRel ("": the cgroup of a probe, not listed in
// trees.cgroups).
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
		trees.mu.Lock()
		trees.cgroups[c.rel] = true
		trees.mu.Unlock()
	}
	return c, nil
}

// unlist ends the run's cgroup's protection from sweepOrphans: what is left
// in it is no longer of a running op. Idempotent.
func (c *cgroupRun) unlist() {
	if c.rel != "" {
		trees.mu.Lock()
		delete(trees.cgroups, c.rel)
		trees.mu.Unlock()
	}
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
		// cgroup.kill signals thread-group leaders; one that is a zombie
		// (its main thread exited, other threads live on) is skipped
		// by it, while kill(2) of its pid reaches the whole group.
		c.kill()
		c.signal(0, syscall.SIGKILL)
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// release closes the directory and removes the cgroup with any the op made
// inside it, which fails (EBUSY) only while a process lives in one: the run
// then reports one in its notes.
func (c *cgroupRun) release() {
	c.unlist()
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
		removeCgroupTree(c.dir, time.Second)
	}
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
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() && !remove(filepath.Join(dir, e.Name())) {
				return false
			}
		}
		for {
			err := unix.Rmdir(dir)
			if err == nil || err == unix.ENOENT {
				return true
			}
			if err != unix.EBUSY || time.Now().After(deadline) {
				return false
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	remove(dir)
}

// sweepOrphans kills every process of an op that no running op's cgroup
// holds, in rounds until none is left, for at most d; it reaps those that
// died as the daemon's children. It reports whether none is left.
//
// The daemon is a child subreaper (setupContainment), so every process of
// every op stays in its subtree, whatever cgroup it moved to. The daemon's
// own children are those in its session, which no process of an op can
// join (launch starts each op in a session of its own); the subtree of
// such a child is left alone. Everything else in the subtree is a process
// of an op: it is spared while it is the leader of a run in progress (Run
// reaps it) or in the cgroup of a run in progress (or a cgroup below it),
// and killed otherwise: it moved out of its run's cgroup (to the daemon's,
// say) or its run has ended. A kill re-parents the victim's children to the
// daemon; the next round finds them. Each round walks /proc; a run that
// left nothing behind costs one walk.
func sweepOrphans(d time.Duration) bool {
	deadline := time.Now().Add(d)
	empty := 0
	for {
		contain.mu.Lock()
		kind := contain.kind
		contain.mu.Unlock()
		if kind != containCgroup {
			// Tracking took over (a cgroup could not be made): it holds
			// what is left, including the orphans of runs in cgroups.
			return true
		}
		// Done after a few empty rounds in a row: a process that forks
		// and exits at once may be between two of its generations when
		// one round looks.
		if sweepOnce() == 0 {
			if empty++; empty >= 3 {
				return true
			}
		} else {
			empty = 0
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sweepOnce is a round of sweepOrphans; it returns how many processes it
// sent SIGKILL.
func sweepOnce() int {
	children, ok := childrenByParent()
	if !ok {
		return 0
	}
	trees.mu.Lock()
	defer trees.mu.Unlock()
	self := os.Getpid()
	n := 0
	var queue []procStat
	for _, c := range children[self] {
		if c.sid != trees.selfSid {
			queue = append(queue, c)
		}
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		t, leader := trees.leaders[p.pid]
		if leader && t != nil {
			continue // a run tracked by its tree (after a fall back)
		}
		queue = append(queue, children[p.pid]...)
		switch {
		case leader:
		case p.dead:
			if p.ppid == self {
				var ws unix.WaitStatus
				_, _ = unix.Wait4(p.pid, &ws, unix.WNOHANG, nil)
			}
		case !inRunningCgroupLocked(p.pid):
			_ = unix.Kill(p.pid, unix.SIGKILL)
			n++
		}
	}
	return n
}

// inRunningCgroupLocked reports whether pid is in the cgroup of a run in
// progress, or below it; trees.mu is held.
func inRunningCgroupLocked(pid int) bool {
	rel, err := cgroupRelOf(strconv.Itoa(pid))
	if err != nil {
		return false // exited meanwhile
	}
	for r := range trees.cgroups {
		if rel == r || strings.HasPrefix(rel, r+"/") {
			return true
		}
	}
	return false
}
