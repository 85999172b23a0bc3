//go:build linux

package main

import (
	"bufio"
	cryptorand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The reference bridge (abhinaykrupa/cowork-to-code-bridge) run as it is,
// from a checkout given with -reference: its daemon module, and its
// single-file client as a user's agent calls it. Nothing of it is copied
// here; the harness only writes what its client would write and reads what
// its daemon writes.

// refDaemon is the reference's daemon running on a root of its own.
type refDaemon struct {
	dir, root, token string
	cmd              *exec.Cmd
	log              *os.File
}

// startReference starts the reference's daemon on root (made if missing,
// with a no-op script and a token), as its installer runs it, and waits
// until it says it is up.
func startReference(dir, root string) (*refDaemon, error) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil, errors.New("no python3 in PATH")
	}
	if _, err := os.Stat(filepath.Join(dir, "cowork_to_code_bridge", "daemon.py")); err != nil {
		return nil, fmt.Errorf("%s is not a checkout of the reference: %w", dir, err)
	}
	for _, d := range []string{"scripts", "queue", "results"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	// Its one way to run something is a script under scripts/, as `bash
	// script`: the closest no-op is a script that runs true.
	if err := os.WriteFile(filepath.Join(root, "scripts", "noop.sh"), []byte("#!/usr/bin/env bash\ntrue\n"), 0o755); err != nil {
		return nil, err
	}
	r := &refDaemon{dir: dir, root: root}
	if data, err := os.ReadFile(filepath.Join(root, ".env")); err == nil {
		r.token = strings.TrimSpace(strings.TrimPrefix(string(data), "BRIDGE_TOKEN="))
	} else {
		tok := make([]byte, 16)
		cryptorand.Read(tok)
		r.token = hex.EncodeToString(tok)
		if err := os.WriteFile(filepath.Join(root, ".env"), []byte("BRIDGE_TOKEN="+r.token+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	if r.log, err = os.OpenFile(filepath.Join(root, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, err
	}
	r.cmd = exec.Command(py, "-m", "cowork_to_code_bridge.daemon")
	// As its installer runs it: a short PATH.
	r.cmd.Env = []string{"HOME=" + root, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "BRIDGE_ROOT=" + root,
		"PYTHONPATH=" + dir, "PYTHONDONTWRITEBYTECODE=1"}
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		r.log.Close()
		return nil, err
	}
	r.cmd.Stderr = r.log
	if err := r.cmd.Start(); err != nil {
		r.log.Close()
		return nil, err
	}
	up := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() {
			fmt.Fprintln(r.log, sc.Text())
			if !said && strings.Contains(sc.Text(), "daemon up") {
				said = true
				up <- true
			}
		}
		if !said {
			up <- false
		}
	}()
	select {
	case ok := <-up:
		if ok {
			return r, nil
		}
		err = fmt.Errorf("its daemon exited (log: %s)", r.log.Name())
	case <-time.After(20 * time.Second):
		err = fmt.Errorf("its daemon did not say it was up (log: %s)", r.log.Name())
	}
	r.stop()
	return nil, err
}

func (r *refDaemon) pid() int { return r.cmd.Process.Pid }

func (r *refDaemon) stop() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.log.Close()
}

// fill writes n requests for the no-op script into its queue at once, as
// its client writes one (a temporary file renamed into queue/), and waits
// until its daemon has moved each into processed/, its last step.
func (r *refDaemon) fill(n int) error {
	ids := make([]string, n)
	for i := range ids {
		suffix := make([]byte, 4)
		cryptorand.Read(suffix)
		ids[i] = fmt.Sprintf("%d_%s", time.Now().Unix(), hex.EncodeToString(suffix))
		body, _ := json.Marshal(map[string]any{"id": ids[i], "script": "scripts/noop.sh", "args": []string{}, "timeout": 60,
			"ts_submitted": float64(time.Now().UnixNano()) / 1e9, "token": r.token})
		tmp := filepath.Join(r.root, "queue", ids[i]+".json.tmp")
		if err := os.WriteFile(tmp, body, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(r.root, "queue", ids[i]+".json")); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(10*time.Minute + time.Duration(n)*10*time.Millisecond)
	for _, id := range ids {
		for {
			if _, err := os.Stat(filepath.Join(r.root, "processed", id+".json")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("request %s not processed (log: %s)", id, r.log.Name())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// refClientScript is what the harness asks python3 to run: the reference's
// own client (bridge_client.py, imported from the checkout), calling the
// no-op script as an agent does, N times, each after the pause the harness
// gives on standard input, printing each call's wall time in seconds.
const refClientScript = `
import sys, time
import bridge_client as b
poll = float(sys.argv[1])
for line in sys.stdin:
    time.sleep(float(line))
    t = time.time()
    r = b.call_remote("scripts/noop.sh", args=[], timeout=60, poll_interval=poll)
    d = time.time() - t
    if r.get("exit_code") != 0:
        sys.exit("exit code %r: %r" % (r.get("exit_code"), r))
    print(d, flush=True)
`

// clientRoundTrips runs n calls through the reference's client, in one
// Python process when perProcess is false (its library, as an agent that
// imports it), else a python3 process per call (as an agent that runs a
// command per call, its probe's way), each after a pause from pauses.
// A process per call is timed from its start to its exit.
func (r *refDaemon) clientRoundTrips(n int, poll time.Duration, perProcess bool, pause func() time.Duration) ([]time.Duration, error) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil, err
	}
	command := func() *exec.Cmd {
		cmd := exec.Command(py, "-c", refClientScript, strconv.FormatFloat(poll.Seconds(), 'f', -1, 64))
		cmd.Env = []string{"HOME=" + r.root, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "BRIDGE_ROOT=" + r.root,
			"PYTHONPATH=" + r.dir, "PYTHONDONTWRITEBYTECODE=1"}
		cmd.Stderr = r.log
		return cmd
	}
	var out []time.Duration
	if perProcess {
		for range n {
			time.Sleep(pause())
			cmd := command()
			cmd.Stdin = strings.NewReader("0\n")
			start := time.Now()
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("the reference's client: %w (log: %s)", err, r.log.Name())
			}
			out = append(out, time.Since(start))
		}
		return out, nil
	}
	var pauses strings.Builder
	for range n {
		fmt.Fprintf(&pauses, "%f\n", pause().Seconds())
	}
	cmd := command()
	cmd.Stdin = strings.NewReader(pauses.String())
	data, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("the reference's client: %w (log: %s)", err, r.log.Name())
	}
	for _, f := range strings.Fields(string(data)) {
		s, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, time.Duration(s*1e9))
	}
	return out, nil
}

// refResults is what the reference section measured, for our rows' ratios
// (zero values: not measured).
type refResults struct {
	perCall, lib   []time.Duration
	idle, idleFull idleStats
	burstCPU       time.Duration // its daemon's CPU per no-op, from the op-cost section
}

// referenceRows measures the reference the ways users run it, beside the
// rows of what users do with ours: calls through its client (a process per
// call at its default poll, and its library at 10 ms), its daemon idle on
// an empty root and, restarted, beside c.unackedN finished requests.
func referenceRows(c config, base string, r *report, progress func(string, ...any)) (res refResults) {
	const what = "the reference"
	if c.reference == "" {
		r.add(what, "not measured: give -reference DIR, a checkout of abhinaykrupa/cowork-to-code-bridge", "", "")
		return res
	}
	rng := newPauses(c)
	fail := func(row string, err error) { r.add(row, "not measured: "+err.Error(), "", "") }
	ref, err := startReference(c.reference, filepath.Join(base, "root"))
	if err != nil {
		fail(what, err)
		return res
	}
	defer func() { ref.stop() }()
	progress("the reference: idle, empty queue (%s)", c.idleWindow)
	row := fmt.Sprintf("reference idle, empty queue: its daemon as it runs (%s window)", c.idleWindow)
	if st, err := watchIdle(ref.pid(), c.idleWindow); err != nil {
		fail(row, err)
	} else {
		res.idle = st
		r.add(row, st.String(), "", "")
	}
	progress("the reference: %d sporadic calls, a python3 process per call polling %s", c.baselineN, c.clientPoll)
	row = fmt.Sprintf("reference sporadic round trip, a client process per call (python3, its bridge_client.call_remote, polling %s) (n=%d)", c.clientPoll, c.baselineN)
	if ds, err := ref.clientRoundTrips(c.baselineN, c.clientPoll, true, rng); err != nil {
		fail(row, err)
	} else {
		res.perCall = ds
		r.add(row, p3(ds), "", "")
	}
	progress("the reference: %d sporadic calls through its library polling 10 ms", c.sporadicN)
	row = fmt.Sprintf("reference sporadic round trip, its library in one process (call_remote polling 10 ms) (n=%d)", c.sporadicN)
	if ds, err := ref.clientRoundTrips(c.sporadicN, 10*time.Millisecond, false, rng); err != nil {
		fail(row, err)
	} else {
		res.lib = ds
		r.add(row, p3(ds), "", "")
	}
	progress("the reference: %d finished requests, then restarted and idle (%s)", c.unackedN, c.idleWindow)
	row = fmt.Sprintf("reference idle beside %d finished requests, restarted (%s window)", c.unackedN, c.idleWindow)
	if err := ref.fill(c.unackedN); err != nil {
		fail(row, err)
		return res
	}
	ref.stop()
	if ref, err = startReference(c.reference, filepath.Join(base, "root")); err != nil {
		fail(row, err)
		return res
	}
	time.Sleep(2 * time.Second) // its start-up pass over what it finished
	if st, err := watchIdle(ref.pid(), c.idleWindow); err != nil {
		fail(row, err)
	} else {
		res.idleFull = st
		r.add(row, st.String(), "", "")
	}
	return res
}

// newPauses is the sporadic pauses of the reference's rows: uniform in
// [0, c.pause), seeded as the users' rows are.
func newPauses(c config) func() time.Duration {
	rng := rand.New(rand.NewPCG(c.seed, 15))
	return func() time.Duration { return time.Duration(rng.Int64N(int64(c.pause))) }
}
