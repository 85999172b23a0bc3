//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/trust"
)

// The cost budget (issue 25): what one round trip costs, counted, not
// timed, checked against fixtures/budget.txt. A change that raises a
// count, or lowers one, fails here until the file says so: every change in
// cost is a reviewed line in a diff.
//
// The syscalls are counted with strace on the real binary, built from this
// tree: `bridge serve` (every thread, and the ops it starts) and the client
// (`bridge run`, or the library in a child process), each over one round
// trip, the least of five after a warm-up (a periodic job, such as a
// rescan, may fall in one of them). Heap allocations are counted in this
// process, daemon and client in it. The idle daemon's wake-ups are the
// context switches of its threads over ten seconds, scaled to a minute,
// against a ceiling rather than a count.
//
// BRIDGE_BUDGET_WRITE=1 writes the file from what was measured instead.

const budgetFile = "../../fixtures/budget.txt"

// budgetMetrics are the counts per round trip, per process side.
var budgetMetrics = []string{"fsyncs", "created", "renames", "unlinks", "listings", "opens", "proc-reads", "thread-lists", "processes", "execs", "written-bytes"}

// taskChildren matches the open of a thread's list of children,
// /proc/self/task/TID/children.
var taskChildren = regexp.MustCompile(`"/proc/(self|[0-9]+)/task/[0-9]+/children"`)

func TestCostBudget(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		if os.Getenv("BRIDGE_REQUIRE_STRACE") == "1" {
			t.Fatal("strace is not installed")
		}
		t.Skip("strace is not installed: the cost budget is not checked")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	got := map[string]int64{}
	w := newBudgetWorld(t)
	w.syscalls(t, strace, got)
	w.allocs(t, got)
	w.idle(t, got)

	if os.Getenv("BRIDGE_BUDGET_WRITE") == "1" {
		writeBudget(t, got)
		return
	}
	want := readBudget(t)
	var problems []string
	for _, k := range slices.Sorted(keys(got)) {
		limit, ok := want[k]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s = %d: not in the budget", k, got[k]))
		case strings.HasSuffix(k, " ceiling"):
			if got[k] > limit {
				problems = append(problems, fmt.Sprintf("%s = %d, over its ceiling %d", k, got[k], limit))
			}
		case got[k] != limit:
			problems = append(problems, fmt.Sprintf("%s = %d, the budget says %d", k, got[k], limit))
		}
	}
	for k := range want {
		if _, ok := got[k]; !ok && !(raceBuild && strings.HasSuffix(k, " alloc-bytes ceiling")) {
			problems = append(problems, fmt.Sprintf("%s is in the budget but was not measured", k))
		}
	}
	if len(problems) > 0 {
		t.Fatalf("the cost of a round trip changed:\n  %s\nIf the change is meant, say so in %s (BRIDGE_BUDGET_WRITE=1 go test -run TestCostBudget ./cmd/bridge/ writes it) and explain it in the commit.",
			strings.Join(problems, "\n  "), budgetFile)
	}
}

func keys(m map[string]int64) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// budgetLine matches a line of the budget file: a name, then a count.
var budgetLine = regexp.MustCompile(`^([a-z][a-z0-9 ./-]*[a-z0-9]) +([0-9]+)$`)

func readBudget(t *testing.T) map[string]int64 {
	data, err := os.ReadFile(budgetFile)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := budgetLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("%s:%d: %q is not NAME COUNT", budgetFile, i+1, line)
		}
		want[m[1]], _ = strconv.ParseInt(m[2], 10, 64)
	}
	return want
}

