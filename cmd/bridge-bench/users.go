//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/trust"
)

// The sections here measure what users do, with the real `bridge` binary:
// a `bridge serve` process, `bridge run`, `submit` and `wait` as a process
// per command, and the library (agent.Client) in this process against the
// same `serve`. Each figure stands beside the baseline's (baseline.go),
// measured in the same run.

// echoOp is the op of these sections: `echo ok`, whose output `bridge run`
// prints (the fsync section times up to that write), and the baseline's
// script does the same.
const echoOp = "echo"

// bridgePkg is the package of the bridge binary (a test points it
// elsewhere to see a failed build).
var bridgePkg = "./cmd/bridge"

// buildBridge builds the bridge binary from this module's source tree
// into dir, once per run.
func buildBridge(dir string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("find the module's source tree (run from it): %w", err)
	}
	bin := filepath.Join(dir, "bin", "bridge")
	cmd := exec.Command("go", "build", "-o", bin, bridgePkg)
	cmd.Dir = strings.TrimSpace(string(out))
	// Static, as the release archives are (release/build.sh): a build
	// linked to libc, which `go build` makes where a C compiler is, starts
	// each process about a millisecond later (docs/BENCHMARKS.md, "Session
	// 28"), and every CLI command is a process.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w: %s", bridgePkg, err, strings.TrimSpace(string(msg)))
	}
	return bin, nil
}

// serveProc is a `bridge serve` process.
type serveProc struct {
	cmd     *exec.Cmd
	pid     int
	done    chan error
	started time.Time
}

func startServe(bin, home, logFile string) (*serveProc, error) {
	lf, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--home", home, "serve", "--allow-root")
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	s := &serveProc{cmd: cmd, pid: cmd.Process.Pid, done: make(chan error, 1), started: time.Now()}
	go func() { s.done <- cmd.Wait(); lf.Close() }()
	return s, nil
}

// stop ends serve as a service manager would, with SIGTERM.
func (s *serveProc) stop() error {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		return err
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill()
		return fmt.Errorf("serve did not stop within 60 s")
	}
}

// users is the environment of these sections.
type users struct {
	c      config
	bin    string
	l      *local // the homes and the in-process client; no in-process daemon
	serve  *serveProc
	rng    *rand.Rand
	logf   string
	unack  int // requests whose results are left unacked in the folder
	prog   func(string, ...any)
	strace string // the strace binary, "" when missing
	python string // python3, for the idle baseline as the reference runs; "" when missing
}

func (u *users) startServe() error {
	s, err := startServe(u.bin, u.l.host.Dir, u.logf)
	if err != nil {
		return err
	}
	u.serve = s
	// Ready once it answers: a ping through the library.
	if _, err := roundTrip(u.l.client, bridge.PingOp); err != nil {
		u.serve.stop()
		return fmt.Errorf("serve did not answer a ping: %w (its log: %s)", err, u.logf)
	}
	u.unack++
	return nil
}

// watchServeIdle watches the idle serve from `from` after its start (at
// once if that is past) for c.serveIdleWindow, and says when the window
// began, counted from the start. A window that begins before the first
// rescan after the start holds the one rescan whose caches the start
// warmed: beside 10,000 finished requests it read a fifth of what later
// rescans cost (BENCHMARKS "Session 26"); and beside finished requests,
// the rescans of the first rotation of result checks after the start still
// check them, as after any change, where later ones pause (DESIGN
// invariant 6).
func (u *users) watchServeIdle(from time.Duration) (idleStats, time.Duration, error) {
	if d := time.Until(u.serve.started.Add(from)); d > 0 {
		time.Sleep(d)
	}
	began := time.Since(u.serve.started)
	st, err := watchIdle(u.serve.pid, u.c.serveIdleWindow)
	return st, began, err
}

// pause is the idle time before a sporadic request: uniform in
// [0, c.pause), from the seeded generator.
func (u *users) pause() time.Duration { return time.Duration(u.rng.Int64N(int64(u.c.pause))) }

