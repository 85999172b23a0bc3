package runner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Containment: what holds every process of a run, beyond its process group,
// so that a program that calls setsid or double-forks does not outlive the
// run (doc.go, "Containment"). One mechanism serves the whole daemon,
// chosen at the first run:
//
//   - cgroup: the daemon's own cgroup v2 is writable (delegated to the user,
//     or root in a container): each run gets a child cgroup, the program is
//     born in it (clone3 with CLONE_INTO_CGROUP, so no fork escapes before a
//     move), and the end of the run writes cgroup.kill. Membership is
//     inherited and cannot be left without write access to another cgroup.
//   - tree: the daemon is a child subreaper, so every orphan of a run is
//     re-parented to the daemon instead of init and stays in the daemon's
//     subtree; a poller walks /proc and records which run each process of
//     that subtree belongs to, and the end of the run kills them all.
//   - group: the process group alone (neither is possible).
type containKind int

const (
	containGroup containKind = iota
	containTree
	containCgroup
)

// cgroupPrefix names the cgroups of runs: bridge-op-<daemon pid>-<n>. A
// daemon that starts sweeps those of dead daemons (killed outright, so
// their runs' escapees may still live there).
const cgroupPrefix = "bridge-op-"

// testOnlyContainment, when not containGroup, is the mechanism the tests
// force before the first run; only the test binary sets it.
var testOnlyContainment containKind

var contain struct {
	once   sync.Once
	mu     sync.Mutex
	kind   containKind
	parent string // the daemon's cgroup directory, kind == containCgroup
	why    string // why not a cgroup
	// decided is set once setupContainment has chosen.
	decided bool
	seq     atomic.Uint64
}

func setupContainment() {
	contain.once.Do(func() {
		dir, err := cgroupDirOf("self")
		if testOnlyContainment == containTree {
			err = errors.New("forced by a test")
		}
		if err == nil {
			err = probeCgroup(dir)
		}
		contain.mu.Lock()
		defer contain.mu.Unlock()
		contain.decided = true
		if err == nil {
			contain.kind, contain.parent = containCgroup, dir
			sweepCgroups(dir)
			return
		}
		degradeLocked(err.Error())
	})
}

// degradeLocked turns process tree tracking on, for a reason a cgroup cannot
// be used; called once, or with contain.mu held.
func degradeLocked(why string) {
	contain.why = why
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		contain.kind = containGroup
		contain.why += fmt.Sprintf("; no child subreaper: %v", err)
		return
	}
	contain.kind = containTree
}

func describeContainment(kind containKind, parent, why string) string {
	switch kind {
	case containCgroup:
		return "cgroup v2 (delegated: " + parent + ")"
	case containTree:
		return "process tree tracking (no writable cgroup v2: " + why + ")"
	}
	return "process group only (" + why + ")"
}

// Containment says how [Run] holds every process of an op in process pid
// (0: this one): "cgroup v2 (delegated: DIR)", "process tree tracking (no
// writable cgroup v2: WHY)" or "process group only (WHY)"; see the package
// doc. It only reads: for a process that has not run an op yet (or
// another process, such as a running daemon) it tells from whether the
// process's cgroup v2 is writable, which the daemon checks first.
func Containment(pid int) string {
	if pid == 0 || pid == os.Getpid() {
		contain.mu.Lock()
		defer contain.mu.Unlock()
		if contain.decided {
			return describeContainment(contain.kind, contain.parent, contain.why)
		}
		pid = os.Getpid()
	}
	dir, err := cgroupDirOf(strconv.Itoa(pid))
	if err == nil {
		err = cgroupWritable(dir)
	}
	if err != nil {
		return describeContainment(containTree, "", err.Error())
	}
	return describeContainment(containCgroup, dir, "")
}

// containmentNow decides the mechanism, if no run has yet, and says which.
func containmentNow() string {
	setupContainment()
	return Containment(0)
}

