package runner

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The tree-tracking mechanism of containment (contain_linux.go), where no
// cgroup is writable: a poller records which run each process under the
// daemon (a child subreaper) belongs to.

// procStat is what the tracker reads of a process in /proc/PID/stat.
type procStat struct {
	pid, ppid, pgid, sid int
	start                uint64 // clock ticks after boot: with pid, names one process
	dead                 bool   // a zombie
}

// procID names one process across pid reuse.
type procID struct {
	pid   int
	start uint64
}

// tracker records the processes of one run while it runs.
type tracker struct {
	leader procID
	pipes  map[uint64]bool
	// Guarded by trees.mu.
	members map[procID]bool
	groups  map[int]bool // process groups and sessions of members, not the daemon's
	latest  []procStat   // members alive at the last scan
}

// trees are the trackers of the runs in progress and the poller that feeds
// them.
var trees = struct {
	mu       sync.Mutex
	runs     map[*tracker]bool
	leaders  map[int]*tracker // the leaders of all runs, by pid; nil for runs not tracked
	polling  bool
	selfPgid int // the daemon's, set by setupContainment
	selfSid  int
	// cgroups are the cgroups of the runs in progress, by their path in the
	// hierarchy (as /proc/PID/cgroup shows it): what sweepOrphans spares.
	cgroups map[string]bool
}{runs: map[*tracker]bool{}, leaders: map[int]*tracker{}, cgroups: map[string]bool{}}

// pollEvery is how often the tracker walks /proc while runs are in
// progress: what it learns there ties a process to its run once it has
// left the run's process group and lost its parent.
//
// A scan reads /proc/PID/stat of every process of the system (about 5 µs
// each, more in a VM), so it is not done more often: a process it misses
// between two scans is still found at the end of the run, and one that
// nothing ties to a single run is counted in every run.
const pollEvery = 200 * time.Millisecond

func newTracker(pipes []*os.File) *tracker {
	t := &tracker{pipes: map[uint64]bool{}, members: map[procID]bool{}, groups: map[int]bool{}}
	for _, f := range pipes {
		var s unix.Stat_t
		if f != nil && unix.Fstat(int(f.Fd()), &s) == nil {
			t.pipes[s.Ino] = true
		}
	}
	return t
}

// registerLocked starts tracking the run of leader pid; trees.mu is held.
func (t *tracker) registerLocked(pid int) {
	t.leader = procID{pid: pid}
	if st, err := readStat(strconv.Itoa(pid)); err == nil {
		t.leader.start = st.start
	}
	t.members[t.leader] = true
	t.groups[pid] = true
	trees.runs[t] = true
	if !trees.polling {
		trees.polling = true
		go poll()
	}
}

// poll scans while any run is tracked.
func poll() {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for range tick.C {
		trees.mu.Lock()
		if len(trees.runs) == 0 {
			trees.polling = false
			trees.mu.Unlock()
			return
		}
		scanLocked()
		trees.mu.Unlock()
	}
}

func readStat(pid string) (procStat, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime priority nice threads
	// itrealvalue starttime ...; comm may hold anything, so parse after the
	// last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("bad stat")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return procStat{}, errors.New("bad stat")
	}
	st := procStat{dead: (f[0][0] == 'Z' || f[0][0] == 'X') && !liveThreads(pid)}
	st.pid, _ = strconv.Atoi(pid)
	st.ppid, _ = strconv.Atoi(string(f[1]))
	st.pgid, _ = strconv.Atoi(string(f[2]))
	st.sid, _ = strconv.Atoi(string(f[3]))
	st.start, _ = strconv.ParseUint(string(f[19]), 10, 64)
	return st, nil
}

// childrenByParent reads every process in /proc, by parent pid; ok is
// false if /proc cannot be listed.
func childrenByParent() (map[int][]procStat, bool) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	children := map[int][]procStat{}
	for _, d := range dirs {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		st, err := readStat(d.Name())
		if err != nil {
			continue // exited meanwhile
		}
		children[st.ppid] = append(children[st.ppid], st)
	}
	return children, true
}