func writeBudget(t *testing.T, got map[string]int64) {
	var b strings.Builder
	b.WriteString(`# The cost budget of one round trip (cmd/bridge/budget_test.go, TestCostBudget):
# counts, not times. A change that moves one fails the test until this file
# moves with it, in the same commit, with the reason in its message.
#
# PATH OP SIDE METRIC COUNT: PATH is lib (the Go client in its own process)
# or run (a bridge run process); OP is ping or noop (argv = ["true"]); SIDE
# is serve (the daemon, its threads and the ops it starts) or client.
# Metrics: fsyncs (fsync, fdatasync), created (files and directories made),
# renames, unlinks, listings (getdents64 calls), opens (every open),
# proc-reads (opens under /proc but thread-lists), thread-lists (opens of a
# thread's list of children: one per daemon thread at the end of a run, and
# the main thread's as a child dies; a ceiling, 0 where none is read),
# processes (forks), execs, written-bytes.
# allocs, alloc-bytes: heap allocations of one round trip and their bytes,
# daemon and client in one process. idle wake-ups per minute: context switches of an idle daemon's
# threads. A name ending in "ceiling" is a bound set over what was measured
# (a tenth for written bytes; half for opens, listings and allocations;
# double for wake-ups, and at least 120 a minute, the goal of 2 a second),
# for counts that vary from run to run with timing; every other count must
# be met exactly.
`)
	for _, k := range slices.Sorted(keys(got)) {
		v := got[k]
		switch {
		case strings.HasPrefix(k, "idle "):
			// The runtime's own wake-ups vary with the machine's load, and
			// from the ledger's nap the count is small enough for a rescan
			// or a liveness stamp in the window to double it (24 to 66 in
			// a minute): at least issue 25's goal, 2 a second. BuntDB's
			// ticker, back, would be some 300.
			v = max(2*v, 120)
		case strings.HasSuffix(k, " thread-lists ceiling") && v == 0:
			// None read: none may be, exactly.
		case strings.HasSuffix(k, " opens ceiling"), strings.HasSuffix(k, " listings ceiling"), strings.HasSuffix(k, " allocs ceiling"), strings.HasSuffix(k, " thread-lists ceiling"),
			strings.HasSuffix(k, " alloc-bytes ceiling"):
			// With how often a wait looks, which a slower daemon (a
			// race-instrumented one) makes more.
			v += v/2 + 2
		case strings.HasSuffix(k, " ceiling"):
			v += v / 10
		}
		fmt.Fprintf(&b, "%s %d\n", k, v)
	}
	if err := os.WriteFile(budgetFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", budgetFile)
}

// budgetWorld is a host home and an agent home on one folder, and the
// bridge binary built from this tree.
type budgetWorld struct {
	dir, bin, folder, host, agent string
}

const budgetPolicy = `
[ops.noop]
argv = ["true"]

[agents.agent]
ops = ["noop"]
`

func newBudgetWorld(t *testing.T) *budgetWorld {
	w := &budgetWorld{dir: t.TempDir()}
	w.bin = filepath.Join(w.dir, "bridge")
	build := exec.Command("go", "build", "-o", w.bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	w.folder, w.host, w.agent = filepath.Join(w.dir, "folder"), filepath.Join(w.dir, "host"), filepath.Join(w.dir, "agent")
	if err := os.Mkdir(w.folder, 0o755); err != nil {
		t.Fatal(err)
	}
	w.cli(t, w.host, "init", "host", "--name", "host", "--folder", w.folder)
	w.cli(t, w.agent, "init", "agent", "--name", "agent", "--folder", w.folder)
	w.cli(t, w.agent, "pair", "--fingerprint", w.fingerprint(t, w.host))
	w.cli(t, w.host, "pair", "--fingerprint", w.fingerprint(t, w.agent))
	if err := os.WriteFile(filepath.Join(w.host, trust.PolicyName), []byte(budgetPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *budgetWorld) cli(t *testing.T, home string, args ...string) string {
	t.Helper()
	cmd := exec.Command(w.bin, append([]string{"--home", home}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+w.dir)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("bridge %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return string(out)
}

func (w *budgetWorld) fingerprint(t *testing.T, home string) string {
	var k struct {
		Fingerprint string `json:"fingerprint"`
	}
	if err := json.Unmarshal([]byte(w.cli(t, home, "keys", "show", "--json")), &k); err != nil {
		t.Fatal(err)
	}
	return k.Fingerprint
}

// traced is a process under strace, its trace written to a file.
type traced struct {
	cmd   *exec.Cmd
	trace string
}

// stop sends SIGINT to the traced process (strace's child: strace itself
// would detach and leave it running) and waits for both.
func (p *traced) stop() {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.cmd.Process.Pid, p.cmd.Process.Pid))
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGINT)
		}
	}
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		<-done
	}
}

// strace's syscalls of interest; --seccomp-bpf stops only at these.
const budgetTrace = "trace=fsync,fdatasync,open,openat,openat2,creat,mkdir,mkdirat,rename,renameat,renameat2,unlink,unlinkat,rmdir,getdents64,clone,clone3,fork,vfork,execve,write,pwrite64,writev"

