//go:build linux

// Command bridge-bench measures the bridge on this machine, side by side
// with the physical floor and a polling baseline, and prints one Markdown
// table (docs/BENCHMARKS.md explains every row):
//
//	go run ./cmd/bridge-bench            # the full run, about 20 minutes on 2 cores
//	go run ./cmd/bridge-bench -quick     # under a minute; what CI runs
//
// The rows of what users do (users.go) run the `bridge` binary, built from
// this source tree: a `bridge serve` process, `bridge run`, `submit` and
// `wait` as processes, and the library in this process; the baseline
// (baseline.go) runs as a process of its own. The older local rows run the
// daemon in this process, as `bridge demo` does. The rows through two real
// Syncthings run the integration harness with `go test` (syncthing.go).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/host"
)

func main() {
	// The daemon re-executes this binary as the runner's resource-limit
	// shim; then this call never returns.
	host.RunnerMain()
	if childMain() {
		return
	}
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bridge-bench:", err)
		os.Exit(1)
	}
}

type config struct {
	n, baselineN, tputN, inflight, scaleN, floorN int
	sporadicN, b2bN, burstN, unackedN, fsyncN     int
	syncthingK                                    int
	payloadMiB                                    int64
	seed                                          uint64
	poll, clientPoll, pause, idleWindow           time.Duration
	serveIdleFrom, serveIdleFullFrom              time.Duration
	serveIdleWindow                               time.Duration
	cpuProfile, dir, reference                    string
	skip                                          map[string]bool
}

// sections are the names -skip takes.
var sections = []string{"floor", "opcost", "reference", "baseline", "sporadic", "backtoback", "burst", "idle", "fsyncs", "tput", "scale", "junk", "seal", "syncthing"}