// libRoundTrip is Client.Submit + Wait of the echo op.
func (u *users) libRoundTrip() (time.Duration, error) {
	start := time.Now()
	s, err := u.l.client.Submit(agent.SubmitOptions{Op: echoOp, TTL: time.Hour})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := u.l.client.Wait(ctx, s.ID, nil)
	if err != nil {
		return 0, fmt.Errorf("wait %s: %w", s.ID, err)
	}
	d := time.Since(start)
	u.unack++
	if out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != "ok\n" {
		return 0, fmt.Errorf("echo: %s (%s) %q", out.Receipt.Status, out.Receipt.Reason, out.Stdout)
	}
	return d, nil
}

// bridgeCmd runs the bridge binary with the agent's home and returns its
// standard output.
func (u *users) bridgeCmd(args ...string) (string, error) {
	cmd := exec.Command(u.bin, append([]string{"--home", u.l.agent.Dir}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("bridge %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// cliRoundTrip is one `bridge run echo` process, from its start until it
// exited.
func (u *users) cliRoundTrip() (time.Duration, error) {
	start := time.Now()
	out, err := u.bridgeCmd("run", echoOp)
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	if out != "ok\n" {
		return 0, fmt.Errorf("bridge run %s printed %q", echoOp, out)
	}
	return d, nil
}

// series runs n round trips, with a sporadic pause before each when
// sporadic, and says how far it got every 10 s.
func (u *users) series(what string, n int, sporadic bool, one func() (time.Duration, error)) ([]time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	last := time.Now()
	for i := range n {
		if sporadic {
			time.Sleep(u.pause())
		}
		d, err := one()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		ds = append(ds, d)
		if time.Since(last) > 10*time.Second {
			u.prog("  %s: %d of %d", what, i+1, n)
			last = time.Now()
		}
	}
	return ds, nil
}

// burst is the outcome of a burst: requests per second, and CPU per
// request split into the serving side and the client side.
type burst struct {
	n                 int
	wall              time.Duration
	perSec            float64
	server, client    time.Duration // per request
	serverWhat, cWhat string
}

func (b burst) cpu() time.Duration { return b.server + b.client }

func (b burst) String() string {
	return fmt.Sprintf("%.0f req/s, %s CPU/req (%s %s + %s %s)", b.perSec, ms(b.cpu()), b.serverWhat, ms(b.server), b.cWhat, ms(b.client))
}

// measureBurst times submit (all n) then collect (all n) and reads the
// CPU of the serving process pid (its own and its reaped children's), of
// this harness's reaped children (CLI processes) and, when self, of this
// process (an in-process client).
func measureBurst(n, pid int, self bool, submit func() (string, error), collect func(id string) error) (burst, error) {
	p0, err := sampleProc(pid)
	if err != nil {
		return burst{}, err
	}
	c0, s0 := selfChildrenCPU(), selfCPU()
	start := time.Now()
	ids := make([]string, 0, n)
	for range n {
		id, err := submit()
		if err != nil {
			return burst{}, err
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if err := collect(id); err != nil {
			return burst{}, err
		}
	}
	wall := time.Since(start)
	p1, err := sampleProc(pid)
	if err != nil {
		return burst{}, err
	}
	client := selfChildrenCPU() - c0
	if self {
		client += selfCPU() - s0
	}
	return burst{n: n, wall: wall, perSec: float64(n) / wall.Seconds(),
		server: (p1.cpu + p1.children - p0.cpu - p0.children) / time.Duration(n),
		client: client / time.Duration(n)}, nil
}

func (u *users) cliBurst() (burst, error) {
	b, err := measureBurst(u.c.burstN, u.serve.pid, false,
		func() (string, error) {
			out, err := u.bridgeCmd("submit", echoOp)
			return strings.TrimSpace(out), err
		},
		func(id string) error {
			out, err := u.bridgeCmd("wait", id)
			if err == nil && out != "ok\n" {
				err = fmt.Errorf("bridge wait %s printed %q", id, out)
			}
			return err
		})
	b.serverWhat, b.cWhat = "serve", "CLI"
	u.unack += u.c.burstN
	return b, err
}

func (u *users) libBurst() (burst, error) {
	b, err := measureBurst(u.c.burstN, u.serve.pid, true,
		func() (string, error) {
			s, err := u.l.client.Submit(agent.SubmitOptions{Op: echoOp, TTL: time.Hour})
			if err != nil {
				return "", err
			}
			return s.ID, nil
		},
		func(id string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			out, err := u.l.client.Wait(ctx, id, nil)
			if err == nil && string(out.Stdout) != "ok\n" {
				err = fmt.Errorf("echo %s: %s %q", id, out.Receipt.Status, out.Stdout)
			}
			return err
		})
	b.serverWhat, b.cWhat = "serve", "client"
	u.unack += u.c.burstN
	return b, err
}

func baselineBurst(root string, n, pid int) (burst, error) {
	b, err := measureBurst(n, pid, true,
		func() (string, error) { return baselineSubmit(root) },
		func(id string) error { return baselinePoll(root, id, 10*time.Millisecond, 10*time.Minute) })
	b.serverWhat, b.cWhat = "worker", "client"
	return b, err
}

// p3 formats p50, p90 and p99.
// refNote is the reference's p50 beside ours, for the "beside it" column.
func refNote(how string, ref, ours []time.Duration) string {
	if len(ref) == 0 || len(ours) == 0 {
		return ""
	}
	return fmt.Sprintf("; the reference, %s, p50 %s: %s", how, ms(pct(ref, 50)), lowerBy(pct(ref, 50), pct(ours, 50)))
}

func p3(ds []time.Duration) string {
	if len(ds) == 0 {
		return "not measured"
	}
	return fmt.Sprintf("p50 %s, p90 %s, p99 %s", ms(pct(ds, 50)), ms(pct(ds, 90)), ms(pct(ds, 99)))
}

func lower(base, ours []time.Duration) string {
	if len(base) == 0 || len(ours) == 0 {
		return "-"
	}
	return lowerBy(pct(base, 50), pct(ours, 50)) + " at p50"
}

func fratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}

// usersResults holds what the sections measured, for the table.
type usersResults struct {
	blLib, blCLI          []time.Duration // baseline sporadic: in-harness client polling 10 ms; client processes polling c.clientPoll
	blBurst               burst
	blIdle, blIdle10k     idleStats // the Go worker
	pyIdle, pyIdle10k     idleStats // the Python worker
	pyVersion, pyNote     string
	blFsync               fsyncCount
	spLib, spCLI          []time.Duration
	b2bLib, b2bCLI        []time.Duration
	b2bLibK, b2bCLIK      []time.Duration
	burstCLI, burstLib    burst
	burstCLIK, burstLK    burst
	idle, idle10k         idleStats
	idleNap, idle10kNap   time.Duration // from the start (the ping's answer) to the ledger's nap
	idleFrom, idle10kFrom time.Duration // from the start to the window's beginning
	fsRun, fsLib          fsyncCount
	fsNote                string
	noBin                 string // why the rows of the bridge binary are not measured
	ref                   refResults
}

// usersSections runs every section of this file that -skip leaves in.
func usersSections(c config, base string, progress func(string, ...any)) (*usersResults, error) {
	res := &usersResults{}
	want := func(s string) bool { return !c.skip[s] }
	if !want("baseline") && !want("sporadic") && !want("backtoback") && !want("burst") && !want("idle") && !want("fsyncs") {
		return res, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	u := &users{c: c, rng: rand.New(rand.NewPCG(c.seed, 15)), logf: filepath.Join(base, "serve.log"), prog: progress}
	u.strace, _ = exec.LookPath("strace")
	u.python, _ = exec.LookPath("python3")
	if u.python == "" {
		res.pyNote = "not measured: no `python3` in PATH"
	}

	// The baseline first, alone on the machine.
	if want("baseline") || want("burst") || want("idle") || want("fsyncs") {
		if err := u.baselineSections(base, res); err != nil {
			return nil, err
		}
	}
	if !want("sporadic") && !want("backtoback") && !want("burst") && !want("idle") && !want("fsyncs") {
		return res, nil
	}

	progress("building the bridge binary (go build %s)", bridgePkg)
	var err error
	if u.bin, err = buildBridge(base); err != nil {
		// The baseline's rows stand; those of the binary say why not.
		progress("%v; the rows of the bridge binary are not measured", err)
		res.noBin = fmt.Sprintf("not measured: `go build %s` failed", bridgePkg)
		return res, nil
	}
	if u.l, err = setupLocal(filepath.Join(base, "bridge")); err != nil {
		return nil, err
	}
	defer u.l.client.Close()
	if err := u.startServe(); err != nil {
		return nil, err
	}
	defer func() {
		if u.serve != nil {
			u.serve.stop()
		}
	}()
	settle := min(5*time.Second, c.idleWindow)
	if want("idle") {
		progress("idle serve, empty folder: %s settle, then its ledger's nap, then until %s after its start, %s window", settle, c.serveIdleFrom, c.serveIdleWindow)
		time.Sleep(settle)
		res.idleNap = settle + awaitNap(u.serve.pid, u.l.host.Path("ledger", "ledger.db"), 30*time.Second)
		if res.idle, res.idleFrom, err = u.watchServeIdle(c.serveIdleFrom); err != nil {
			return nil, err
		}
	}
	if want("sporadic") {
		progress("sporadic: %d × library, %d × `bridge run`, 0–%s pause before each", c.sporadicN, c.sporadicN, c.pause)
		if res.spLib, err = u.series("sporadic library", c.sporadicN, true, u.libRoundTrip); err != nil {
			return nil, err
		}
		if res.spCLI, err = u.series("sporadic bridge run", c.sporadicN, true, u.cliRoundTrip); err != nil {
			return nil, err
		}
	}
	if want("fsyncs") {
		if u.strace == "" {
			res.fsNote = "not measured: no `strace` in PATH"
		} else {
			progress("fsyncs: strace of serve, %d × `bridge run` and %d × the library in a child", c.fsyncN, c.fsyncN)
			if res.fsRun, err = u.fsyncRun(base); err != nil {
				return nil, err
			}
			if res.fsLib, err = u.fsyncLib(base); err != nil {
				return nil, err
			}
		}
	}
	b2b := func(lib, cli *[]time.Duration, what string) error {
		progress("back to back, %s: %d × library, %d × `bridge run`", what, c.b2bN, c.b2bN)
		if *lib, err = u.series("back to back library "+what, c.b2bN, false, u.libRoundTrip); err != nil {
			return err
		}
		*cli, err = u.series("back to back bridge run "+what, c.b2bN, false, u.cliRoundTrip)
		return err
	}
	bursts := func(cli, lib *burst, what string) error {
		progress("burst of %d, %s: `bridge submit` ×%d then `bridge wait` ×%d, one process at a time; then the library", c.burstN, what, c.burstN, c.burstN)
		if *cli, err = u.cliBurst(); err != nil {
			return err
		}
		*lib, err = u.libBurst()
		return err
	}
	if want("backtoback") {
		if err := b2b(&res.b2bLib, &res.b2bCLI, "fresh folder"); err != nil {
			return nil, err
		}
	}
	if want("burst") {
		if err := bursts(&res.burstCLI, &res.burstLib, "fresh folder"); err != nil {
			return nil, err
		}
	}
	if !want("backtoback") && !want("burst") && !want("idle") {
		return res, nil
	}

	// The same with the folder full of unacked results.
	if n := c.unackedN - u.unack; n > 0 {
		progress("filling the folder up to %d unacked results: %d more pings", c.unackedN, n)
		start := time.Now()
		if err := fill(u.l, n, 8, progress); err != nil {
			return nil, err
		}
		u.unack += n
		progress("filled %d in %s", n, time.Since(start).Round(time.Millisecond))
	}
	progress("restarting serve on %d unacked results", u.unack)
	if err := u.serve.stop(); err != nil {
		return nil, fmt.Errorf("serve stopped with %w (its log: %s)", err, u.logf)
	}
	if err := u.startServe(); err != nil {
		return nil, err
	}
	if want("idle") {
		// A longer settle: the restart's scan and first collection of the
		// full folder are start-up work, not idling.
		progress("idle serve, %d finished requests: %s settle, then its ledger's nap, then until %s after its start, %s window", u.unack, 2*settle, c.serveIdleFullFrom, c.serveIdleWindow)
		time.Sleep(2 * settle)
		res.idle10kNap = 2*settle + awaitNap(u.serve.pid, u.l.host.Path("ledger", "ledger.db"), 30*time.Second)
		if res.idle10k, res.idle10kFrom, err = u.watchServeIdle(c.serveIdleFullFrom); err != nil {
			return nil, err
		}
	}
	if want("backtoback") {
		if err := b2b(&res.b2bLibK, &res.b2bCLIK, fmt.Sprintf("%d unacked results", c.unackedN)); err != nil {
			return nil, err
		}
	}
	if want("burst") {
		if err := bursts(&res.burstCLIK, &res.burstLK, fmt.Sprintf("%d unacked results", c.unackedN)); err != nil {
			return nil, err
		}
	}
	err = u.serve.stop()
	u.serve = nil
	if err != nil {
		return nil, fmt.Errorf("serve stopped with %w (its log: %s)", err, u.logf)
	}
	return res, nil
}

// baselineSections measures the baseline: idle, sporadic, burst, fsyncs,
// and idle again beside as many finished requests as the unacked fill.
func (u *users) baselineSections(base string, res *usersResults) error {
	c := u.c
	want := func(s string) bool { return !c.skip[s] }
	root := filepath.Join(base, "baseline")
	bl, err := startBaseline(root, c.poll)
	if err != nil {
		return err
	}
	defer func() {
		if bl != nil {
			bl.stop()
		}
	}()
	settle := min(5*time.Second, c.idleWindow)
	if want("idle") {
		u.prog("baseline idle, empty queue, Go worker: %s settle, %s window", settle, c.idleWindow)
		time.Sleep(settle)
		if res.blIdle, err = watchIdle(bl.pid, c.idleWindow); err != nil {
			return err
		}
		if u.python != "" {
			u.prog("baseline idle, empty queue, Python worker: %s settle, %s window", settle, c.idleWindow)
			if res.pyIdle, res.pyVersion, err = u.pyIdle(base, filepath.Join(base, "baseline-py"), settle); err != nil {
				return err
			}
		}
	}
	if want("baseline") {
		u.prog("baseline sporadic: %d × in-harness client polling every 10 ms, %d × client processes polling every %s (worker poll %s)", c.baselineN, c.baselineN, c.clientPoll, c.poll)
		if res.blLib, err = u.series("baseline, 10 ms client", c.baselineN, true, func() (time.Duration, error) { return baselineRoundTrip(root, 10*time.Millisecond) }); err != nil {
			return err
		}
		if res.blCLI, err = u.series("baseline, client processes", c.baselineN, true, func() (time.Duration, error) { return baselineClientProcess(root, c.clientPoll) }); err != nil {
			return err
		}
	}
	if want("burst") {
		u.prog("baseline burst: %d requests into its queue at once", c.burstN)
		if res.blBurst, err = baselineBurst(root, c.burstN, bl.pid); err != nil {
			return err
		}
	}
	if want("fsyncs") && u.strace != "" {
		u.prog("baseline fsyncs: strace of the worker, %d requests", c.fsyncN)
		if res.blFsync, err = u.fsyncBaseline(base, root, bl.pid); err != nil {
			return err
		}
	}
	err = bl.stop()
	bl = nil
	if err != nil {
		return err
	}
	if want("idle") {
		root10k := filepath.Join(base, "baseline-finished")
		u.prog("baseline idle beside %d finished requests: writing them", c.unackedN)
		if err := fillBaseline(root10k, c.unackedN); err != nil {
			return err
		}
		u.prog("baseline idle beside %d finished requests, Go worker: %s settle, %s window", c.unackedN, 2*settle, c.idleWindow)
		b, err := startBaseline(root10k, c.poll)
		if err != nil {
			return err
		}
		time.Sleep(2 * settle)
		res.blIdle10k, err = watchIdle(b.pid, c.idleWindow)
		if err := errors.Join(err, b.stop()); err != nil {
			return err
		}
		if u.python != "" {
			u.prog("baseline idle beside %d finished requests, Python worker: %s settle, %s window", c.unackedN, 2*settle, c.idleWindow)
			if res.pyIdle10k, _, err = u.pyIdle(base, root10k, 2*settle); err != nil {
				return err
			}
		}
	}
	return nil
}

// pyIdle starts the Python worker on root and watches it idle after
// settle; then it checks that the worker still serves (one request, after
// the window, so not counted), so that a stuck or broken worker is an
// error rather than a quiet figure.
func (u *users) pyIdle(base, root string, settle time.Duration) (idleStats, string, error) {
	b, err := startPyBaseline(u.python, base, root, u.c.poll)
	if err != nil {
		return idleStats{}, "", fmt.Errorf("python worker: %w", err)
	}
	time.Sleep(settle)
	st, err := watchIdle(b.pid, u.c.idleWindow)
	if err == nil {
		var id string
		if id, err = baselineSubmit(root); err == nil {
			err = baselinePoll(root, id, 10*time.Millisecond, u.c.poll+time.Minute)
		}
	}
	if err := errors.Join(err, b.stop()); err != nil {
		return idleStats{}, "", fmt.Errorf("python worker: %w", err)
	}
	return st, b.version, nil
}

// libClientMain is the library's client in a process of its own, so that
// strace sees its fsyncs alone: n sporadic echo round trips against the
// agent home arg, each printed as "rt START END" (Unix ns).
func libClientMain(home string) error {
	n, _ := strconv.Atoi(os.Getenv(childNEnv))
	pause, _ := time.ParseDuration(os.Getenv(childPollEnv))
	h, err := trust.OpenHome(home)
	if err != nil {
		return err
	}
	c, err := agent.OpenClient(h)
	if err != nil {
		return err
	}
	defer c.Close()
	seed, err := strconv.ParseUint(os.Getenv(childSeedEnv), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %w", childSeedEnv, err)
	}
	rng := rand.New(rand.NewPCG(seed, 15))
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for range n {
		time.Sleep(time.Duration(rng.Int64N(int64(pause))))
		start := time.Now()
		s, err := c.Submit(agent.SubmitOptions{Op: echoOp, TTL: time.Hour})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := c.Wait(ctx, s.ID, nil)
		cancel()
		if err != nil {
			return err
		}
		end := time.Now()
		if string(out.Stdout) != "ok\n" {
			return fmt.Errorf("echo: %s %q", out.Receipt.Status, out.Stdout)
		}
		fmt.Fprintf(w, "rt %d %d\n", start.UnixNano(), end.UnixNano())
	}
	return nil
}

// rows adds the table rows of these sections (those measured).
func (res *usersResults) rows(c config, fl floor, r *report) {
	execFloor := 4*fl.publish + 2*fl.inotify + 2*fl.verify + fl.forkExec
	cliFloor := execFloor + fl.forkExec // and the client's own process
	floorNote := func(ours []time.Duration, f time.Duration) string {
		if f == 0 || len(ours) == 0 {
			return ""
		}
		return fmt.Sprintf("; floor %s: %s of it", ms(f), ratio(pct(ours, 50), f))
	}
	// nb: the section was asked for, but there is no binary to run.
	nb := func(section string) bool { return res.noBin != "" && !c.skip[section] }
	lat := func(ds []time.Duration) string {
		if len(ds) == 0 && res.noBin != "" {
			return res.noBin
		}
		return p3(ds)
	}
	if len(res.spLib) > 0 || len(res.spCLI) > 0 || len(res.blLib) > 0 {
		r.add(fmt.Sprintf("baseline sporadic round trip, client polling every 10 ms (n=%d)", len(res.blLib)), p3(res.blLib),
			fmt.Sprintf("worker polling every %s, whole queue per tick", c.poll), "")
		r.add(fmt.Sprintf("baseline sporadic round trip, a client process per request polling every %s (n=%d)", c.clientPoll, len(res.blCLI)), p3(res.blCLI), "", "")
	}
	if len(res.spLib) > 0 || nb("sporadic") {
		r.add(fmt.Sprintf("sporadic library round trip (Submit + Wait, echo op, 0–%s pause, `bridge serve` process) (n=%d)", c.pause, len(res.spLib)), lat(res.spLib),
			fmt.Sprintf("baseline, client polling 10 ms: %s%s%s", lower(res.blLib, res.spLib), refNote("its library polling 10 ms", res.ref.lib, res.spLib), floorNote(res.spLib, execFloor)),
			"p50 ≤ 2× the floor (issue 25)")
		r.add(fmt.Sprintf("sporadic `bridge run echo`, a process per request (0–%s pause) (n=%d)", c.pause, len(res.spCLI)), lat(res.spCLI),
			fmt.Sprintf("baseline client process polling %s: %s%s%s", c.clientPoll, lower(res.blCLI, res.spCLI), refNote("a client process per call", res.ref.perCall, res.spCLI), floorNote(res.spCLI, cliFloor)),
			"p50 ≤ 3× the floor (issue 25)")
	}
	full := func(k, fresh []time.Duration) string {
		if len(k) == 0 || len(fresh) == 0 {
			return ""
		}
		return fmt.Sprintf("fresh folder p50 %s: %s of it", ms(pct(fresh, 50)), ratio(pct(k, 50), pct(fresh, 50)))
	}
	if len(res.b2bLib) > 0 || nb("backtoback") {
		r.add(fmt.Sprintf("back to back, library, `bridge serve` process, fresh folder (n=%d)", len(res.b2bLib)), lat(res.b2bLib),
			"baseline, client polling 10 ms: "+lower(res.blLib, res.b2bLib)+floorNote(res.b2bLib, execFloor), "p50 ≤ 4 ms")
		r.add(fmt.Sprintf("back to back, `bridge run`, fresh folder (n=%d)", len(res.b2bCLI)), lat(res.b2bCLI),
			"baseline client process: "+lower(res.blCLI, res.b2bCLI)+floorNote(res.b2bCLI, cliFloor), "")
	}
	if len(res.b2bLibK) > 0 || nb("backtoback") {
		r.add(fmt.Sprintf("back to back, library, %d unacked results in the folder (n=%d)", c.unackedN, len(res.b2bLibK)), lat(res.b2bLibK), full(res.b2bLibK, res.b2bLib), "within 1.2× of fresh")
		r.add(fmt.Sprintf("back to back, `bridge run`, %d unacked results in the folder (n=%d)", c.unackedN, len(res.b2bCLIK)), lat(res.b2bCLIK), full(res.b2bCLIK, res.b2bCLI), "within 1.2× of fresh")
	}
	bl := res.blBurst
	if bl.n > 0 {
		r.add(fmt.Sprintf("baseline burst: %d into its queue at once, until all are back", bl.n), bl.String(), "", "")
	}
	vsBase := func(b burst) string {
		if bl.n == 0 {
			return ""
		}
		return fmt.Sprintf("baseline: %s the req/s, %s the CPU/req", fratio(b.perSec, bl.perSec), fratio(float64(b.cpu()), float64(bl.cpu())))
	}
	burstRow := func(what string, b burst, target string, fresh burst) {
		if b.n == 0 {
			if nb("burst") {
				r.add(what, res.noBin, "", target)
			}
			return
		}
		beside := vsBase(b)
		if res.ref.burstCPU > 0 {
			beside += fmt.Sprintf("; the reference's daemon (op-cost, its client the harness) %s CPU/req: %s of it", ms(res.ref.burstCPU), ratio(b.cpu(), res.ref.burstCPU))
		}
		if fresh.n > 0 {
			beside += fmt.Sprintf("; fresh folder %.0f req/s: %s of it", fresh.perSec, fratio(b.perSec, fresh.perSec))
		}
		r.add(what, b.String(), beside, target)
	}
	const cliGoal, libGoal = "CPU/req ≤ 1.5× the reference's (issue 25)", "CPU/req ≤ 1× the reference's (issue 25)"
	burstRow(fmt.Sprintf("burst of %d through the CLI: `bridge submit` ×%d then `bridge wait` each, one process at a time, fresh folder", c.burstN, c.burstN), res.burstCLI, cliGoal, burst{})
	burstRow(fmt.Sprintf("burst of %d through the library: Submit ×%d then Wait each, fresh folder", c.burstN, c.burstN), res.burstLib, libGoal, burst{})
	burstRow(fmt.Sprintf("burst of %d through the CLI, %d unacked results in the folder", c.burstN, c.unackedN), res.burstCLIK, cliGoal, res.burstCLI)
	burstRow(fmt.Sprintf("burst of %d through the library, %d unacked results in the folder", c.burstN, c.unackedN), res.burstLK, libGoal, res.burstLib)
	if !c.skip["idle"] {
		res.idleRows(c, r)
	}
	if res.fsNote != "" || res.fsRun.n > 0 || res.blFsync.n > 0 || nb("fsyncs") {
		note := res.fsNote
		if note == "" && res.fsRun.n == 0 {
			note = res.noBin
		}
		base := ""
		if res.blFsync.n > 0 {
			base = "baseline: " + res.blFsync.String()
		}
		row := func(what string, f fsyncCount, goal string) {
			v := f.String()
			if note != "" {
				v = note
			}
			r.add(fmt.Sprintf("%s (strace, n=%d sporadic)", what, f.n), v, base, goal)
		}
		row("fsyncs per round trip, `bridge run` + `bridge serve`", res.fsRun, "≤ 10 per round trip (issue 25)")
		row("fsyncs per round trip, library (in a child) + `bridge serve`", res.fsLib, "≤ 8 per round trip (issue 25)")
	}
}

// idleRows adds the idle rows: the two baselines, each empty and beside
// finished requests, then `serve` with its ratios to the Python worker,
// which idles as the reference does (the Go worker pays the Go runtime's
// wake-ups; it stands for the same loop in Go).
func (res *usersResults) idleRows(c config, r *report) {
	stat := func(s idleStats, note string) string {
		switch {
		case s.window > 0:
			return s.String()
		case note != "":
			return note
		}
		return "not measured"
	}
	py := "Python worker, as the reference runs ("
	if res.pyVersion != "" {
		py += "python3 " + res.pyVersion + ", "
	}
	states := []struct {
		where, what        string
		ours, pyB, gB, ref idleStats
		goal               string
	}{
		{"empty queue", fmt.Sprintf("idle `bridge serve`, empty folder (%s window from %s after its start; its ledger napped at %s)", c.serveIdleWindow, res.idleFrom.Round(100*time.Millisecond), res.idleNap.Round(100*time.Millisecond)), res.idle, res.pyIdle, res.blIdle, res.ref.idle,
			"CPU ≤ 1.2× the reference's, ≤ 2 wake-ups/s (issue 25)"},
		{fmt.Sprintf("beside %d finished requests (its journal and processed/), restarted", c.unackedN),
			fmt.Sprintf("idle `bridge serve`, %d finished (unacked) requests, restarted (%s window from %s after its start; its ledger napped at %s)", c.unackedN, c.serveIdleWindow, res.idle10kFrom.Round(100*time.Millisecond), res.idle10kNap.Round(100*time.Millisecond)), res.idle10k, res.pyIdle10k, res.blIdle10k, res.ref.idleFull,
			"CPU and RSS ≤ 1.5× the reference's, ≤ 2 wake-ups/s (issue 25)"},
	}
	for _, st := range states {
		r.add(fmt.Sprintf("baseline idle, %s: %spoll %s, %s window)", st.where, py, c.poll, c.idleWindow), stat(st.pyB, res.pyNote), "", "")
		r.add(fmt.Sprintf("baseline idle, %s: Go worker, the same loop in Go (poll %s, %s window)", st.where, c.poll, c.idleWindow), stat(st.gB, ""), "", "")
		beside := "Python worker " + stat(st.pyB, res.pyNote)
		if st.ours.window > 0 && st.pyB.window > 0 {
			beside = fmt.Sprintf("Python worker: CPU %s, wake-ups %s, RSS %s of it", fratio(float64(st.ours.cpuRate), float64(st.pyB.cpuRate)),
				fratio(st.ours.wakeupsPerSec, st.pyB.wakeupsPerSec), fratio(float64(st.ours.rssKB), float64(st.pyB.rssKB)))
		}
		if st.ours.window > 0 && st.ref.window > 0 {
			beside += fmt.Sprintf("; the reference: CPU %s, wake-ups %s, RSS %s of it", fratio(float64(st.ours.cpuRate), float64(st.ref.cpuRate)),
				fratio(st.ours.wakeupsPerSec, st.ref.wakeupsPerSec), fratio(float64(st.ours.rssKB), float64(st.ref.rssKB)))
		}
		r.add(st.what, stat(st.ours, res.noBin), beside, st.goal)
	}
}
