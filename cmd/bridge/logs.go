package main

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// LogsCmd prints an op's output as the host streams it (progress chunks),
// and with --follow keeps going until the result arrives.
type LogsCmd struct {
	ID      string        `arg:"" help:"Request id."`
	Follow  bool          `short:"f" help:"Keep following until the result arrives, then exit with the op's exit code."`
	Timeout time.Duration `default:"10m" help:"With --follow: how long to wait for the result."`
}

func (c *LogsCmd) Run(g *Globals) error {
	if c.Follow {
		if err := checkTimeout(c.Timeout, false); err != nil {
			return err
		}
	}
	cl, err := clientFor(g, &c.ID)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, stop := signalContext()
	defer stop()
	deadline := time.Now().Add(c.Timeout)
	next, prev := 1, ""
	for {
		chunks, err := cl.Progress(c.ID, next, prev)
		for _, ch := range chunks {
			if g.JSON {
				// JSON lines, one a chunk: a stream has no one document.
				g.printJSONLine(map[string]any{"id": c.ID, "seq": ch.Seq, "stdout": string(ch.Stdout), "stderr": string(ch.Stderr), "dropped": ch.Dropped})
				next, prev = ch.Seq+1, ch.ChunkHash()
				continue
			}
			g.stdout.Write(ch.Stdout)
			g.stderr.Write(ch.Stderr)
			if ch.Dropped > 0 {
				g.note("%d bytes of output were not streamed (the result has them)", ch.Dropped)
			}
			next, prev = ch.Seq+1, ch.ChunkHash()
		}
		if err != nil {
			return err
		}
		out, rerr := cl.Result(c.ID)
		if rerr == nil && cl.RerunOrdered(out) {
			rerr = agent.ErrNoResult // a rerun continues the stream: follow it
		}
		if rerr == nil {
			rc := out.Receipt
			mismatch := rc.Status != bridge.StatusUncertain && (rc.ProgressCount != next-1 || rc.ProgressHead != prev)
			if mismatch && !g.JSON {
				// Chunks still arriving, or not those the host committed to:
				// the result is what counts.
				g.note("warning: the streamed output is not what the result commits to (%d of %d chunks); the result follows", next-1, rc.ProgressCount)
				return printOutcome(g, out)
			}
			if g.JSON {
				// The last line: how it ended, with the whole output when it
				// was too short to stream or the stream is not what the
				// result commits to.
				var stdout, stderr bytes.Buffer
				if mismatch {
					g.note("warning: the streamed output is not what the result commits to (%d of %d chunks); the last line has the result's", next-1, rc.ProgressCount)
				}
				if rc.ProgressCount == 0 || mismatch {
					if err := out.WriteOutput(&stdout, &stderr); err != nil {
						return err
					}
				}
				g.printJSONLine(map[string]any{"id": c.ID, "status": rc.Status, "reason": rc.Reason, "exit_code": opExitCode(rc),
					"bridge_exit_code": exitFor(rc), "stdout": stdout.String(), "stderr": stderr.String()})
				if code := exitFor(rc); code != 0 {
					return &codeError{code: code}
				}
				return nil
			}
			if rc.ProgressCount == 0 {
				// Too short to stream: the result holds all the output.
				if err := out.WriteOutput(g.stdout, g.stderr); err != nil {
					return err
				}
			}
			if code := exitFor(rc); code != 0 {
				how := rc.Status
				if rc.Reason != "" {
					how += " (" + string(rc.Reason) + ")"
				}
				if rc.Status == bridge.StatusDone {
					how += fmt.Sprintf(", exit %d", rc.ExitCode)
				}
				g.note("%s ended: %s", c.ID, how)
				return &codeError{code: code}
			}
			return nil
		}
		if !errors.Is(rerr, agent.ErrNoResult) {
			return rerr
		}
		if !c.Follow {
			return nil
		}
		if time.Now().After(deadline) {
			return &codeError{code: exitWaitTime, err: withHintf(fmt.Errorf("no result for %s after %s", c.ID, c.Timeout), "run `bridge logs -f %s` again", c.ID)}
		}
		select {
		case <-ctx.Done():
			return &codeError{code: exitInterrupt}
		case <-time.After(300 * time.Millisecond):
		}
	}
}
