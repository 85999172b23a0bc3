package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/syncbridge/bridge/syncsafe"
	"golang.org/x/sys/unix"
)

// keeper is the daemon's side of one run's keeper process (keeper_linux.go).
//
// The daemon trusts the keeper with nothing it cannot check: the op runs
// as the daemon's user and may stop the keeper (SIGSTOP) or kill it. So the
// leader's exit is also watched through a pidfd, every reply has a time
// limit, and a keeper that does not answer in time is killed: its run's
// processes are then the daemon's (a child subreaper),
// which reaps the leader itself and sweeps the rest.
type keeper struct {
	conn    *net.UnixConn
	proc    *os.Process
	replies chan string   // s, f, w, e messages
	gone    chan struct{} // closed when the control socket closed
	dead    chan struct{} // closed once the keeper process is reaped
	state   *os.ProcessState
	// The run in progress: a keeper serves one run at a time, and, back in
	// its State's pool, the next one.
	mu     sync.Mutex
	cur    *keeperRun1
	leader int // the program's pid, once started
	// charged is the CPU of the runs this keeper ended and reported, so a
	// keeper that dies in a later run charges that run only the rest of
	// what wait4 reports for it.
	charged time.Duration
	// own is the keeper's own CPU as the run began (its Go runtime, its
	// earlier runs' bookkeeping): not the run's either.
	own time.Duration
	// reusable: the keeper said it may serve another run (nothing an op
	// could change of it was changed).
	reusable bool
}

// keeperRun1 is what the daemon knows of one run of a keeper.
type keeperRun1 struct {
	exited chan struct{} // closed at x, when the leader's pidfd says so, or when the keeper is gone
	once   sync.Once
}

// leaderPid is the program of the run in progress.
func (k *keeper) leaderPid() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.leader
}

// markExited closes the current run's exited channel.
func (k *keeper) markExited() {
	k.mu.Lock()
	c := k.cur
	k.mu.Unlock()
	if c != nil {
		c.once.Do(func() { close(c.exited) })
	}
}

// keeperReplyWait is how long a keeper's answer to anything but the end of
// a run (which has the run's own bound) is waited for before the daemon
// looks at why it is late; keeperReplyMax is how much longer a keeper that
// is running, not stopped, is given. A stopped keeper (an op of the same
// user may SIGSTOP it) is given up on at once; a slow one is not: on a
// loaded machine (CI, four runs of a test at a load of 17 on 2 cores) a
// keeper took 1 to 5 s to start a program, and a start given up on is one
// that "may have happened", which the daemon cannot answer done.
// A var: a test sets it near zero, so that every answer is a late one.
var keeperReplyWait = 5 * time.Second

const keeperReplyMax = time.Minute

// startKeeper starts a keeper for a run of state s (nil: none, so no lock
// is handed over) and waits for it to be ready.
func startKeeper(s *State) (*keeper, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("keeper socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "keeper"), os.NewFile(uintptr(pair[1]), "keeper")
	defer theirs.Close()
	defer ours.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	lock := null
	if s != nil && s.lock != nil {
		lock = s.lock
	}
	// The keeper's standard error is the daemon's, for a Go runtime panic.
	files := []*os.File{null, null, os.Stderr, theirs, lock}
	syscall.ForkLock.Lock()
	syncsafe.CloseOnExec()
	syscall.ForkLock.Unlock()
	spare.mu.Lock()
	p, err := os.StartProcess("/proc/self/exe", []string{"bridge", keeperArg}, &os.ProcAttr{Dir: "/", Env: []string{}, Files: files,
		Sys: &syscall.SysProcAttr{Setsid: true}})
	if err == nil {
		spare.keepers[p.Pid] = true
	}
	spare.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("start a keeper: %w", err)
	}
	c, err := net.FileConn(ours)
	conn, ok := c.(*net.UnixConn)
	if err != nil || !ok {
		_ = p.Kill()
		_, _ = p.Wait()
		spare.mu.Lock()
		delete(spare.keepers, p.Pid)
		spare.mu.Unlock()
		return nil, fmt.Errorf("keeper socket: %v", err)
	}
	k := &keeper{conn: conn, proc: p, replies: make(chan string, 4), gone: make(chan struct{}), dead: make(chan struct{})}
	go func() {
		k.state, _ = p.Wait()
		spare.mu.Lock()
		delete(spare.keepers, p.Pid)
		spare.mu.Unlock()
		close(k.dead)
	}()
	ready := make(chan bool, 1)
	go k.read(ready)
	if !<-ready {
		k.close()
		return nil, errors.New("the keeper did not start: the binary must call runner.Main first thing in main")
	}
	return k, nil
}

