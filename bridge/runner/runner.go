package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults for the zero values of [Spec.Grace] and [Spec.MaxOutput].
const (
	DefaultGrace     = 5 * time.Second
	DefaultMaxOutput = 1 << 20
)

// deathWait is how long a keeper's run's processes, every one sent
// SIGKILL, are given to die before its outcome is returned anyway, with a
// note. It is not the grace: SIGKILL cannot be caught, but each death
// takes a scheduler slot, and the thousands of processes a hostile op can
// leave took a loaded two-core machine more than a second (an answer
// written while they lived would say the op was over when it was not). The
// wait ends as soon as none is left. The cgroup mode keeps the grace bound
// (hold.await).
const deathWait = 30 * time.Second

// Stream numbers passed to [Spec.OnOutput]: the child's file descriptors.
const (
	StreamStdout = 1
	StreamStderr = 2
)

// Spec is one already-validated, already-rendered invocation.
type Spec struct {
	// Argv is the program and its arguments, passed to execve as they are:
	// no shell, no expansion. An Argv[0] without a slash is looked up in the
	// PATH of Env (never the daemon's PATH); a relative one with a slash is
	// taken relative to Dir.
	Argv []string
	// Dir is the working directory: absolute, existing, a directory.
	Dir string
	// Env is the complete environment as "K=V" entries: the child gets exactly
	// this and inherits nothing. Entries must have a non-empty key; a key may
	// appear once.
	Env []string
	// Stdin is copied to the child's standard input; nil means /dev/null.
	// Run does not wait for a Stdin whose Read blocks after the child exits.
	Stdin io.Reader
	// Timeout starts the signal ladder this long after the start; 0 means
	// no timeout (ctx can still cancel).
	Timeout time.Duration
	// MaxOutput caps what is kept of each of stdout and stderr; 0 means
	// DefaultMaxOutput.
	MaxOutput int64
	// Limits are resource limits applied before the program starts.
	Limits Limits
	// Grace is the wait between the steps of the signal ladder, and after the
	// leader's exit for its output pipes to close; 0 means DefaultGrace.
	Grace time.Duration
	// Spool, if set, is a directory where a captured stream of more than
	// 64 KiB is kept instead of memory, in an unlinked file: such an
	// Output is then read with Reader and Len (Data is nil), and released
	// with Close. A run's memory is then constant in MaxOutput. If no file
	// can be made there, the output is kept in memory and a Note says why.
	Spool string
	// OnOutput, if set, sees every byte the child writes, as it arrives, whether
	// kept or dropped by the cap. It is called from the goroutines reading the
	// pipes, never concurrently with itself; p is reused after it returns. It
	// must not block long: while it runs the pipe is not drained.
	OnOutput func(stream int, p []byte)
}

// Limits are resource limits for the child (setrlimit); 0 leaves one unset.
// Each is set as both the soft and the hard limit (CPUSeconds gets a hard
// limit one second above, so SIGXCPU comes before SIGKILL), never above the
// daemon's own hard limit.
type Limits struct {
	CPUSeconds   uint64 // RLIMIT_CPU, seconds of user+system time
	AddressSpace uint64 // RLIMIT_AS, bytes of virtual memory
	OpenFiles    uint64 // RLIMIT_NOFILE, highest file descriptor + 1
	Processes    uint64 // RLIMIT_NPROC: processes and threads of the whole real user id, not of this tree
	FileSize     uint64 // RLIMIT_FSIZE, bytes of the largest file written
}

// Outcome is what became of a Spec. Run always returns one.
type Outcome struct {
	// ExitCode is the program's exit status; -1 if it was killed by a signal
	// or never started.
	ExitCode int
	// Signal names the signal that terminated the program ("SIGKILL"), if any.
	Signal string
	// TimedOut and Cancelled tell why the signal ladder was started; at most
	// one is set, the first cause wins. The program may still have exited on
	// its own terms (ExitCode 0 after SIGINT, say). Cancelled is set too when
	// the program ended while its run was cancelled before the ladder's
	// first step (killed at once by KillAll, or ending on its own then).
	TimedOut, Cancelled bool
	// StartErr says why the program was not started: a bad Spec, an
	// executable not found ([exec.ErrNotFound]), a failed execve or setrlimit,
	// or ctx done before the start (then Cancelled is set too).
	StartErr error
	// Stdout and Stderr are the captured streams.
	Stdout, Stderr Output
	// Started and Finished bracket the run; Started is zero if it never started.
	Started, Finished time.Time
	// CPU is the user+system time of every process of the run where a
	// containment counts them (its cgroup's cpu.stat, or what its keeper
	// reaped), else of the program and the descendants it waited for
	// (rusage).
	CPU time.Duration
	// Notes are things the runner could not do or enforce on this platform or
	// this run (limits unsupported, pipes held open outside the group).
	Notes []string
}