func startTraced(t *testing.T, strace, trace string, env []string, argv ...string) *traced {
	args := append([]string{"-f", "-qq", "--seccomp-bpf", "-e", budgetTrace, "-o", trace, "--"}, argv...)
	cmd := exec.Command(strace, args...)
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &traced{cmd: cmd, trace: trace}
}

// syscalls measures each path's round trip under strace.
func (w *budgetWorld) syscalls(t *testing.T, strace string, got map[string]int64) {
	env := append(os.Environ(), "HOME="+w.dir)
	serveTrace := filepath.Join(w.dir, "serve.trace")
	serve := startTraced(t, strace, serveTrace, env, w.bin, "--home", w.host, "serve", "--allow-root")
	defer serve.stop()
	// The library's client: this test binary again, in a child process
	// under strace of its own, one round trip per line it reads.
	lib := exec.Command(strace, "-f", "-qq", "--seccomp-bpf", "-e", budgetTrace, "-o", filepath.Join(w.dir, "lib.trace"), "--", os.Args[0], "-test.run=^TestBudgetLibClient$")
	lib.Env = append(env, "BRIDGE_BUDGET_CLIENT="+w.agent)
	libIn, _ := lib.StdinPipe()
	libOut, _ := lib.StdoutPipe()
	if err := lib.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { libIn.Close(); lib.Wait() }()
	libLines := bufio.NewScanner(libOut)

	type path struct {
		name string
		one  func(op string) (clientTrace string)
	}
	runN := 0
	paths := []path{
		{"lib", func(op string) string {
			fmt.Fprintln(libIn, op)
			if !libLines.Scan() || !strings.HasPrefix(libLines.Text(), "ok") {
				t.Fatalf("library client: %q", libLines.Text())
			}
			return ""
		}},
		{"run", func(op string) string {
			runN++
			tr := filepath.Join(w.dir, fmt.Sprintf("run%d.trace", runN))
			p := startTraced(t, strace, tr, env, w.bin, "--home", w.agent, "run", opName(op))
			if err := p.cmd.Wait(); err != nil {
				t.Fatalf("bridge run %s: %v", op, err)
			}
			return tr
		}},
	}
	libTrace := filepath.Join(w.dir, "lib.trace")
	// Each window starts where the last ended: both traces were quiet
	// there, and nothing is asked of either process in between.
	quiet := quietTraces(serveTrace, libTrace)
	for _, p := range paths {
		for _, op := range []string{"ping", "noop"} {
			var serveBest, clientBest map[string]int64
			for i := range 6 {
				before := quiet
				clientTrace := p.one(op)
				quiet = quietTraces(serveTrace, libTrace)
				if i == 0 {
					continue // a warm-up
				}
				s := countTrace(t, serveTrace, before[0], quiet[0])
				var c map[string]int64
				if clientTrace != "" {
					c = countTrace(t, clientTrace, 0, -1)
				} else {
					c = countTrace(t, libTrace, before[1], quiet[1])
				}
				serveBest, clientBest = least(serveBest, s), least(clientBest, c)
			}
			for _, m := range budgetMetrics {
				for side, v := range map[string]int64{"serve": serveBest[m], "client": clientBest[m]} {
					name := fmt.Sprintf("%s %s %s %s", p.name, op, side, m)
					if m == "written-bytes" || m == "opens" || m == "listings" || m == "thread-lists" {
						// Bytes vary with ids and times; opens and listings
						// with how the watcher's events fall (one batch or
						// two) and how often a wait looks: ceilings.
						name += " ceiling"
					}
					got[name] = v
				}
			}
		}
	}
}

func opName(op string) string {
	if op == "ping" {
		return bridge.PingOp
	}
	return op
}

func least(best, m map[string]int64) map[string]int64 {
	if best == nil {
		return m
	}
	for k, v := range m {
		if v < best[k] {
			best[k] = v
		}
	}
	for k := range best {
		if _, ok := m[k]; !ok {
			best[k] = 0
		}
	}
	return best
}

