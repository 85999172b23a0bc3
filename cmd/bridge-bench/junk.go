//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// junk measures what a folder writer's junk costs the daemon (DESIGN, "A
// folder writer"): a fresh pair's daemon, in the scale child, first over an
// empty folder (the baseline of the same run), then with n empty files at
// request names in the trusted agent's directory. Each run answers a ping
// published before it started, then idles through the child's rescans.
func junk(base string, n int, r *report, progress func(string, ...any)) error {
	l, err := setupLocal(base)
	if err != nil {
		return err
	}
	defer l.close()
	measure := func() (map[string]string, error) {
		s, err := l.client.Submit(agent.SubmitOptions{Op: bridge.PingOp, TTL: time.Hour})
		if err != nil {
			return nil, err
		}
		ch, err := startChild("scale", l.host.Dir)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if _, err := l.client.Wait(ctx, s.ID, nil); err != nil {
			ch.cmd.Process.Kill()
			ch.rest()
			return nil, fmt.Errorf("junk: the daemon did not answer: %w", err)
		}
		fmt.Fprintln(ch.stdin)
		return ch.rest()
	}
	progress("junk: the daemon over an empty folder")
	empty, err := measure()
	if err != nil {
		return err
	}
	progress("junk: %d empty files at request names", n)
	dir := filepath.Join(l.folder, filepath.FromSlash(bridge.ToHostDir(l.host.Config.ID, l.agent.Config.ID)))
	old := time.Now().Add(-time.Hour) // settled: marked refused at the first look
	for range n {
		p := filepath.Join(dir, bridge.NewRequestID()+"."+bridge.ExtManifest)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return err
		}
		if err := os.Chtimes(p, old, old); err != nil {
			return err
		}
	}
	full, err := measure()
	if err != nil {
		return err
	}
	num := func(kv map[string]string, k string) int64 { v, _ := strconv.ParseInt(kv[k], 10, 64); return v }
	per := float64(num(full, "rss-kb")-num(empty, "rss-kb")) * 1024 / float64(n)
	r.add(fmt.Sprintf("%d empty files at request names in an agent's directory: daemon RSS after idle rescans", n),
		fmt.Sprintf("%.1f MiB (%.0f bytes per file)", float64(num(full, "rss-kb"))/1024, per),
		fmt.Sprintf("empty folder, same run: %.1f MiB", float64(num(empty, "rss-kb"))/1024), "≤ 600 bytes per file (DESIGN: about 500)")
	r.add(fmt.Sprintf("%d empty files at request names: idle rescan (CPU per full rescan)", n), ms(time.Duration(num(full, "rescan-cpu-ns"))),
		fmt.Sprintf("empty folder: %s", ms(time.Duration(num(empty, "rescan-cpu-ns")))), "")
	return nil
}