// Output is one captured stream.
type Output struct {
	// Data is the whole stream, or, when Truncated, its head and tail around
	// a marker line "\n[... N bytes omitted by bridge ...]\n".
	Data []byte
	// Total counts every byte the stream produced, kept or not.
	Total int64
	// Truncated is set when Total exceeded the cap.
	Truncated bool

	// A spooled Output (Spec.Spool) keeps its bytes in an unlinked file:
	// Data is nil, and Reader and Len give them.
	spooled bool
	parts   []io.ReaderAt
	sizes   []int64
	file    *os.File
}

// Run runs s to completion and reports the outcome. Cancelling ctx is a
// cancel request: it starts the signal ladder, it does not abandon the child.
// Run returns only once the program has exited, its process group has been
// killed and its output has been read.
//
// A daemon runs its ops through a [State] instead ([State.Run]), so that
// what a crash leaves of them is found and ended at its next start.
func Run(ctx context.Context, s Spec) *Outcome { return run(ctx, s, nil) }

// ErrMayHaveStarted is in an Outcome's StartErr when the runner cannot
// tell whether the program started (its keeper was killed or stopped
// while it started it): unlike another StartErr, the program may have run.
var ErrMayHaveStarted = errors.New("the program may have started")

// exitStatus is what became of the leader, once reaped.
type exitStatus struct {
	code   int
	signal string
	cpu    time.Duration // its own and that of the children it waited for
}

func run(ctx context.Context, s Spec, st *State) *Outcome {
	o := &Outcome{ExitCode: -1}
	path, err := check(s)
	if err != nil {
		o.StartErr = err
		return o
	}
	// Read before the cancel is checked: a KillAll from here on (which a
	// daemon's second signal makes right after its cancel) is one the
	// launch below may have missed.
	epoch := live.epoch()
	if err := ctx.Err(); err != nil {
		o.Cancelled = true
		o.StartErr = fmt.Errorf("not started: %w", err)
		return o
	}
	execute(ctx, s, path, o, st, epoch)
	return o
}

// check validates s and returns the path of the program to execute.
func check(s Spec) (string, error) {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return "", fmt.Errorf("empty argv")
	}
	if s.Timeout < 0 || s.MaxOutput < 0 || s.Grace < 0 {
		return "", fmt.Errorf("negative timeout, output cap or grace")
	}
	if s.Dir == "" || !filepath.IsAbs(s.Dir) {
		return "", fmt.Errorf("working directory %q: not an absolute path", s.Dir)
	}
	fi, err := os.Stat(s.Dir)
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("working directory %s: not a directory", s.Dir)
	}
	pathList, hasPath := "", false
	seen := make(map[string]bool, len(s.Env))
	for i, kv := range s.Env {
		k, v, ok := strings.Cut(kv, "=")
		// The value is never quoted in an error: it may be a secret.
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return "", fmt.Errorf("environment entry %d: not K=V", i)
		}
		if seen[k] {
			return "", fmt.Errorf("environment entry %d: duplicate key %q", i, k)
		}
		seen[k] = true
		if k == "PATH" {
			pathList, hasPath = v, true
		}
	}
	name := s.Argv[0]
	var path string
	switch {
	case filepath.IsAbs(name):
		path = name
	case strings.ContainsRune(name, filepath.Separator) || strings.ContainsRune(name, '/'):
		path = filepath.Join(s.Dir, name)
	case !hasPath:
		return "", fmt.Errorf("find %q: no PATH in the environment and not an absolute path: %w", name, exec.ErrNotFound)
	default:
		return lookPath(name, pathList)
	}
	fi, err = os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("find %q: %w", name, err)
	}
	if !isExecutable(fi) {
		return "", &fs.PathError{Op: "exec", Path: path, Err: fs.ErrPermission}
	}
	return path, nil
}