// cgroupDirOf finds the cgroup v2 directory of a process: its "0::" line in
// /proc/PID/cgroup, under the cgroup2 mount of its mount namespace.
func cgroupDirOf(pid string) (string, error) {
	data, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return "", err
	}
	var rel string
	found := false
	for line := range strings.Lines(string(data)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			rel, found = p, true
		}
	}
	if !found {
		return "", errors.New("no cgroup v2 hierarchy")
	}
	if strings.HasSuffix(rel, " (deleted)") {
		return "", errors.New("the cgroup was deleted")
	}
	mi, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(mi)) {
		// id parent major:minor root mountpoint options ... - fstype source superopts
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 || g[0] != "cgroup2" {
			continue
		}
		root, mnt := unescapeMount(f[3]), unescapeMount(f[4])
		sub, ok := strings.CutPrefix(rel, root)
		if !ok || (root != "/" && sub != "" && sub[0] != '/') {
			continue
		}
		return filepath.Join(mnt, sub), nil
	}
	return "", errors.New("no cgroup2 file system mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupWritable: creating a child needs the directory writable, moving a
// process into it (even at birth) needs cgroup.procs of the common
// ancestor, the daemon's cgroup.
func cgroupWritable(dir string) error {
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs")} {
		if err := unix.Access(p, unix.W_OK); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// probeCgroup checks that a run's cgroup can be made under dir.
func probeCgroup(dir string) error {
	if err := cgroupWritable(dir); err != nil {
		return err
	}
	c, err := newCgroupRun(filepath.Join(dir, fmt.Sprintf("%s%d-probe%d", cgroupPrefix, os.Getpid(), contain.seq.Add(1))))
	if err != nil {
		return err
	}
	defer c.release()
	// Be born in it: clone3 with CLONE_INTO_CGROUP needs Linux 5.7, and the
	// cgroup must take processes (not a threaded or a "domain invalid" one).
	// The child is this binary as the shim (runner.Main), asked to execute
	// "/": it fails at once, with no effect.
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	p, err := os.StartProcess("/proc/self/exe", []string{"bridge", shimArg, "0,0,0,0,0", "/", "/"}, &os.ProcAttr{
		Dir: "/", Env: []string{}, Files: []*os.File{null, null, null},
		Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: c.fd, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return fmt.Errorf("start a process in a cgroup: %w", err)
	}
	_, _ = p.Wait()
	return nil
}

// sweepCgroups kills what is left in the cgroups of dead daemons under dir
// and removes them.
func sweepCgroups(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
		num, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(num)
		if !ok || !e.IsDir() || err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		c := &cgroupRun{dir: filepath.Join(dir, e.Name()), fd: -1}
		c.kill()
		c.await(time.Second)
		_ = os.Remove(c.dir)
	}
}

// hold is the containment of one run.
type hold struct {
	kind  containKind
	cg    *cgroupRun
	tr    *tracker // kind == containTree
	pipes []*os.File
	pid   int // the leader, once started
}

// newHold prepares the containment of a run before its start; pipes are
// the read ends of the run's output pipes (they share the inode of the
// child's ends). A cgroup that cannot be made turns tracking on for this and
// every later run, and says so in a note.
func newHold(pipes ...*os.File) (*hold, []string) {
	setupContainment()
	contain.mu.Lock()
	defer contain.mu.Unlock()
	if contain.kind == containCgroup {
		name := fmt.Sprintf("%s%d-%d", cgroupPrefix, os.Getpid(), contain.seq.Add(1))
		cg, err := newCgroupRun(filepath.Join(contain.parent, name))
		if err == nil {
			return &hold{kind: containCgroup, cg: cg, pipes: pipes}, nil
		}
		degradeLocked(err.Error())
		return newHoldLocked(pipes), []string{"op containment: " + describeContainment(contain.kind, "", contain.why) + " from now on"}
	}
	return newHoldLocked(pipes), nil
}

func newHoldLocked(pipes []*os.File) *hold {
	h := &hold{kind: contain.kind, pipes: pipes}
	if h.kind == containTree {
		h.tr = newTracker(pipes)
	}
	return h
}

// start runs launch, which starts the leader and returns its pid, with what
// the start needs: the cgroup to be born in, or the leader registered with
// the tracker before any scan can see it (so that it is never taken for an
// orphan). If the start in a cgroup fails and one without it succeeds, the
// cgroup was the cause: tracking is turned on for this and every later run.
func (h *hold) start(a *syscall.SysProcAttr, launch func() (int, error)) error {
	if h.kind == containCgroup {
		a.UseCgroupFD, a.CgroupFD = true, h.cg.fd
		_, err := launch()
		if err == nil {
			return nil
		}
		// The program's fault (execve failed), or the cgroup's? The probe
		// of setupContainment tells.
		if perr := probeCgroup(contain.parent); perr == nil {
			return err
		}
		h.cg.release()
		a.UseCgroupFD, a.CgroupFD = false, 0
		contain.mu.Lock()
		if contain.kind == containCgroup {
			degradeLocked(fmt.Sprintf("start in a cgroup: %v", err))
		}
		*h = *newHoldLocked(h.pipes)
		contain.mu.Unlock()
	}
	// Every leader is known to the tracker, whatever the mechanism: after
	// a fall back to tracking, the leaders of runs in cgroups are children
	// of the daemon that no scan may take for orphans.
	trees.mu.Lock()
	defer trees.mu.Unlock()
	pid, err := launch()
	if err != nil {
		return err
	}
	h.pid = pid
	trees.leaders[pid] = h.tr
	if h.kind == containTree {
		h.tr.registerLocked(pid)
	}
	return nil
}

func (h *hold) notes() []string {
	if h.kind == containGroup {
		return []string{"op containment: process group only: a program that calls setsid outlives the run"}
	}
	return nil
}

// signal sends sig to every process of the run outside the leader's group
// (the group is signalled as a whole by signalGroup).
func (h *hold) signal(pgid int, sig syscall.Signal) {
	switch h.kind {
	case containCgroup:
		h.cg.signal(pgid, sig)
	case containTree:
		h.tr.signal(pgid, sig)
	}
}

// kill sends SIGKILL to every process of the run; it does not wait (for
// KillAll: await kills too).
func (h *hold) kill() {
	switch h.kind {
	case containCgroup:
		h.cg.kill()
	case containTree:
		h.tr.signal(0, syscall.SIGKILL)
	}
}

// await kills and waits until no process of the run is left, for at most d.
func (h *hold) await(d time.Duration) bool {
	switch h.kind {
	case containCgroup:
		return h.cg.await(d)
	case containTree:
		return h.tr.await(d)
	}
	return true
}

// release frees what the run held: its cgroup, its tracker.
func (h *hold) release() {
	switch h.kind {
	case containCgroup:
		h.cg.release()
	case containTree:
		h.tr.release()
	}
	trees.mu.Lock()
	delete(trees.leaders, h.pid)
	trees.mu.Unlock()
}

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
	selfPgid int
	selfSid  int
}{runs: map[*tracker]bool{}, leaders: map[int]*tracker{}}

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
		trees.selfPgid, trees.selfSid = unix.Getpgrp(), 0
		if sid, err := unix.Getsid(0); err == nil {
			trees.selfSid = sid
		}
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
	st := procStat{dead: f[0][0] == 'Z' || f[0][0] == 'X'}
	st.pid, _ = strconv.Atoi(pid)
	st.ppid, _ = strconv.Atoi(string(f[1]))
	st.pgid, _ = strconv.Atoi(string(f[2]))
	st.sid, _ = strconv.Atoi(string(f[3]))
	st.start, _ = strconv.ParseUint(string(f[19]), 10, 64)
	return st, nil
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
// daemon, or a child the daemon started itself (in the daemon's own group
// and session, left alone). An orphan belongs to the run that was seen to
// have it before, or whose process group or session it is in, or whose
// output pipe it holds; one that nothing ties to a single run is counted in
// every run in progress, so it dies at the end of the first of them. The
// rest of the subtree follows its ancestor.
func scanLocked() {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
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
	if c.pgid == trees.selfPgid && c.sid == trees.selfSid {
		return nil // started by the daemon itself
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