// read dispatches the keeper's messages until its socket closes.
func (k *keeper) read(ready chan<- bool) {
	buf := make([]byte, 4096)
	first := true
	defer func() {
		if first {
			ready <- false
		}
		close(k.gone)
		k.markExited()
	}()
	for {
		n, err := k.conn.Read(buf)
		if err != nil || n == 0 {
			return
		}
		msg := string(buf[:n])
		switch {
		case first:
			first = false
			ready <- msg == "H"
			if msg != "H" {
				return
			}
		case strings.HasPrefix(msg, "x"):
			// The program with this pid exited: a late word of an earlier
			// run of this keeper changes nothing.
			if pid, err := strconv.Atoi(msg[1:]); err == nil && pid == k.leaderPid() {
				k.markExited()
			}
		default:
			var pid int
			if _, err := fmt.Sscanf(msg, "s%d", &pid); err == nil {
				// Known before any word of its exit, which follows.
				k.mu.Lock()
				k.leader = pid
				k.mu.Unlock()
			}
			k.replies <- msg
		}
	}
}

func (k *keeper) send(msg []byte, oob []byte) error {
	_, _, err := k.conn.WriteMsgUnix(msg, oob, nil)
	return err
}

// reply waits for the keeper's next reply: for d (0: no limit), then, while
// the keeper is neither stopped nor gone, for up to keeperReplyMax more.
func (k *keeper) reply(d time.Duration) (string, bool) {
	return k.replyWithin(d, func() time.Duration { return keeperReplyMax })
}

// replyWithin is reply with more() as the most a running keeper is given
// after d, asked only once the answer is late.
func (k *keeper) replyWithin(d time.Duration, more func() time.Duration) (string, bool) {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	late, extra := time.Time{}, time.Duration(0)
	for {
		select {
		case m := <-k.replies:
			return m, true
		case <-k.gone:
			select {
			case m := <-k.replies:
				return m, true
			default:
				return "", false
			}
		case <-timeout:
			if late.IsZero() {
				late, extra = time.Now(), more()
			}
			if st, err := readStat(k.proc.Pid); err != nil || st.stopped || st.dead || time.Since(late) >= extra {
				return "", false
			}
			timeout = time.After(100 * time.Millisecond)
		}
	}
}

// launch has the keeper start the program with attr's files as its
// standard streams (and fd 3 for the shim's status).
func (k *keeper) launch(path string, argv []string, attr *os.ProcAttr) (*leader, error) {
	run := &keeperRun1{exited: make(chan struct{})}
	k.mu.Lock()
	k.cur, k.leader = run, 0
	k.mu.Unlock()
	body, err := json.Marshal(keeperRun{Path: path, Argv: argv, Env: attr.Env, Dir: attr.Dir})
	if err != nil {
		return nil, err
	}
	fds := make([]int, len(attr.Files))
	for i, f := range attr.Files {
		fds[i] = int(f.Fd())
	}
	if err := k.send(append([]byte{'R'}, body...), unix.UnixRights(fds...)); err != nil {
		return nil, fmt.Errorf("keeper: %w", err)
	}
	m, ok := k.reply(keeperReplyWait)
	pid := 0
	if ok && strings.HasPrefix(m, "s") {
		var own int64
		_, _ = fmt.Sscanf(m, "s%d %d", &pid, &own)
		k.own = time.Duration(own)
	}
	// The check and the sparing are one step under spare.mu: a keeper
	// killed by its op just after the check re-parents the leader to the
	// daemon, whose SIGCHLD reaper (or another run's sweep) reaped it as an
	// orphan if it had exited, before it was spared; the run's own reap then
	// found no child (CI47). Killed before the check, the leader is not the
	// keeper's child: the start may have happened, below.
	started := false
	if ok && strings.HasPrefix(m, "s") {
		spare.mu.Lock()
		if started = k.isChild(pid); started {
			spare.leaders[pid] = k
		}
		spare.mu.Unlock()
	}
	switch {
	case !ok || strings.HasPrefix(m, "s") && !started:
		// Killed or stopped by something, or not the keeper answering: it
		// may have started the program. Its processes are the daemon's
		// once it is dead; they are swept, and the start is not called
		// failed (a client would retry it).
		k.kill()
		sweepDaemon(keeperReplyWait)
		return nil, fmt.Errorf("the op's keeper process stopped answering as it started the program (%w)", ErrMayHaveStarted)
	case strings.HasPrefix(m, "s"):
		// Spared by the daemon's sweep (above): it reaps the leader itself
		// if the keeper dies first (reap).
		k.watchLeader(pid, run)
		return &leader{pid: pid, exited: run.exited, kp: k}, nil
	case strings.HasPrefix(m, "f"):
		num, what, _ := strings.Cut(m[1:], " ")
		if n, err := strconv.ParseUint(num, 10, 32); err == nil {
			// what is os.StartProcess's own error, which names the path.
			return nil, &keeperStartError{what: what, errno: syscall.Errno(n)}
		}
	}
	return nil, fmt.Errorf("keeper: bad reply %q", m)
}

