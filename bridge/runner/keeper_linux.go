package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The keeper: where no cgroup can be written, each run is held by a keeper
// process, this binary started again as
//
//	<self> __bridge_keep__
//
// with fd 3 a SOCK_SEQPACKET control socket to the daemon and fd 4 the
// state directory's lock file, whose shared lock the daemon's open file
// description holds. The keeper makes itself a child subreaper and starts
// the op's program when told: every process of the run is then its
// descendant, whatever the program does (setsid, a double fork), and one
// whose parent dies is re-parented to the keeper, not to init. So the
// keeper can end them all by walking its own subtree, knows they are all
// gone when it has no child left (wait4 says ECHILD), and has reaped each
// of them, so its RUSAGE_CHILDREN is the CPU time of the whole run.
//
// A daemon killed outright closes the control socket: the keeper then ends
// the run at once and exits, and the lock it holds (a copy of the daemon's
// file description) is released only then, which is how the next daemon
// knows (OpenState). The keeper leads a session of its own, away from the
// daemon's terminal and process group, so a ^C or a kill of the daemon's
// group does not take it before its run is ended.
//
// The protocol, one datagram a message, its first byte its kind:
//
//	daemon → keeper  R{json run}+fds   start the program (fds: stdin, stdout, stderr[, shim status])
//	                 S<sig> <pgid>     signal every process of the run outside process group pgid (0: all)
//	                 W                 reap the leader (the daemon has signalled its group for the last time)
//	                 E<ms>             end the run: kill every process, reap, report; then exit
//	                 G{json guard}     be the daemon's guard instead (cgroup mode): run nothing, and
//	                                   when the daemon dies end every cgroup of its runs
//	keeper → daemon  H                 ready (sent first)
//	                 s<pid> <cpu ns>   started; the keeper's own CPU so far
//	                 f<errno> <what>   not started
//	                 x<pid>            the leader exited (not reaped: its pid still names its group)
//	                 w<code> <signal> <cpu ns>   the leader reaped
//	                 e<0|1> <cpu ns> <0|1>  the run ended (1: nothing left), its CPU, and whether
//	                                   the keeper may serve another (0: it exits)
//	                 g                 guarding
//
// The guard: in the cgroup mode a run's processes outlive a daemon killed
// outright in their cgroup (only the program has Pdeathsig). One keeper per
// daemon, told G, ends them as soon as the daemon is gone instead of at the
// next start, and holds the lock until they are.
const keeperArg = "__bridge_keep__"

// The keeper's descriptors, as the daemon hands them over.
const (
	keeperSockFD = 3
	keeperLockFD = 4
)

// keeperGuard is the G message's body: the runs' cgroups are the
// directories of Dir whose names start with Prefix.
type keeperGuard struct {
	Dir    string `json:"dir"`
	Prefix string `json:"prefix"`
}

// keeperRun is the R message's body.
type keeperRun struct {
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
}

// keeperMain is the keeper process's body; it never returns.
func keeperMain() {
	unix.CloseOnExec(keeperSockFD)
	unix.CloseOnExec(keeperLockFD)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		os.Exit(125) // the daemon sees the socket close before "H"
	}
	// Not dumpable: a process of the same user (an op) may then neither
	// ptrace the keeper nor take its descriptors (pidfd_getfd), such as
	// its control socket, to answer the daemon in its place.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	initial := keeperSettings()
	c, err := net.FileConn(os.NewFile(keeperSockFD, "keeper"))
	conn, ok := c.(*net.UnixConn)
	if err != nil || !ok {
		os.Exit(125)
	}
	k := &keeperProc{conn: conn, self: os.Getpid()}
	// Orphans that die mid-run are reaped as they die, so that zombies do
	// not pile up under a long run (the leader is kept until W).
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	go func() {
		for range chld {
			k.reapOrphans()
		}
	}()
	k.send("H")
	buf, oob := make([]byte, 1<<20), make([]byte, unix.CmsgSpace(4*4))
	var guard *keeperGuard
	for {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			// The daemon is gone: end the run, however long it takes.
			if guard != nil {
				guard.end()
			} else {
				k.end(time.Time{})
			}
			os.Exit(0)
		}
		msg := buf[:n]
		switch msg[0] {
		case 'G':
			var g keeperGuard
			if json.Unmarshal(msg[1:], &g) == nil && k.leader == nil {
				guard = &g
				k.send("g")
			}
		case 'R':
			k.cpuBase = childrenCPU()
			k.start(msg[1:], oob[:oobn])
		case 'S':
			var sig, pgid int
			if _, err := fmt.Sscanf(string(msg[1:]), "%d %d", &sig, &pgid); err == nil {
				k.signal(syscall.Signal(sig), pgid)
			}
		case 'W':
			k.reapLeader()
		case 'E':
			ms, _ := strconv.Atoi(string(msg[1:]))
			ok := k.end(time.Now().Add(time.Duration(ms) * time.Millisecond))
			flag := "0"
			if ok {
				flag = "1"
			}
			// Serve another run only as it was made: an op of the same user
			// may have changed its limits, nice or oom score (prlimit,
			// renice), which the next run's program would inherit.
			same := keeperSettings() == initial
			reuse := "0"
			if same {
				reuse = "1"
			}
			k.send(fmt.Sprintf("e%s %d %s", flag, childrenCPU()-k.cpuBase, reuse))
			if !ok || !same {
				k.end(time.Time{}) // go on: the daemon no longer waits
				os.Exit(0)
			}
			// Nothing of the run is left: ready for the daemon's next.
			k.mu.Lock()
			k.leader, k.leaderPid = nil, 0
			k.mu.Unlock()
		}
	}
}

