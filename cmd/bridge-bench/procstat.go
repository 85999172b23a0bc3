//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// procSample is what the harness reads of another process: the rows of
// the idle and burst sections compare the daemon and the baseline worker
// by these, read the same way for both.
type procSample struct {
	cpu      time.Duration // the process's own CPU, all its threads (ns precision)
	children time.Duration // CPU of its children it waited for (cutime+cstime, clock ticks)
	wakeups  int64         // voluntary + nonvoluntary context switches, summed over its threads
	rssKB    int64         // VmRSS
}

// sampleProc reads pid's counters. The CPU is the process's CPU-time clock
// (clock_gettime on the clock id of pid), which counts every thread,
// exited ones too, in nanoseconds: /proc/PID/stat counts in 10 ms ticks,
// too coarse for an idle process over a few seconds. The children's CPU
// has only ticks (/proc/PID/stat cutime and cstime).
func sampleProc(pid int) (procSample, error) {
	var s procSample
	var ts unix.Timespec
	// The CPU-time clock of a process: ^pid << 3 | CPUCLOCK_SCHED (2).
	if err := unix.ClockGettime(int32(^pid<<3|2), &ts); err != nil {
		return s, err
	}
	s.cpu = time.Duration(ts.Nano())
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return s, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, cutime 16, cstime 17.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) > 14 {
		cu, _ := strconv.ParseInt(f[13], 10, 64)
		cs, _ := strconv.ParseInt(f[14], 10, 64)
		s.children = time.Duration(cu+cs) * time.Second / 100 // USER_HZ is 100 on Linux
	}
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
	for _, t := range tasks {
		s.wakeups += statusField(t, "voluntary_ctxt_switches") + statusField(t, "nonvoluntary_ctxt_switches")
	}
	s.rssKB = statusField("/proc/"+strconv.Itoa(pid)+"/status", "VmRSS")
	return s, nil
}

// statusField returns a numeric field of a /proc status file (kB dropped).
func statusField(file, field string) int64 {
	data, _ := os.ReadFile(file)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// idleStats is a process watched while idle over a window.
type idleStats struct {
	window        time.Duration
	cpuRate       time.Duration // CPU per second of the window
	wakeupsPerSec float64
	rssKB         int64
}

// watchIdle samples pid at the start and the end of window.
func watchIdle(pid int, window time.Duration) (idleStats, error) {
	a, err := sampleProc(pid)
	if err != nil {
		return idleStats{}, err
	}
	start := time.Now()
	time.Sleep(window)
	b, err := sampleProc(pid)
	if err != nil {
		return idleStats{}, err
	}
	w := time.Since(start)
	return idleStats{
		window:        w,
		cpuRate:       time.Duration(float64(b.cpu+b.children-a.cpu-a.children) / w.Seconds()),
		wakeupsPerSec: float64(b.wakeups-a.wakeups) / w.Seconds(),
		rssKB:         b.rssKB,
	}, nil
}

// awaitNap waits, for at most max, until the daemon pid holds one
// descriptor of its ledger file db: buntdb's is closed once the ledger naps
// (bridge/ledger, "Napping"), and an idle daemon's steady state begins. It
// returns how long it waited, or max.
func awaitNap(pid int, db string, max time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < max {
		n := 0
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if target, err := os.Readlink(fd); err == nil && target == db {
				n++
			}
		}
		if n == 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

func (s idleStats) String() string {
	return strconv.FormatFloat(float64(s.cpuRate)/1e6, 'f', 2, 64) + " ms/s CPU, " +
		strconv.FormatFloat(s.wakeupsPerSec, 'f', 1, 64) + " wake-ups/s, " +
		strconv.FormatFloat(float64(s.rssKB)/1024, 'f', 1, 64) + " MiB RSS"
}

// selfChildrenCPU is the CPU of the processes this harness reaped
// (RUSAGE_CHILDREN), and selfCPU its own.
func selfChildrenCPU() time.Duration { return rusage(unix.RUSAGE_CHILDREN) }
func selfCPU() time.Duration         { return rusage(unix.RUSAGE_SELF) }

func rusage(who int) time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(who, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