func parse(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("bridge-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	quick := fs.Bool("quick", false, "tiny counts: checks the harness runs (CI), figures mean little")
	fs.IntVar(&c.n, "n", 1000, "round trips per op for the latency percentiles")
	fs.IntVar(&c.baselineN, "baseline-n", 20, "sporadic round trips through the baseline, per client setting (about 1-2 s each)")
	fs.IntVar(&c.sporadicN, "sporadic-n", 60, "sporadic round trips (a random pause before each), library and bridge run each")
	fs.IntVar(&c.b2bN, "b2b-n", 200, "back-to-back round trips against bridge serve, library and bridge run each, fresh and full folder")
	fs.IntVar(&c.burstN, "burst-n", 200, "requests in a burst (submitted all, then collected)")
	fs.IntVar(&c.unackedN, "unacked-n", 10000, "unacked results in the folder for the full-folder rows, and finished requests beside the idle baseline")
	fs.IntVar(&c.fsyncN, "fsync-n", 20, "sporadic round trips under strace, per path")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the sporadic pauses")
	fs.DurationVar(&c.pause, "pause", time.Second, "sporadic requests wait a random time below this before each")
	fs.DurationVar(&c.clientPoll, "client-poll", time.Second, "the baseline client's poll interval in its process-per-request rows (its default)")
	fs.DurationVar(&c.idleWindow, "idle-window", 30*time.Second, "how long an idle process is watched (the baselines and the reference: they poll every second)")
	fs.DurationVar(&c.serveIdleFrom, "serve-idle-from", 45*time.Second, "an idle `bridge serve` is watched from this long after its start: past its first rescan (30 s), whose caches the start warmed")
	fs.DurationVar(&c.serveIdleFullFrom, "serve-idle-full-from", 6*time.Minute, "the idle `bridge serve` beside the full folder is watched from this long after its start: past its first rotation of result checks (11 rescans at 10,000 finished requests, DESIGN invariant 6)")
	fs.DurationVar(&c.serveIdleWindow, "serve-idle-window", 120*time.Second, "how long an idle `bridge serve` is watched: four of its rescans")
	fs.IntVar(&c.tputN, "tput-n", 1000, "requests per op for the throughput run")
	fs.IntVar(&c.inflight, "inflight", 32, "requests in flight in the throughput run")
	fs.IntVar(&c.scaleN, "scale-n", 100000, "finished requests in the folder for the scale figures (filling takes minutes, see BENCHMARKS.md)")
	fs.IntVar(&c.floorN, "floor-n", 200, "repetitions of each floor primitive")
	fs.Int64Var(&c.payloadMiB, "payload-mib", 1024, "payload size for seal+open, MiB")
	fs.DurationVar(&c.poll, "poll", time.Second, "the baseline's poll interval")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the local latency runs to this file")
	fs.StringVar(&c.dir, "dir", "", "work in this directory (default: a new temporary one, removed after)")
	fs.StringVar(&c.reference, "reference", "", "a checkout of the reference bridge (abhinaykrupa/cowork-to-code-bridge): the op-cost rows beside its daemon, and the reference section")
	fs.IntVar(&c.syncthingK, "syncthing-n", 1, "multiplies the Syncthing sample counts (30, 10 and 4 round trips per watcher setting)")
	skip := fs.String("skip", "", "comma-separated sections to leave out: "+strings.Join(sections, ", "))
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.skip = map[string]bool{}
	for _, s := range strings.Split(*skip, ",") {
		switch s {
		case "":
		default:
			if slices.Contains(sections, s) {
				c.skip[s] = true
				continue
			}
			return c, fmt.Errorf("-skip: unknown section %q", s)
		}
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		def := func(name string, p *int, v int) {
			if !set[name] {
				*p = v
			}
		}
		def("n", &c.n, 30)
		def("baseline-n", &c.baselineN, 2)
		def("sporadic-n", &c.sporadicN, 4)
		def("b2b-n", &c.b2bN, 4)
		def("burst-n", &c.burstN, 8)
		def("unacked-n", &c.unackedN, 60)
		def("fsync-n", &c.fsyncN, 2)
		def("tput-n", &c.tputN, 60)
		def("inflight", &c.inflight, 8)
		def("scale-n", &c.scaleN, 300)
		def("floor-n", &c.floorN, 20)
		// Two minutes of Syncthing's own watcher delays at the least: a
		// quick run leaves them out unless asked.
		if !set["syncthing-n"] {
			c.skip["syncthing"] = true
		}
		if !set["payload-mib"] {
			c.payloadMiB = 16
		}
		for name, d := range map[string]*time.Duration{"poll": &c.poll, "client-poll": &c.clientPoll, "pause": &c.pause} {
			if !set[name] {
				*d = 200 * time.Millisecond
			}
		}
		if !set["idle-window"] {
			c.idleWindow = time.Second
		}
		if !set["serve-idle-from"] {
			c.serveIdleFrom = 0
		}
		if !set["serve-idle-full-from"] {
			c.serveIdleFullFrom = 0
		}
		if !set["serve-idle-window"] {
			c.serveIdleWindow = c.idleWindow
		}
	}
	for _, v := range []int{c.n, c.syncthingK, c.baselineN, c.tputN, c.inflight, c.floorN, c.sporadicN, c.b2bN, c.burstN, c.fsyncN} {
		if v < 1 {
			return c, errors.New("counts, sizes and intervals must be positive")
		}
	}
	if c.unackedN < 0 || c.payloadMiB < 1 || c.poll <= 0 || c.clientPoll <= 0 || c.pause <= 0 || c.idleWindow <= 0 || c.serveIdleFrom < 0 || c.serveIdleFullFrom < 0 || c.serveIdleWindow <= 0 {
		return c, errors.New("counts, sizes and intervals must be positive")
	}
	return c, nil
}

// report collects the table.
type report struct {
	w    io.Writer
	rows [][5]string
}

func (r *report) add(what, ours, compare, target string) {
	r.rows = append(r.rows, [5]string{what, ours, compare, target})
}

func (r *report) print() {
	fmt.Fprintln(r.w, "| measurement | this machine | beside it | issue target |")
	fmt.Fprintln(r.w, "|---|---|---|---|")
	for _, row := range r.rows {
		fmt.Fprintf(r.w, "| %s | %s | %s | %s |\n", row[0], row[1], row[2], row[3])
	}
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + " ms" }

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(a)/float64(b), 'f', 1, 64) + "×"
}

// lowerBy says how much lower ours is than base, or how much higher when
// it is not lower.
func lowerBy(base, ours time.Duration) string {
	if ours > base && base > 0 {
		return ratio(ours, base) + " higher"
	}
	return ratio(base, ours) + " lower"
}