// lookPath finds name in the directories of pathList, the PATH of the child's
// environment. Relative and empty entries are skipped: they would resolve
// against the working directory, which an operation may be able to write
// (the reason for os/exec's ErrDot).
func lookPath(name, pathList string) (string, error) {
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && isExecutable(fi) {
			return p, nil
		}
	}
	return "", fmt.Errorf("find %q in the PATH of the environment: %w", name, exec.ErrNotFound)
}

// execute starts the checked Spec and supervises it to the end.
func execute(ctx context.Context, s Spec, path string, o *Outcome, state *State, epoch uint64) {
	grace := s.Grace
	if grace == 0 {
		grace = DefaultGrace
	}
	keep := s.MaxOutput
	if keep == 0 {
		keep = DefaultMaxOutput
	}

	// childEnds are handed to the child and closed here once it has started,
	// so that EOF on a pipe means every process holding it is gone. ours are
	// closed when Run returns (a second Close is harmless).
	var childEnds, ours []*os.File
	defer func() { closeAll(childEnds); closeAll(ours) }()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			ours, childEnds = append(ours, r), append(childEnds, w)
		}
		return r, w, err
	}

	var stdin, stdinW *os.File
	var err error
	if s.Stdin == nil {
		// One /dev/null for every run: the child gets a copy of it.
		stdin, err = devNull()
	} else {
		stdin, stdinW, err = os.Pipe()
		if err == nil {
			childEnds, ours = append(childEnds, stdin), append(ours, stdinW)
		}
	}
	if err != nil {
		o.StartErr = fmt.Errorf("stdin: %w", err)
		return
	}
	outR, outW, err := pipe()
	if err != nil {
		o.StartErr = fmt.Errorf("stdout pipe: %w", err)
		return
	}
	errR, errW, err := pipe()
	if err != nil {
		o.StartErr = fmt.Errorf("stderr pipe: %w", err)
		return
	}
	files := []*os.File{stdin, outW, errW}

	exe, argv := path, s.Argv
	var statusR *os.File
	if s.Limits != (Limits{}) {
		shim, note := shimExecutable()
		if shim == "" {
			o.Notes = append(o.Notes, note)
		} else {
			r, w, err := pipe()
			if err != nil {
				o.StartErr = fmt.Errorf("shim status pipe: %w", err)
				return
			}
			statusR = r
			files = append(files, w) // fd 3 in the shim, see shimStatusFD
			exe, argv = shim, shimArgv(shim, s.Limits, path, s.Argv)
		}
	}
	env := s.Env
	if env == nil {
		env = []string{} // nil would mean "inherit" to os.StartProcess
	}

	// The containment holds every process of the run, including those that
	// leave the process group (setsid, double fork): see doc.go.
	h, notes := newHold(state)
	defer h.release()
	o.Notes = append(o.Notes, notes...)
	l, err := launch(exe, argv, &os.ProcAttr{Dir: s.Dir, Env: env, Files: files}, h)
	closeAll(childEnds)
	if err != nil {
		o.StartErr = fmt.Errorf("start %s: %w", path, err)
		return
	}
	live.add(l, h)
	defer live.remove(l)
	killedAtLaunch := false
	if live.killedSince(epoch) && ctx.Err() != nil {
		// A KillAll ran while it was launched, after its run was
		// cancelled (a daemon's second signal): it was not in live yet,
		// and nothing else would end it where no keeper or cgroup does
		// (red team of 4677449). Killed now, as KillAll would have. A
		// cancel alone is left to supervise's ladder (red team of c938015).
		_ = signalGroup(l, syscall.SIGKILL)
		h.kill()
		killedAtLaunch = true
	}
	if statusR != nil {
		// The shim is our own code: it either execs (status "R", then EOF
		// from close-on-exec) or reports why not and exits, promptly.
		status, rerr := io.ReadAll(statusR)
		if err := parseShimStatus(status); err != nil || rerr != nil {
			if err == nil {
				err = fmt.Errorf("read shim status: %w", rerr)
			}
			_ = signalGroup(l, syscall.SIGKILL)
			<-l.exited
			live.reaping(l)
			if _, err := l.reap(); err == nil {
				h.reaped(l.pid)
			}
			h.await(deathWait, max(grace, time.Second))
			o.StartErr = fmt.Errorf("start %s: %w", path, err)
			if killedAtLaunch || (len(status) == 0 && rerr == nil && ctx.Err() != nil) {
				// The shim died before it could say, its run cancelled:
				// killed at registration, or by a KillAll that found it
				// registered (a second signal). The program never ran,
				// and not for want of runner.Main (red team of 38665c6).
				o.Cancelled = true
				o.StartErr = fmt.Errorf("not started: %w (killed as it was launched)", ctx.Err())
			}
			return
		}
	}
	o.Started = time.Now()
	o.Notes = append(o.Notes, supervisionNotes()...)
	o.Notes = append(o.Notes, h.notes()...)

	var tapMu sync.Mutex
	tap := func(stream int, p []byte) {
		if s.OnOutput != nil {
			tapMu.Lock()
			defer tapMu.Unlock()
			s.OnOutput(stream, p)
		}
	}
	stdoutCap, stderrCap := newCapture(keep), newCapture(keep)
	if s.Spool != "" {
		stdoutCap, stderrCap = newSpooledCapture(keep, s.Spool, spoolAbove), newSpooledCapture(keep, s.Spool, spoolAbove)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go pump(&wg, outR, stdoutCap, StreamStdout, tap)
	go pump(&wg, errR, stderrCap, StreamStderr, tap)
	pumped := make(chan struct{})
	go func() { wg.Wait(); close(pumped) }()
	if stdinW != nil {
		go func() {
			// Errors end the copy: EPIPE when the child stops reading, or
			// ErrClosed once Run returns.
			_, _ = io.Copy(stdinW, s.Stdin)
			_ = stdinW.Close()
		}()
	}

	supervise(ctx, s.Timeout, grace, l, h, o)

	// The leader has exited. Whatever is left in its group or its
	// containment is a straggler (say "sleep 1000 &", or a daemon that
	// called setsid): give the pipes a grace period to close on their own,
	// then kill them all and wait for them to die. If the pipes are still
	// open then, a process out of reach (setsid where there is no
	// containment) holds them: stop reading rather than wait for it.
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-pumped:
	case <-t.C:
	}
	_ = signalGroup(l, syscall.SIGKILL)
	// Reap the leader only now: until this point its zombie kept the group
	// id from being reused while the group was signalled. Reaping it first
	// also lets the wait below see an empty group with one kill(-pgid, 0)
	// in the common case, instead of scanning /proc past the leader's
	// zombie after every op.
	live.reaping(l)
	st, werr := l.reap()
	if werr == nil {
		h.reaped(l.pid)
	}
	o.Finished = time.Now()
	// SIGKILL cannot be caught, but dying takes a scheduler slot; on a loaded
	// machine that can exceed a short Grace. A containment holds the group
	// too: its await covers it.
	if !h.contained() && !awaitGroupGone(l, max(grace, time.Second)) {
		o.Notes = append(o.Notes, "process group still alive after SIGKILL")
	}
	// Then the rest of the containment (h.await kills it first).
	if !h.await(deathWait, max(grace, time.Second)) {
		o.Notes = append(o.Notes, "processes of the op still alive after SIGKILL")
	}
	select {
	case <-pumped:
	default:
		t.Reset(grace)
		select {
		case <-pumped:
		case <-t.C:
			o.Notes = append(o.Notes, "output pipes still open after the process group was killed (a process left the group): stopped reading")
			now := time.Now()
			_ = outR.SetReadDeadline(now)
			_ = errR.SetReadDeadline(now)
			<-pumped
		}
	}

	if werr != nil {
		o.Notes = append(o.Notes, fmt.Sprintf("wait: %v", werr))
	} else {
		o.ExitCode, o.Signal, o.CPU = st.code, st.signal, st.cpu
	}
	// The whole run's CPU, where the containment knows it: every process
	// of it, not only those the program waited for.
	o.CPU = max(o.CPU, h.cpu)
	o.Stdout, o.Stderr = stdoutCap.output(), stderrCap.output()
	for _, c := range []*capture{stdoutCap, stderrCap} {
		if c.spillErr != nil {
			o.Notes = append(o.Notes, fmt.Sprintf("output kept in memory: %v", c.spillErr))
		}
		if c.err != nil {
			o.Notes = append(o.Notes, fmt.Sprintf("output spool: %v (the output kept is incomplete)", c.err))
		}
	}
}

