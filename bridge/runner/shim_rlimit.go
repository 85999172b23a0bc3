//go:build linux || darwin

package runner

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// shimMain is the body of the shim; args follow the shim marker.
func shimMain(args []string) {
	unix.CloseOnExec(shimStatusFD)
	fail := func(buf []byte, what string, err error) {
		errno := syscall.EINVAL
		if e, ok := errors.AsType[syscall.Errno](err); ok {
			errno = e
		}
		writeStatus(appendShimError(buf[:0], what, errno))
		os.Exit(127)
	}
	if len(args) < 3 {
		fail(nil, "shim arguments", syscall.EINVAL)
	}
	lim, err := decodeLimits(args[0])
	if err != nil {
		fail(nil, "shim arguments", syscall.EINVAL)
	}
	path := args[1]
	what := "exec " + path
	buf := make([]byte, 0, len(what)+32)
	x, err := prepareExec(path, args[2:], os.Environ())
	if err != nil {
		fail(buf, what, err)
	}
	ready := []byte{'R'}
	quiesce()
	if name, err := applyLimits(lim); err != nil {
		fail(buf, "setrlimit "+name, err)
	}
	writeStatus(ready)
	fail(buf, what, x.exec())
}

// quiesce keeps the shim from mapping memory once its limits are set. A Go
// process has reserved more address space than an op's limit may allow (a
// hello world 1.2 GB on linux/amd64): under a lower RLIMIT_AS every new
// mapping fails, and a goroutine that needed one killed the shim before its
// execve ("fatal error: runtime: cannot allocate memory"): an op that never
// ran, answered as one that exited 2 (7 runs in 300 of TestLimitsReachChild).
// What allocated were the goroutines that package initialisation starts
// (notify's), at their first run. So: no collection from here on, one P,
// and those goroutines run until they park before the limits are set; the
// shim itself allocates nothing after it (its buffers are made before), and
// its writes to the status pipe do not enter the scheduler (writeStatus): a
// write that stalled would let the runtime hand the one P to another thread,
// which it may have to create, and under RLIMIT_NPROC that fails as surely
// ("pthread_create failed", 3 runs in 7,200 in a red team's test as another
// user under Processes = 1, under load).
func quiesce() {
	debug.SetGCPercent(-1)
	runtime.GOMAXPROCS(1)
	for range 4 {
		runtime.Gosched()
	}
}

// applyLimits sets each non-zero limit as soft and hard limit, clamped to the
// current hard limit (a tighter limit already in force satisfies "at most").
// RLIMIT_CPU gets a hard limit one second above the soft one, so the program
// first receives SIGXCPU, which it may catch to report, then SIGKILL.
func applyLimits(l Limits) (string, error) {
	for _, r := range []struct {
		name  string
		res   int
		v     uint64
		extra uint64
	}{
		{"RLIMIT_CPU", unix.RLIMIT_CPU, l.CPUSeconds, 1},
		{"RLIMIT_AS", unix.RLIMIT_AS, l.AddressSpace, 0},
		{"RLIMIT_NOFILE", unix.RLIMIT_NOFILE, l.OpenFiles, 0},
		{"RLIMIT_NPROC", unix.RLIMIT_NPROC, l.Processes, 0},
		{"RLIMIT_FSIZE", unix.RLIMIT_FSIZE, l.FileSize, 0},
	} {
		if r.v == 0 {
			continue
		}
		var cur unix.Rlimit
		if err := unix.Getrlimit(r.res, &cur); err != nil {
			return r.name, err
		}
		hard := r.v + r.extra
		if hard < r.v {
			hard = r.v // overflow
		}
		want := unix.Rlimit{Cur: min(r.v, cur.Max), Max: min(hard, cur.Max)}
		if err := unix.Setrlimit(r.res, &want); err != nil {
			return r.name, err
		}
	}
	return "", nil
}

func decodeLimits(s string) (Limits, error) {
	f := strings.Split(s, ",")
	if len(f) != 5 {
		return Limits{}, fmt.Errorf("limits %q: want 5 fields", s)
	}
	var v [5]uint64
	for i := range f {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return Limits{}, fmt.Errorf("limits %q: %w", s, err)
		}
		v[i] = n
	}
	return Limits{CPUSeconds: v[0], AddressSpace: v[1], OpenFiles: v[2], Processes: v[3], FileSize: v[4]}, nil
}

// appendShimError formats a failure report into buf, which the shim
// allocates before it sets RLIMIT_AS so that reporting a failed execve needs
// no allocation.
func appendShimError(buf []byte, what string, errno syscall.Errno) []byte {
	buf = append(buf, 'E')
	buf = strconv.AppendUint(buf, uint64(errno), 10)
	buf = append(buf, ' ')
	return append(buf, what...)
}