// liveThreads reports whether the thread group of pid, whose leader is a
// zombie, still has other threads: a program whose main thread exits (the
// exit system call, not exit_group) lives on in them, and must not be taken
// for dead.
func liveThreads(pid string) bool {
	tasks, err := os.ReadDir("/proc/" + pid + "/task")
	return err == nil && len(tasks) > 1
}

// holdsPipe reports whether pid has one of the pipes open.
func holdsPipe(pid int, pipes map[uint64]bool) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		l, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue
		}
		if s, ok := strings.CutPrefix(l, "pipe:["); ok {
			if ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil && pipes[ino] {
				return true
			}
		}
	}
	return false
}

// scanLocked walks /proc once and ties every process of the daemon's
// subtree to the runs it belongs to; trees.mu is held.
//
// Only the daemon's subtree is considered: as a subreaper the daemon keeps
// every descendant in it, so nothing outside it is ever signalled. A child
// of the daemon is a run's leader, or an orphan of a run re-parented to the
// daemon, or a child the daemon started itself (in the daemon's own
// session, left alone). An orphan belongs to the run that was seen to
// have it before, or whose process group or session it is in, or whose
// output pipe it holds (the daemon's own children are those in its session,
// which no process of an op can join: see launch); one that nothing ties to a single run is counted in
// every run in progress, so it dies at the end of the first of them. The
// rest of the subtree follows its ancestor.
func scanLocked() {
	children, ok := childrenByParent()
	if !ok {
		return
	}
	self := os.Getpid()
	for t := range trees.runs {
		t.latest = t.latest[:0]
	}
	for _, c := range children[self] {
		owners := ownersLocked(c)
		// The subtree of c, breadth first.
		queue := []procStat{c}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			for _, t := range owners {
				t.members[procID{p.pid, p.start}] = true
				for _, g := range []int{p.pgid, p.sid} {
					if g != trees.selfPgid && g != trees.selfSid {
						t.groups[g] = true
					}
				}
				if !p.dead {
					t.latest = append(t.latest, p)
				}
			}
			queue = append(queue, children[p.pid]...)
		}
		// An orphan that died on its own is a zombie of the daemon's now:
		// reap it. (The leaders are reaped by Run.)
		if _, leader := trees.leaders[c.pid]; c.dead && len(owners) > 0 && !leader {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(c.pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// ownersLocked names the runs a child of the daemon belongs to.
func ownersLocked(c procStat) []*tracker {
	if t, ok := trees.leaders[c.pid]; ok {
		if t == nil {
			return nil // a run in a cgroup
		}
		return []*tracker{t}
	}
	id := procID{c.pid, c.start}
	var owners []*tracker
	for t := range trees.runs {
		if t.members[id] {
			owners = append(owners, t)
		}
	}
	if len(owners) > 0 {
		return owners
	}
	for t := range trees.runs {
		if t.groups[c.pgid] || t.groups[c.sid] {
			owners = append(owners, t)
		}
	}
	if len(owners) > 0 {
		return owners
	}
	if c.sid == trees.selfSid {
		// Started by the daemon itself: every op leader starts a session
		// of its own, and no process can join another session.
		return nil
	}
	for t := range trees.runs {
		if holdsPipe(c.pid, t.pipes) {
			owners = append(owners, t)
		}
	}
	if len(owners) > 0 {
		return owners
	}
	for t := range trees.runs {
		owners = append(owners, t)
	}
	return owners
}

// signal scans, then signals every live process of the run outside group
// pgid (0: every one). Each was just seen in the daemon's subtree.
func (t *tracker) signal(pgid int, sig syscall.Signal) int {
	trees.mu.Lock()
	defer trees.mu.Unlock()
	scanLocked()
	n := 0
	for _, p := range t.latest {
		if pgid == 0 || p.pgid != pgid {
			_ = unix.Kill(p.pid, sig)
			n++
		}
	}
	return n
}

// await kills every process of the run until none is left alive, for at
// most d: a fork that raced the last round is caught by the next. A run
// that left nothing behind costs one scan.
func (t *tracker) await(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for t.signal(0, syscall.SIGKILL) > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// release ends the tracking of the run. The last scan of await found
// every process of it dead, and reaped those that were orphans.
func (t *tracker) release() {
	trees.mu.Lock()
	defer trees.mu.Unlock()
	delete(trees.runs, t)
}