// devNull is /dev/null, opened once for the life of the process.
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// supervise waits for the leader to exit, climbing the signal ladder on the
// process group and the rest of the containment once the timeout expires or
// ctx is done.
func supervise(ctx context.Context, timeout, grace time.Duration, l *leader, h *hold, o *Outcome) {
	var timeoutC <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	step := time.NewTimer(grace)
	step.Stop()
	defer step.Stop()
	var stepC <-chan time.Time
	next := 0
	climb := func() {
		_ = signalGroup(l, ladder[next])
		h.signal(l.pid, ladder[next])
		next++
		if next < len(ladder) {
			step.Reset(grace)
			stepC = step.C
		} else {
			stepC = nil
		}
	}
	done := ctx.Done()
	for {
		select {
		case <-l.exited:
			if next == 0 && ctx.Err() != nil {
				// It ended while its run was cancelled, before the ladder's
				// first step: killed at once (KillAll, or above), or ending
				// on its own at that moment. Either way the caller cancelled
				// it, and must not read its end as an exit of its own.
				o.Cancelled = true
			}
			return
		case <-done:
			done = nil
			if next == 0 {
				o.Cancelled = true
				climb()
			}
		case <-timeoutC:
			timeoutC = nil
			if next == 0 {
				o.TimedOut = true
				climb()
			}
		case <-stepC:
			climb()
		}
	}
}