// quietTraces waits until the trace files stop growing (the traced
// processes have done what the last request made them do: their private
// copies, the ledger's last state) and returns their lengths. 300 ms of no
// new line in any of them is taken for quiet: a round trip's work follows
// its answer within milliseconds, and the counts taken are the least of
// five, so a late line falls in a window that is not the least. The files
// are watched together: one after another, the waits were half of the
// test's minute.
func quietTraces(files ...string) []int64 {
	sizes := func() []int64 {
		out := make([]int64, len(files))
		for i, f := range files {
			if fi, err := os.Stat(f); err == nil {
				out[i] = fi.Size()
			}
		}
		return out
	}
	last := sizes()
	for stable := 0; stable < 3; {
		time.Sleep(100 * time.Millisecond)
		now := sizes()
		if slices.Equal(now, last) {
			stable++
		} else {
			stable, last = 0, now
		}
	}
	return last
}

// traceCall matches a line of strace -f -qq: pid, then the call, or the
// resumption of an unfinished one.
var (
	traceCall    = regexp.MustCompile(`^(\d+) +([a-z0-9_]+)\((.*)$`)
	traceResumed = regexp.MustCompile(`^(\d+) +<\.\.\. ([a-z0-9_]+) resumed>(.*)$`)
	traceResult  = regexp.MustCompile(`\) += (-?\d+)`)
)

// countTrace counts the metrics in file's bytes [from, to) (to < 0: to the
// end).
func countTrace(t *testing.T, file string, from, to int64) map[string]int64 {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if to < 0 || to > int64(len(data)) {
		to = int64(len(data))
	}
	c := map[string]int64{}
	for _, m := range budgetMetrics {
		c[m] = 0
	}
	pending := map[string]string{} // pid -> call with its arguments, unfinished
	for line := range strings.Lines(string(data[from:to])) {
		line = strings.TrimSpace(line)
		var call, args, result string
		if m := traceResumed.FindStringSubmatch(line); m != nil {
			call, args = m[2], pending[m[1]]
			delete(pending, m[1])
			result = m[3]
		} else if m := traceCall.FindStringSubmatch(line); m != nil {
			call, args = m[2], m[3]
			if strings.HasSuffix(line, "<unfinished ...>") {
				pending[m[1]] = args
				continue
			}
			result = args
		} else {
			continue
		}
		ret := int64(-1)
		if r := traceResult.FindAllStringSubmatch(result, -1); len(r) > 0 {
			ret, _ = strconv.ParseInt(r[len(r)-1][1], 10, 64)
		}
		switch call {
		case "fsync", "fdatasync":
			c["fsyncs"]++
		case "open", "openat", "openat2", "creat":
			c["opens"]++
			if strings.Contains(args, "O_CREAT") || strings.Contains(args, "O_TMPFILE") || call == "creat" {
				c["created"]++
			}
			switch {
			case taskChildren.MatchString(args):
				// One per thread of the daemon at the end of a run (the
				// sweep reads every thread's children), whose number
				// varies with the runtime: counted apart, under a ceiling,
				// so that proc-reads stays exact.
				c["thread-lists"]++
			case strings.Contains(args, `"/proc/`):
				c["proc-reads"]++
			}
		case "mkdir", "mkdirat":
			c["created"]++
		case "rename", "renameat", "renameat2":
			c["renames"]++
		case "unlink", "unlinkat", "rmdir":
			c["unlinks"]++
		case "getdents64":
			c["listings"]++
		case "clone", "clone3":
			if !strings.Contains(args, "CLONE_THREAD") {
				c["processes"]++
			}
		case "fork", "vfork":
			c["processes"]++
		case "execve":
			c["execs"]++
		case "write", "pwrite64", "writev":
			if ret > 0 {
				c["written-bytes"] += ret
			}
		}
	}
	return c
}