// isChild reports whether pid is a live child of the keeper: what it
// reports as the program it started must be, or the daemon would signal
// another process's group.
func (k *keeper) isChild(pid int) bool {
	if pid <= 1 {
		return false
	}
	st, err := readStat(pid)
	return err == nil && st.ppid == k.proc.Pid
}

// keeperStartError is why the keeper could not start a program; it unwraps
// to the errno, as os.StartProcess's error does.
type keeperStartError struct {
	what  string
	errno syscall.Errno
}

func (e *keeperStartError) Error() string { return e.what }
func (e *keeperStartError) Unwrap() error { return e.errno }

// becomeGuard makes the keeper the guard of the cgroups named prefix* in
// dir (keeper_linux.go).
func (k *keeper) becomeGuard(dir, prefix string) error {
	body, err := json.Marshal(keeperGuard{Dir: dir, Prefix: prefix})
	if err != nil {
		return err
	}
	if err := k.send(append([]byte{'G'}, body...), nil); err != nil {
		return err
	}
	if m, ok := k.reply(keeperReplyWait); !ok || m != "g" {
		return fmt.Errorf("the guard did not start (%q)", m)
	}
	return nil
}

// watchLeader closes exited when the leader exits, whatever its keeper
// does: a pidfd of it becomes readable then (Linux 5.3; without one, the
// keeper's word is all there is).
func (k *keeper) watchLeader(pid int, run *keeperRun1) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	go func() {
		defer unix.Close(fd)
		for {
			_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
			if err != unix.EINTR {
				break
			}
		}
		run.once.Do(func() { close(run.exited) })
	}()
}

// kill ends a keeper that does not answer (SIGKILL ends a stopped process
// too) and waits for it to be reaped. Its children, the run's processes,
// are then the daemon's.
func (k *keeper) kill() {
	_ = k.proc.Kill()
	<-k.dead
}

// reap has the keeper reap the leader; if it does not answer in time it is
// killed, and the leader, the daemon's child from then on, reaped here.
//
// A late answer is waited for as any other (a keeper killed after it
// reaped the leader would take its status along: red team of 18783ff); a
// keeper whose leader a tracer holds ends that tracer with the rest of the
// run first (keeperProc.reapLeader). A tracer outside the run would keep
// the keeper in its wait, running to all appearances: a traced leader's
// reap gets no more than keeperReplyWait (red team of 5c96222, where it
// held the run 70 s). If the keeper is killed, reaping the leader here
// does not block on such a tracer either: the sweep of what the keeper
// left (the leader spared) goes on until the leader is reaped, for at most
// keeperReplyWait.
func (k *keeper) reap() (exitStatus, error) {
	more := func() time.Duration { // read only when the answer is late: not on a run's usual path
		if tracerOf(k.leaderPid()) != 0 {
			return 0
		}
		return keeperReplyMax
	}
	if err := k.send([]byte("W"), nil); err == nil {
		if m, ok := k.replyWithin(keeperReplyWait, more); ok && strings.HasPrefix(m, "w") {
			return parseKeeperStatus(m[1:])
		}
	}
	k.kill()
	var ws unix.WaitStatus
	var ru unix.Rusage
	leader, deadline := k.leaderPid(), time.Now().Add(keeperReplyWait)
	for {
		pid, err := unix.Wait4(leader, &ws, unix.WNOHANG, &ru)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return exitStatus{}, fmt.Errorf("the keeper died, and its program could not be reaped: %w", err)
		}
		if pid == leader {
			break
		}
		if time.Now().After(deadline) {
			return exitStatus{}, fmt.Errorf("the keeper died, and its program could not be reaped within %v", keeperReplyWait)
		}
		sweepDaemon(0)
		time.Sleep(5 * time.Millisecond)
	}
	st := exitStatus{code: ws.ExitStatus(), cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	if ws.Signaled() {
		st.code, st.signal = -1, unix.SignalName(ws.Signal())
	}
	return st, nil
}

