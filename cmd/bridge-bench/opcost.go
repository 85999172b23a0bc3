//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/syncbridge/bridge/bridge/doctor"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// The cost of running an op (issue 24): the daemon's CPU per exec'd no-op
// beside its CPU per ping (the same round trip with nothing run) and beside
// a bare fork/exec of `true`, all in one run, and beside the reference
// bridge's daemon per no-op when a checkout of it is given (-reference).

// opCost is the section's outcome, each figure per request, medians of
// opCostReps bursts.
type opCost struct {
	n                     int
	ping, noop, forkExec  time.Duration
	ref                   time.Duration // 0: not measured
	refNote, containment  string
	note                  string // why nothing was measured
	pingReps, noopReps    []time.Duration
	refReps, forkExecReps []time.Duration
}

const opCostReps = 3

func measureOpCost(c config, base string, progress func(string, ...any)) (*opCost, error) {
	oc := &opCost{n: c.burstN}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	progress("op cost: building the bridge binary (go build %s)", bridgePkg)
	bin, err := buildBridge(base)
	if err != nil {
		// The other sections' rows stand; these say why not.
		progress("%v; the op-cost rows are not measured", err)
		oc.note = fmt.Sprintf("not measured: `go build %s` failed", bridgePkg)
		return oc, nil
	}
	l, err := setupLocal(filepath.Join(base, "bridge"))
	if err != nil {
		return nil, err
	}
	defer l.client.Close()
	s, err := startServe(bin, l.host.Dir, filepath.Join(base, "serve.log"))
	if err != nil {
		return nil, err
	}
	defer s.stop()
	// Ready once it answers; warm: a few of each first.
	for _, op := range []string{bridge.PingOp, noopOp} {
		for range 5 {
			if _, err := roundTrip(l.client, op); err != nil {
				return nil, fmt.Errorf("serve did not answer %s: %w", op, err)
			}
		}
	}
	if out, err := exec.Command(bin, "--home", l.host.Dir, "doctor", "--json").Output(); err == nil || len(out) > 0 {
		var d struct {
			Findings []doctor.Finding `json:"findings"`
		}
		if json.Unmarshal(out, &d) == nil {
			for _, f := range d.Findings {
				if f.Check == "containment" {
					oc.containment, _, _ = strings.Cut(strings.TrimPrefix(f.Message, "op containment: "), ";")
				}
			}
		}
	}
	burstOf := func(op string) (time.Duration, error) {
		b, err := measureBurst(c.burstN, s.pid, false,
			func() (string, error) {
				sub, err := l.client.Submit(agent.SubmitOptions{Op: op, TTL: time.Hour})
				if err != nil {
					return "", err
				}
				return sub.ID, nil
			},
			func(id string) error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				out, err := l.client.Wait(ctx, id, nil)
				if err == nil && out.Receipt.Status != bridge.StatusDone {
					err = fmt.Errorf("%s %s: %s (%s)", op, id, out.Receipt.Status, out.Receipt.Detail)
				}
				return err
			})
		return b.server, err
	}
	for rep := range opCostReps {
		progress("op cost, rep %d/%d: burst of %d pings, %d exec'd no-ops, %d fork/execs of true", rep+1, opCostReps, c.burstN, c.burstN, c.burstN)
		p, err := burstOf(bridge.PingOp)
		if err != nil {
			return nil, err
		}
		n, err := burstOf(noopOp)
		if err != nil {
			return nil, err
		}
		f, err := forkExecCPU(c.burstN)
		if err != nil {
			return nil, err
		}
		oc.pingReps, oc.noopReps, oc.forkExecReps = append(oc.pingReps, p), append(oc.noopReps, n), append(oc.forkExecReps, f)
	}
	oc.ping, oc.noop, oc.forkExec = medianOf(oc.pingReps), medianOf(oc.noopReps), medianOf(oc.forkExecReps)
	if c.reference == "" {
		oc.refNote = "the reference not measured: give -reference DIR, a checkout of abhinaykrupa/cowork-to-code-bridge"
		return oc, nil
	}
	for rep := range opCostReps {
		progress("op cost, rep %d/%d: the reference, burst of %d no-op scripts", rep+1, opCostReps, c.burstN)
		d, err := referenceBurst(c.reference, filepath.Join(base, fmt.Sprintf("ref%d", rep)), c.burstN)
		if err != nil {
			oc.refNote = fmt.Sprintf("the reference not measured: %v", err)
			return oc, nil
		}
		oc.refReps = append(oc.refReps, d)
	}
	oc.ref = medianOf(oc.refReps)
	return oc, nil
}