type keeperProc struct {
	conn      *net.UnixConn
	self      int
	leader    *os.Process   // nil until started, and once reaped; the main goroutine's
	mu        sync.Mutex    // held from the fork until leaderPid is set: the orphan reaper must know the leader
	leaderPid int           // guarded by mu
	cpuBase   int64         // the keeper's children's CPU (ns) when the run started: a keeper serves run after run
	reported  chan struct{} // closed once the leader's exit is reported to the keeper (waitable)
}

// keeperSettings is what of the keeper its programs inherit and another
// process of its user can change from outside.
func keeperSettings() string {
	var b strings.Builder
	for res := 0; res < 16; res++ {
		var r unix.Rlimit
		if unix.Getrlimit(res, &r) == nil {
			fmt.Fprintf(&b, "%d:%d:%d ", res, r.Cur, r.Max)
		}
	}
	prio, _ := unix.Getpriority(unix.PRIO_PROCESS, 0)
	oom, _ := os.ReadFile("/proc/self/oom_score_adj")
	var cpus unix.CPUSet
	_ = unix.SchedGetaffinity(0, &cpus)
	fmt.Fprintf(&b, "prio %d oom %s cpus %v", prio, strings.TrimSpace(string(oom)), cpus)
	return b.String()
}

// selfCPU is the CPU (ns) this process used itself: a keeper killed in a
// run is charged to it only what it used since the run began.
func selfCPU() int64 {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// childrenCPU is the CPU (ns) of every child this process reaped.
func childrenCPU() int64 {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func (k *keeperProc) send(msg string) { _, _ = k.conn.Write([]byte(msg)) }

// start starts the program. The fork happens on a goroutine locked to its
// thread until the leader exits, for Pdeathsig (see launch): a keeper
// killed outright takes its leader along.
func (k *keeperProc) start(body, oob []byte) {
	var r keeperRun
	var fds []int
	if cm, err := unix.ParseSocketControlMessage(oob); err == nil {
		for _, m := range cm {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		unix.CloseOnExec(fd)
		files[i] = os.NewFile(uintptr(fd), "fd"+strconv.Itoa(i))
	}
	defer closeAll(files)
	if err := json.Unmarshal(body, &r); err != nil || k.leader != nil || len(files) < 3 {
		k.send(fmt.Sprintf("f%d bad run message", syscall.EINVAL))
		return
	}
	started := make(chan error, 1)
	reported := make(chan struct{})
	k.reported = reported
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		k.mu.Lock()
		p, err := os.StartProcess(r.Path, r.Argv, &os.ProcAttr{Dir: r.Dir, Env: r.Env, Files: files,
			Sys: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}})
		if err != nil {
			k.mu.Unlock()
			started <- err
			return
		}
		k.leader, k.leaderPid = p, p.Pid
		k.mu.Unlock()
		started <- nil
		var info unix.Siginfo
		for {
			// WNOWAIT: learn of the exit without reaping; W reaps.
			if err := unix.Waitid(unix.P_PID, p.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != unix.EINTR {
				break
			}
		}
		close(reported)
		k.send("x" + strconv.Itoa(p.Pid))
	}()
	if err := <-started; err != nil {
		errno := syscall.EINVAL
		if e, ok := errors.AsType[syscall.Errno](err); ok {
			errno = e
		}
		k.send(fmt.Sprintf("f%d %v", errno, err))
		return
	}
	k.send(fmt.Sprintf("s%d %d", k.leader.Pid, selfCPU()))
}

// reapLeader reaps the leader and reports its status and CPU time (its
// own, and that of the children it waited for).
func (k *keeperProc) reapLeader() {
	if k.leader == nil {
		k.send("w-1  0")
		return
	}
	// The leader has exited: the daemon learnt it from its pidfd. A tracer
	// holds that exit from the keeper until it waits, detaches or dies,
	// and the wait below would block the keeper, deaf to the daemon, for as
	// long (red team of 8b2dbf1). A tracer the op started is in the run's
	// subtree: the rest of the run, which ends now anyway, is killed first,
	// the tracer with it. (One outside the run: the daemon gives up on this
	// keeper, and sweeps.)
	select {
	case <-k.reported: // the usual case: no look at /proc
	default:
		if tracerOf(k.leader.Pid) != 0 {
			k.signal(syscall.SIGKILL, 0)
		}
	}
	st, err := k.leader.Wait()
	k.mu.Lock()
	k.leader, k.leaderPid = nil, 0 // reaped: the orphan reaper may reap anything now
	k.mu.Unlock()
	if err != nil {
		k.send("w-1  0")
		return
	}
	code, sig := exitInfo(st)
	k.send(fmt.Sprintf("w%d %s %d", code, sig, (st.UserTime() + st.SystemTime()).Nanoseconds()))
}

// signal sends sig to every process of the run outside group pgid (0:
// every one); the leader's group is signalled by the daemon.
//
// A SIGKILL (KillAll) is sent in rounds until one finds no process not yet
// signalled: a killed process's children move to the keeper, and one that
// moved while a round read the lists is found by the next.
func (k *keeperProc) signal(sig syscall.Signal, pgid int) {
	sent := map[int]bool{}
	for {
		fresh := 0
		for _, e := range subtree(0) {
			if sent[e.pid] || (pgid != 0 && inGroup(e.pid, pgid)) {
				continue
			}
			sent[e.pid] = true
			fresh++
			signalChild(e.pid, sig, e.parent, k.self)
		}
		if sig != syscall.SIGKILL || fresh == 0 {
			return
		}
	}
}

// reapOrphans reaps the keeper's children that died, except the leader.
func (k *keeperProc) reapOrphans() {
	k.mu.Lock()
	defer k.mu.Unlock()
	leader := k.leaderPid
	for _, pid := range childrenOf(nil, 0) {
		if pid == leader {
			continue
		}
		if st, err := readStat(pid); err == nil && st.dead {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// end kills every process of the run, in rounds until the keeper has no
// child left (a fork that raced a round is a child of a killed process,
// re-parented to the keeper, and caught by the next), and reaps them all;
// it gives up at deadline (zero: never) and reports whether none is left.
func (k *keeperProc) end(deadline time.Time) bool {
	for {
		killed := 0
		for _, e := range subtree(0) {
			if signalChild(e.pid, unix.SIGKILL, e.parent, k.self) {
				killed++
			}
		}
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.ECHILD {
				return true
			}
			if pid <= 0 || err != nil {
				break
			}
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return false
		}
		if killed == 0 {
			time.Sleep(time.Millisecond) // only dying processes left
		}
	}
}

// end ends every cgroup of the guarded daemon's runs.
func (g *keeperGuard) end() {
	ents, _ := os.ReadDir(g.Dir)
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), g.Prefix) {
			// A good while: the next daemon waits for this process's
			// lock, at most its own wait, then says so.
			for range 10 {
				if _, ok := endCgroup(filepath.Join(g.Dir, e.Name()), time.Minute); ok {
					break
				}
			}
		}
	}
}

// parseKeeperStatus reads a w message: exit code, signal name, CPU.
func parseKeeperStatus(msg string) (exitStatus, error) {
	f := strings.SplitN(msg, " ", 3)
	if len(f) != 3 {
		return exitStatus{}, fmt.Errorf("keeper: bad status %q", msg)
	}
	code, err1 := strconv.Atoi(f[0])
	ns, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return exitStatus{}, fmt.Errorf("keeper: bad status %q", msg)
	}
	if code == -1 && f[1] == "" {
		return exitStatus{}, errors.New("keeper: the leader could not be reaped")
	}
	return exitStatus{code: code, signal: f[1], cpu: time.Duration(ns)}, nil
}