// signal has the keeper signal every process of the run outside group
// pgid (0: all).
func (k *keeper) signal(pgid int, sig syscall.Signal) {
	_ = k.send([]byte(fmt.Sprintf("S%d %d", int(sig), pgid)), nil)
}

// end has the keeper end the run within d, and returns whether nothing is
// left, the run's CPU time, and whether the keeper died without ending it
// (then what was in its subtree is the daemon's).
//
// A keeper that dies or does not answer in time is killed: its CPU, as
// wait4 reports it for the keeper and everything it reaped, less what it
// reported for earlier runs and its own CPU as this run began, is the run's.
func (k *keeper) end(d time.Duration) (ok bool, cpu time.Duration, died bool) {
	if err := k.send([]byte("E"+strconv.FormatInt(d.Milliseconds(), 10)), nil); err == nil {
		if m, got := k.reply(d + keeperReplyWait); got {
			var flag, reuse int
			var ns int64
			if _, err := fmt.Sscanf(m, "e%d %d %d", &flag, &ns, &reuse); err == nil {
				k.charged += time.Duration(ns)
				k.reusable = reuse == 1
				return flag == 1, time.Duration(ns), false
			}
		}
	}
	k.kill()
	if k.state != nil {
		cpu = max(0, k.state.UserTime()+k.state.SystemTime()-k.charged-k.own)
	}
	return false, cpu, true
}

// close lets the keeper go: seeing its socket close it ends its run, if
// one is left, and exits. It is reaped in the background.
func (k *keeper) close() { _ = k.conn.Close() }

// Keepers that ended their run cleanly wait, a few per State, for the next:
// a run then costs no process start (a Go program's start is several
// milliseconds of CPU). An idle keeper holds the State's lock as a busy one
// does, and exits when the daemon dies.
const keepersIdleMax = 2

var keeperPool = struct {
	mu   sync.Mutex
	idle map[*State][]*keeper
}{idle: map[*State][]*keeper{}}

// takeKeeper returns an idle keeper of s that still lives, or starts one.
func takeKeeper(s *State) (*keeper, error) {
	keeperPool.mu.Lock()
	for len(keeperPool.idle[s]) > 0 {
		l := keeperPool.idle[s]
		k := l[len(l)-1]
		keeperPool.idle[s] = l[:len(l)-1]
		select {
		case <-k.gone:
			k.close()
			continue
		default:
		}
		keeperPool.mu.Unlock()
		return k, nil
	}
	keeperPool.mu.Unlock()
	return startKeeper(s)
}

// giveBack puts a keeper whose run ended cleanly back in s's pool, or lets
// it go when the pool is full.
func giveBack(s *State, k *keeper) {
	keeperPool.mu.Lock()
	if s == nil || s.closed || len(keeperPool.idle[s]) >= keepersIdleMax {
		keeperPool.mu.Unlock()
		k.close()
		return
	}
	keeperPool.idle[s] = append(keeperPool.idle[s], k)
	keeperPool.mu.Unlock()
}

// dropKeepers lets go of s's idle keepers (the State closes).
func dropKeepers(s *State) {
	keeperPool.mu.Lock()
	l := keeperPool.idle[s]
	delete(keeperPool.idle, s)
	s.closed = true
	keeperPool.mu.Unlock()
	for _, k := range l {
		k.close()
	}
}
