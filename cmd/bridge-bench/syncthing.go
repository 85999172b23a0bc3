//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// syncthingRows measures ping round trips through two real Syncthings on
// loopback. The harness that starts and pairs them is the host's system
// suites' (bridge/host/systest/syncthing_harness_test.go), so this runs that
// package's TestSyncthingRoundTripBench with `go test` from this module's source tree
// (where `go run ./cmd/bridge-bench` runs) and reads the lines it prints:
//
//	BENCH-SYNCTHING<TAB>mode<TAB>n<TAB>p50 ns<TAB>p90 ns<TAB>p99 ns
func syncthingRows(c config, r *report, progress func(string, ...any)) error {
	const target = "p50 ≤ 100 ms with the nudge"
	if _, err := exec.LookPath("syncthing"); err != nil {
		r.add("through two real Syncthings", "not measured: no `syncthing` in PATH (Debian: apt-get install syncthing)", "", target)
		return nil
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return fmt.Errorf("syncthing: find the module's source tree (run from it): %w", err)
	}
	progress("through two real Syncthings: about %d minutes (six settings, 10 s delays in one of them)", 3*c.syncthingK)
	cmd := exec.Command("go", "test", "-count=1", "-timeout", "60m", "-run", "^TestSyncthingRoundTripBench$", "-v", "./bridge/host/systest")
	cmd.Dir = strings.TrimSpace(string(out))
	cmd.Env = append(os.Environ(), "BRIDGE_BENCH_SYNCTHING=1", "BRIDGE_BENCH_SYNCTHING_N="+strconv.Itoa(c.syncthingK))
	cmd.Stderr = os.Stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("syncthing: %w", err)
	}
	rows := 0
	var tail []string
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Split(line, "\t")
		if len(f) != 6 || f[0] != "BENCH-SYNCTHING" {
			if tail = append(tail, line); len(tail) > 20 {
				tail = tail[1:]
			}
			continue
		}
		var v [4]int64
		for i := range v {
			v[i], _ = strconv.ParseInt(f[i+2], 10, 64)
		}
		d := func(ns int64) string { return ms(time.Duration(ns)) }
		tgt := ""
		switch {
		case strings.Contains(f[1], "results folder") && strings.Contains(f[1], "one request at a time"):
			tgt = "p50 ≤ 100 ms (issue 25)"
		case strings.Contains(f[1], "results folder"):
			tgt = "p50 ≤ 150 ms back to back (issue 25)"
		case strings.HasPrefix(f[1], "nudge"):
			tgt = target
		}
		r.add(fmt.Sprintf("through two real Syncthings, ping round trip, %s (n=%d)", f[1], v[0]),
			fmt.Sprintf("p50 %s, p90 %s, p99 %s", d(v[1]), d(v[2]), d(v[3])), "", tgt)
		progress("syncthing: %s: p50 %s", f[1], d(v[1]))
		rows++
	}
	if err := cmd.Wait(); err != nil || rows == 0 {
		return fmt.Errorf("syncthing: go test %v, %d rows; its last lines:\n%s", err, rows, strings.Join(tail, "\n"))
	}
	return nil
}
