//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// fillBatch is how many pings the fill submits before it waits for their
// results.
const fillBatch = 500

// scale fills the folder up to c.scaleN finished requests with pings (not
// acked: every request keeps its two request and two result files), then
// restarts the daemon in a child process and measures how soon it answers
// a ping published before it started, what an idle rescan costs, and its
// resident set.
func scale(c config, l *local, finished int, r *report, progress func(string, ...any)) error {
	if n := c.scaleN - finished; n > 0 {
		progress("scale: filling the folder with %d more finished pings (%d so far)", n, finished)
		start := time.Now()
		if err := fill(l, n, c.inflight, progress); err != nil {
			return err
		}
		progress("scale: filled %d in %s (%.0f/s)", n, time.Since(start).Round(time.Millisecond), float64(n)/time.Since(start).Seconds())
		finished += n
	}
	if err := l.stop(); err != nil {
		return err
	}
	s, err := l.client.Submit(agent.SubmitOptions{Op: bridge.PingOp, TTL: time.Hour})
	if err != nil {
		return err
	}
	progress("scale: restarting the daemon on %d finished requests", finished)
	ch, err := startChild("scale", l.host.Dir)
	if err != nil {
		return err
	}
	kv := map[string]string{}
	for kv["open-start"] == "" {
		line, ok := <-ch.lines
		if !ok {
			_, err := ch.rest()
			return fmt.Errorf("scale child ended early: %v", err)
		}
		kv[line[0]] = line[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := l.client.Wait(ctx, s.ID, nil); err != nil {
		ch.cmd.Process.Kill()
		ch.rest()
		return fmt.Errorf("scale: the restarted daemon did not answer: %w", err)
	}
	answered := time.Now()
	fmt.Fprintln(ch.stdin)
	rest, err := ch.rest()
	if err != nil {
		return err
	}
	for k, v := range rest {
		kv[k] = v
	}
	num := func(k string) int64 { v, _ := strconv.ParseInt(kv[k], 10, 64); return v }
	ready := answered.Sub(time.Unix(0, num("open-start")))
	open := time.Duration(num("open-end") - num("open-start"))
	r.add(fmt.Sprintf("%d finished requests: daemon ready (Open → a waiting ping answered)", finished), ms(ready),
		fmt.Sprintf("of which Open %s", ms(open)), "≤ 1 s (issue 25)")
	r.add(fmt.Sprintf("%d finished requests: idle rescan (CPU per full rescan)", finished), ms(time.Duration(num("rescan-cpu-ns"))), "", "≤ 300 ms")
	r.add(fmt.Sprintf("%d finished requests: daemon RSS", finished),
		fmt.Sprintf("%.1f MiB (peak %.1f MiB)", float64(num("rss-kb"))/1024, float64(num("hwm-kb"))/1024), "", "≤ 100 MiB")
	return nil
}

// fill submits n pings, inflight submitters at a time, and waits for their
// results to be in the folder. It does not verify them (the latency runs
// do): this only builds the state. It says how far it got every 10 s.
func fill(l *local, n, inflight int, progress func(string, ...any)) error {
	resDir := filepath.Join(l.folder, bridge.ToAgentDir(l.host.Config.ID, l.agent.Config.ID))
	last := time.Now()
	for done := 0; done < n; {
		if time.Since(last) > 10*time.Second {
			progress("  fill: %d of %d", done, n)
			last = time.Now()
		}
		k := min(fillBatch, n-done)
		ids := make([]string, k)
		var wg sync.WaitGroup
		errs := make(chan error, inflight)
		per := (k + inflight - 1) / inflight
		for w := 0; w*per < k; w++ {
			wg.Add(1)
			go func(lo, hi int) {
				defer wg.Done()
				for i := lo; i < hi; i++ {
					s, err := l.client.Submit(agent.SubmitOptions{Op: bridge.PingOp, TTL: time.Hour})
					if err != nil {
						errs <- err
						return
					}
					ids[i] = s.ID
				}
			}(w*per, min(k, (w+1)*per))
		}
		wg.Wait()
		select {
		case err := <-errs:
			return err
		default:
		}
		deadline := time.Now().Add(5 * time.Minute)
		for _, id := range ids {
			p := filepath.Join(resDir, filepath.Base(bridge.ResultPath(l.host.Config.ID, l.agent.Config.ID, id, bridge.ExtResult)))
			for {
				if _, err := os.Stat(p); err == nil {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("fill: no result for %s", id)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
		done += k
	}
	return nil
}
