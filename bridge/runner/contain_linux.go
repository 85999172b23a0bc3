package runner

import (
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
//     inherited, but a process of the op runs as the daemon's user, who can
//     always write the daemon's own cgroup.procs, so it can move itself out
//     of the run's cgroup into the daemon's. So the daemon is a child
//     subreaper here too, and the end of every run sweeps its subtree
//     (sweepOrphans): a process of an op that is in no running op's cgroup
//     is killed.
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
	once      sync.Once
	mu        sync.Mutex
	kind      containKind
	parent    string // the daemon's cgroup directory, kind == containCgroup
	parentRel string // its path in the hierarchy, as /proc/PID/cgroup shows it
	why       string // why not a cgroup
	// decided is set once setupContainment has chosen.
	decided bool
	seq     atomic.Uint64
}

func setupContainment() {
	contain.once.Do(func() {
		trees.mu.Lock()
		trees.selfPgid = unix.Getpgrp()
		trees.selfSid, _ = unix.Getsid(0)
		trees.mu.Unlock()
		dir, rel, err := cgroupOf("self")
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
			// A cgroup is a closed box only for a process that cannot write
			// the cgroup.procs of a cgroup outside it, and the op's user can
			// write the daemon's. A new cgroup namespace (CLONE_NEWCGROUP)
			// would make the kernel refuse such a move only where cgroup2 is
			// mounted with nsdelegate, which the daemon cannot choose, and
			// only a daemon with CAP_SYS_ADMIN could make one, whose ops
			// could setns out of it. Being the child subreaper works for
			// every user: no process of an op can leave the daemon's
			// subtree, so sweepOrphans finds those that left the cgroup.
			if perr := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); perr != nil {
				err = fmt.Errorf("no child subreaper to hold what leaves a cgroup: %w", perr)
			}
		}
		if err == nil {
			contain.kind, contain.parent, contain.parentRel = containCgroup, dir, rel
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
	dir, _, err := cgroupOf(strconv.Itoa(pid))
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

// cgroupRelOf reads the cgroup v2 of a process: its "0::" line in
// /proc/PID/cgroup, a path in the hierarchy (relative to the root of this
// process's cgroup namespace).
func cgroupRelOf(pid string) (string, error) {
	data, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(data)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy")
}

// cgroupOf finds the cgroup v2 directory of a process (its path in the
// hierarchy under the cgroup2 mount of its mount namespace) and that path.
func cgroupOf(pid string) (dir, rel string, err error) {
	rel, err = cgroupRelOf(pid)
	if err != nil {
		return "", "", err
	}
	if strings.HasSuffix(rel, " (deleted)") {
		return "", "", errors.New("the cgroup was deleted")
	}
	mi, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		return "", "", err
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
		return filepath.Join(mnt, sub), rel, nil
	}
	return "", "", errors.New("no cgroup2 file system mounted")
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
	c, err := newCgroupRun(dir, "", fmt.Sprintf("%s%d-probe%d", cgroupPrefix, os.Getpid(), contain.seq.Add(1)))
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
		removeCgroupTree(c.dir, time.Second)
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
		cg, err := newCgroupRun(contain.parent, contain.parentRel, name)
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
		err := h.launch(launch)
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
	return h.launch(launch)
}

// launch starts the leader with trees.mu held and registers it. Every
// leader is known, whatever the mechanism: no scan of the tracker (after a
// fall back to tracking) or sweep may take a leader for an orphan, nor reap
// it (Run does).
func (h *hold) launch(launch func() (int, error)) error {
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

// await kills and waits until no process of the run is left, for at most d;
// with a cgroup, also those that left it (sweepOrphans).
func (h *hold) await(d time.Duration) bool {
	switch h.kind {
	case containCgroup:
		ok := h.cg.await(d)
		h.cg.unlist()
		return sweepOrphans(d) && ok
	case containTree:
		return h.tr.await(d)
	}
	return true
}

// release frees what the run held: its cgroup (and any the op made in it),
// its tracker.
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