func medianOf(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// forkExecCPU is the CPU, parent and child, of one fork/exec/wait of true
// from this process: what a daemon pays at the least to run a program.
func forkExecCPU(n int) (time.Duration, error) {
	path, err := exec.LookPath("true")
	if err != nil {
		return 0, err
	}
	c0, s0 := selfChildrenCPU(), selfCPU()
	for range n {
		p, err := os.StartProcess(path, []string{"true"}, &os.ProcAttr{})
		if err != nil {
			return 0, err
		}
		if _, err := p.Wait(); err != nil {
			return 0, err
		}
	}
	return (selfChildrenCPU() - c0 + selfCPU() - s0) / time.Duration(n), nil
}

// referenceBurst runs the reference bridge's daemon (Python, from the
// checkout dir) on a fresh root, writes n requests for a no-op script into
// its queue at once, as its client writes one (a temporary file renamed
// into queue/), waits for all n results and returns its CPU per request,
// its own and that of the children it reaped. It runs the reference as it
// is: nothing of it is copied here.
func referenceBurst(dir, root string, n int) (time.Duration, error) {
	ref, err := startReference(dir, root)
	if err != nil {
		return 0, err
	}
	defer ref.stop()
	p0, err := sampleProc(ref.pid())
	if err != nil {
		return 0, err
	}
	if err := ref.fill(n); err != nil {
		return 0, err
	}
	p1, err := sampleProc(ref.pid())
	if err != nil {
		return 0, err
	}
	return (p1.cpu + p1.children - p0.cpu - p0.children) / time.Duration(n), nil
}

// rows adds the section's rows.
func (oc *opCost) rows(r *report) {
	if oc == nil {
		return
	}
	if oc.note != "" {
		r.add("daemon CPU per request, exec'd no-op beside ping and fork/exec", oc.note, "", "no-op − ping − fork/exec ≤ 3 ms")
		return
	}
	gap := oc.noop - oc.ping - oc.forkExec
	r.add(fmt.Sprintf("daemon CPU per request, burst of %d through the library, `bridge serve` (%s); medians of %d", oc.n, oc.containment, opCostReps),
		fmt.Sprintf("exec'd no-op %s, ping %s", ms(oc.noop), ms(oc.ping)),
		fmt.Sprintf("fork/exec of `true` in the same run %s; no-op − ping − fork/exec: %s", ms(oc.forkExec), ms(gap)),
		"no-op − ping − fork/exec ≤ 3 ms")
	if oc.ref == 0 {
		r.add("daemon CPU per exec'd no-op beside the reference's", oc.refNote, "", "≤ 1.5× the reference's")
		return
	}
	r.add(fmt.Sprintf("daemon CPU per exec'd no-op beside the reference's (its daemon, %d no-op scripts written into its queue at once, its CPU and its reaped children's)", oc.n),
		fmt.Sprintf("%s (reps %s)", ms(oc.noop), msList(oc.noopReps)),
		fmt.Sprintf("reference %s (reps %s): %s of it", ms(oc.ref), msList(oc.refReps), ratio(oc.noop, oc.ref)),
		"≤ 1.5× the reference's")
}

func msList(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, strings.TrimSuffix(ms(d), " ms"))
	}
	return strings.Join(s, ", ")
}