// TestBudgetLibClient is the library's client of TestCostBudget, run as a
// child process: one round trip per op name on its standard input.
func TestBudgetLibClient(t *testing.T) {
	home := os.Getenv("BRIDGE_BUDGET_CLIENT")
	if home == "" {
		t.Skip("run by TestCostBudget")
	}
	h, err := trust.OpenHome(home)
	if err != nil {
		t.Fatal(err)
	}
	c, err := agent.OpenClient(h)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		s, err := c.Submit(agent.SubmitOptions{Op: opName(sc.Text())})
		if err != nil {
			fmt.Println("error", err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := c.Wait(ctx, s.ID, nil)
		cancel()
		if err != nil {
			fmt.Println("error", err)
			continue
		}
		fmt.Println("ok", out.Receipt.Status)
	}
}

// allocs counts the heap allocations of one round trip of each op,
// through the library, with the daemon in this process: the least of five.
func (w *budgetWorld) allocs(t *testing.T, got map[string]int64) {
	hh, err := trust.OpenHome(w.host)
	if err != nil {
		t.Fatal(err)
	}
	// The daemon's log says "result" as the last step of a round trip (the
	// private copies kept, the ledger's final state recorded): a counted
	// event to read the count at, not a time after the agent's wait.
	done := make(chan struct{}, 8)
	d, err := host.NewDaemon(hh, host.DaemonOptions{AllowRoot: true,
		Logger: slog.New(resultHook{slog.NewTextHandler(io.Discard, nil), done})}) // what NewDaemon logs to by default, and the hook
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	defer runDaemon(d)()
	ah, err := trust.OpenHome(w.agent)
	if err != nil {
		t.Fatal(err)
	}
	c, err := agent.OpenClient(ah)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, op := range []string{"ping", "noop"} {
		best, bestBytes := int64(-1), int64(-1)
		for i := range 6 {
			for len(done) > 0 {
				<-done
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			s, err := c.Submit(agent.SubmitOptions{Op: opName(op)})
			if err != nil {
				t.Fatal(err)
			}
			wctx, stop := context.WithTimeout(context.Background(), time.Minute)
			_, err = c.Wait(wctx, s.ID, nil)
			stop()
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("the daemon never logged the round trip's result")
			}
			runtime.ReadMemStats(&after)
			if n := int64(after.Mallocs - before.Mallocs); i > 0 && (best < 0 || n < best) {
				best = n
			}
			if n := int64(after.TotalAlloc - before.TotalAlloc); i > 0 && (bestBytes < 0 || n < bestBytes) {
				bestBytes = n
			}
		}
		// They move by a few with map growth and timers: a ceiling.
		got["lib "+op+" allocs ceiling"] = best
		// Bytes: a buffer made per request where one is kept shows here (a
		// collection every few requests, BENCHMARKS.md). Not under the race
		// detector, whose sync.Pool drops a quarter of what is put back:
		// test.sh runs this test without it too.
		if !raceBuild {
			got["lib "+op+" alloc-bytes ceiling"] = bestBytes
		}
	}
}

// resultHook passes every record on, and signals done at each "result"
// line (the daemon's last step of a round trip).
type resultHook struct {
	slog.Handler
	done chan<- struct{}
}

func (h resultHook) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Message == "result" {
		select {
		case h.done <- struct{}{}:
		default:
		}
	}
	return err
}

func (h resultHook) WithAttrs(a []slog.Attr) slog.Handler {
	return resultHook{h.Handler.WithAttrs(a), h.done}
}

func (h resultHook) WithGroup(g string) slog.Handler {
	return resultHook{h.Handler.WithGroup(g), h.done}
}

// idle counts the context switches of an idle `bridge serve` over ten
// seconds, scaled to a minute, from the moment its ledger naps: buntdb's
// descriptor of ledger.db closes, the ledger's own stays (bridge/ledger,
// "Napping").
func (w *budgetWorld) idle(t *testing.T, got map[string]int64) {
	cmd := exec.Command(w.bin, "--home", w.host, "serve", "--allow-root")
	cmd.Env = append(os.Environ(), "HOME="+w.dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	db := filepath.Join(w.host, "ledger", "ledger.db")
	open := func() int {
		n := 0
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", cmd.Process.Pid))
		for _, fd := range fds {
			if target, err := os.Readlink(fd); err == nil && target == db {
				n++
			}
		}
		return n
	}
	// Two descriptors once it is open (one of them, for a moment as it
	// opens), then one.
	deadline := time.Now().Add(time.Minute)
	for seen2 := false; ; {
		n := open()
		seen2 = seen2 || n == 2
		if seen2 && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle daemon's ledger did not nap within a minute: %d descriptors of %s", open(), db)
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := switches(cmd.Process.Pid)
	time.Sleep(10 * time.Second)
	got["idle wake-ups per minute ceiling"] = (switches(cmd.Process.Pid) - before) * 6
}

func switches(pid int) int64 {
	var n int64
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, f := range tasks {
		data, _ := os.ReadFile(f)
		for line := range strings.Lines(string(data)) {
			if k, v, ok := strings.Cut(line, ":"); ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}