func run(args []string, stdout, stderr io.Writer) error {
	c, err := parse(args, stderr)
	if err != nil {
		return err
	}
	progress := func(format string, a ...any) { fmt.Fprintf(stderr, "bridge-bench: "+format+"\n", a...) }
	base := c.dir
	if base == "" {
		if base, err = os.MkdirTemp("", "bridge-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(base)
	} else if err := os.MkdirAll(base, 0o755); err != nil {
		return err
	}
	r := &report{w: stdout}
	fmt.Fprintf(stdout, "bridge-bench on %s/%s, %d CPUs, %s; n=%d baseline-n=%d sporadic-n=%d b2b-n=%d burst-n=%d unacked-n=%d fsync-n=%d tput-n=%d inflight=%d scale-n=%d payload=%d MiB; poll %s, client poll %s, pause 0–%s, idle window %s (serve: %s from %s after its start, %s beside the full folder), seed %d\n\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), c.n, c.baselineN, c.sporadicN, c.b2bN, c.burstN, c.unackedN, c.fsyncN,
		c.tputN, c.inflight, c.scaleN, c.payloadMiB, c.poll, c.clientPoll, c.pause, c.idleWindow, c.serveIdleWindow, c.serveIdleFrom, c.serveIdleFullFrom, c.seed)

	// 1. The floor.
	floorDir := filepath.Join(base, "floor")
	if err := os.MkdirAll(floorDir, 0o755); err != nil {
		return err
	}
	var fl floor
	if !c.skip["floor"] {
		progress("floor: fsync, publish, fork/exec, inotify, ed25519 (%d each)", c.floorN)
		if fl, err = measureFloor(floorDir, c.floorN); err != nil {
			return err
		}
	}
	// A round trip publishes two files each way, is seen by inotify once
	// each way and verifies one signature each way; the exec'd op adds one
	// fork/exec. The ledger's own fsyncs are not counted: this is the
	// floor of any signed, atomic, event-driven design.
	pingFloor := 4*fl.publish + 2*fl.inotify + 2*fl.verify
	execFloor := pingFloor + fl.forkExec
	if !c.skip["floor"] {
		r.add("floor: fsync of a 600 B file (p50)", ms(fl.fsync), "", "")
		r.add("floor: atomic publish, syncsafe.Folder.Publish (p50)", ms(fl.publish), "", "")
		r.add("floor: fork/exec of `true` (p50)", ms(fl.forkExec), "", "")
		r.add("floor: inotify, rename into a watched dir → event (p50)", ms(fl.inotify), "", "")
		r.add("floor: Ed25519 verify", ms(fl.verify), "", "")
		r.add("floor: ping round trip (4 publish + 2 inotify + 2 verify)", ms(pingFloor), "", "")
		r.add("floor: exec'd no-op round trip (ping floor + 1 fork/exec)", ms(execFloor), "", "")
	}

	// The cost of running an op, beside a ping, a fork/exec and the
	// reference.
	var ref refResults
	if !c.skip["opcost"] {
		oc, err := measureOpCost(c, filepath.Join(base, "opcost"), progress)
		if err != nil {
			return err
		}
		oc.rows(r)
		ref.burstCPU = oc.ref
	}

	// The reference the ways users run it (-reference).
	if !c.skip["reference"] {
		burst := ref.burstCPU
		ref = referenceRows(c, filepath.Join(base, "reference"), r, progress)
		ref.burstCPU = burst
	}

	// 2. What users do, with the bridge binary, beside the baseline and
	// the reference.
	ur, err := usersSections(c, filepath.Join(base, "users"), progress)
	if err != nil {
		return err
	}
	ur.ref = ref
	ur.rows(c, fl, r)

	// 3. Local round trips, daemon in this process.
	l, err := setupLocal(filepath.Join(base, "local"))
	if err != nil {
		return err
	}
	defer l.close()
	if err := l.start(); err != nil {
		return err
	}
	finished := l.earlier()
	if _, err := latency(l.client, bridge.PingOp, 5); err != nil { // warm up
		return err
	}
	finished += 5
	var prof *os.File
	if c.cpuProfile != "" {
		if prof, err = os.Create(c.cpuProfile); err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(prof); err != nil {
			return err
		}
	}
	lat := map[string][]time.Duration{}
	for _, op := range []string{bridge.PingOp, noopOp} {
		progress("local round trips: %d × %s, one at a time", c.n, op)
		if lat[op], err = latency(l.client, op, c.n); err != nil {
			return err
		}
		finished += c.n
	}
	if prof != nil {
		pprof.StopCPUProfile()
		prof.Close()
	}

	targets := map[string][3]string{
		bridge.PingOp: {"p50 ≤ 4 ms", "", ""},
		noopOp:        {"p50 ≤ 6 ms", "", "p99 ≤ 20 ms"},
	}
	names := map[string]string{bridge.PingOp: "ping", noopOp: "exec'd no-op"}
	floors := map[string]time.Duration{bridge.PingOp: pingFloor, noopOp: execFloor}
	bl := ur.blLib
	for _, op := range []string{bridge.PingOp, noopOp} {
		for i, p := range []float64{50, 90, 99} {
			ours := pct(lat[op], p)
			var beside []string
			if len(bl) > 0 {
				bp := pct(bl, p)
				beside = append(beside, fmt.Sprintf("baseline, sporadic, client polling 10 ms %s (n=%d): %s", ms(bp), len(bl), lowerBy(bp, ours)))
			}
			if floors[op] > 0 {
				beside = append(beside, fmt.Sprintf("floor %s: %s of it", ms(floors[op]), ratio(ours, floors[op])))
			}
			r.add(fmt.Sprintf("local %s round trip p%.0f (n=%d), back to back, daemon in-process", names[op], p, len(lat[op])), ms(ours),
				strings.Join(beside, "; "), targets[op][i])
		}
	}

	// 4. Throughput.
	tp := map[string]tput{}
	for _, op := range []string{bridge.PingOp, noopOp} {
		if c.skip["tput"] {
			break
		}
		progress("throughput: %d × %s, %d in flight", c.tputN, op, c.inflight)
		if tp[op], err = throughput(c.tputN, c.inflight, func() error { _, err := roundTrip(l.client, op); return err }); err != nil {
			return err
		}
		finished += c.tputN
	}
	tTarget := map[string]string{bridge.PingOp: "≥ 1,000/s", noopOp: "≥ 500/s"}
	for _, op := range []string{bridge.PingOp, noopOp} {
		if c.skip["tput"] {
			break
		}
		t, b := tp[op], ur.blBurst
		r.add(fmt.Sprintf("throughput %s, %d in flight (n=%d), daemon in-process", names[op], c.inflight, t.n),
			fmt.Sprintf("%.0f req/s, %s CPU/req", t.perSec, ms(t.cpuPerR)),
			fmt.Sprintf("baseline, %d at once: %.0f req/s, %s CPU/req: %s", b.n, b.perSec, ms(b.cpu()), fratio(t.perSec, b.perSec)),
			tTarget[op])
	}

	// 5. Scale.
	if !c.skip["scale"] {
		if err := scale(c, l, finished, r, progress); err != nil {
			return err
		}
	}

	// 5b. Junk in an agent's directory, in a pair of its own.
	if !c.skip["junk"] {
		if err := junk(filepath.Join(base, "junk"), c.scaleN, r, progress); err != nil {
			return err
		}
	}

	// 6. Seal and open a large payload, in a child for a clean peak RSS.
	if !c.skip["seal"] {
		progress("seal+open of %d MiB", c.payloadMiB)
		ch, err := startChild("seal", strconv.FormatInt(c.payloadMiB<<20, 10))
		if err != nil {
			return err
		}
		kv, err := ch.rest()
		if err != nil {
			return err
		}
		ns, _ := strconv.ParseInt(kv["seal-open-ns"], 10, 64)
		hwm, _ := strconv.ParseInt(kv["hwm-kb"], 10, 64)
		limit, _ := strconv.ParseInt(kv["limit-ns"], 10, 64)
		mbps := func(ns int64) float64 { return float64(c.payloadMiB<<20) / 1e6 / (float64(ns) / 1e9) }
		r.add(fmt.Sprintf("seal + open of %d MiB, streamed through a pipe", c.payloadMiB),
			fmt.Sprintf("%.0f MB/s, peak RSS %.1f MiB", mbps(ns), float64(hwm)/1024),
			fmt.Sprintf("one-core limit of the same work (2 × SHA-256 + seal + open per chunk, nothing around it) %.0f MB/s: %.0f%% of it", mbps(limit), 100*float64(limit)/float64(ns)),
			"≥ 90% of the limit, RSS ≤ 64 MiB")
	}

	// 7. Through two real Syncthings.
	if !c.skip["syncthing"] {
		if err := syncthingRows(c, r, progress); err != nil {
			return err
		}
	}

	r.print()
	return nil
}