// pump reads r to EOF (or to an error such as an expired deadline) into c.
func pump(wg *sync.WaitGroup, r *os.File, c *capture, stream int, tap func(int, []byte)) {
	defer wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.write(buf[:n])
			tap(stream, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// live are the leaders of the process groups Run supervises now, and their
// containments, for KillAll.
var live = &leaders{m: map[*leader]*hold{}, reaped: map[*leader]bool{}}

type leaders struct {
	mu    sync.Mutex
	m     map[*leader]*hold
	kills uint64 // KillAll calls so far
	// reaped holds the leaders about to be reaped or reaped: their pid, so
	// their group's id, may belong to a stranger's group from then on, and
	// KillAll must not signal it (their containment it still kills).
	reaped map[*leader]bool
}

// reaping marks l as about to be reaped. Under the lock KillAll holds: a
// KillAll either signals the group before this, while the leader's zombie
// still holds its id, or sees the mark.
func (ls *leaders) reaping(l *leader) {
	ls.mu.Lock()
	ls.reaped[l] = true
	ls.mu.Unlock()
}

// epoch is how many KillAll calls have run.
func (ls *leaders) epoch() uint64 {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.kills
}

// killedSince reports whether a KillAll ran after epoch was read.
func (ls *leaders) killedSince(epoch uint64) bool { return ls.epoch() != epoch }

func (ls *leaders) add(l *leader, h *hold) {
	ls.mu.Lock()
	ls.m[l] = h
	ls.mu.Unlock()
}

func (ls *leaders) remove(l *leader) {
	ls.mu.Lock()
	delete(ls.m, l)
	delete(ls.reaped, l)
	ls.mu.Unlock()
}

// KillAll sends SIGKILL to the process group and the containment of every
// program Run is running now, and returns how many. It is for a process
// about to exit at once (a daemon's second signal): without it the
// programs, in process groups of their own, would go on running after it.
// The Run calls return as their programs die.
func KillAll() int {
	live.mu.Lock()
	defer live.mu.Unlock()
	live.kills++
	for l, h := range live.m {
		if !live.reaped[l] {
			_ = signalGroup(l, syscall.SIGKILL)
		}
		h.kill()
	}
	return len(live.m)
}
