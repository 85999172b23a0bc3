package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/operator"
)

// bridge gc, on either side: each removes only its own files.

// GCCmd collects this side's own files.
type GCCmd struct {
	DryRun    bool          `name:"dry-run" help:"Only list what would be removed."`
	Grace     time.Duration `default:"1h" help:"Host: keep an acked result this long after its request finished (and until it expires); 0: no longer."`
	Retention time.Duration `default:"720h" help:"Host: keep a result nobody acked this long after its request finished; 0: no longer."`
}

func (c *GCCmd) Run(g *Globals) error {
	// A bad command line is said before anything else (an uninitialised
	// home hid it).
	if c.Grace < 0 || c.Retention < 0 {
		return &codeError{code: exitUsage, err: withHintf(errors.New("gc: --grace and --retention cannot be negative"),
			"0 keeps nothing longer; run `bridge gc --help`")}
	}
	h, err := g.openHome()
	if err != nil {
		return err
	}
	// 0 means none: the collection's own zero means "the default".
	if c.Grace == 0 {
		c.Grace = time.Nanosecond
	}
	if c.Retention == 0 {
		c.Retention = time.Nanosecond
	}
	var items, acked []string
	var failed error
	var kept []host.GCKept
	if h.Config.Role == "host" {
		rep, err := host.GC(h, host.GCOptions{Grace: c.Grace, Retention: c.Retention, DryRun: c.DryRun, Explain: true})
		if errors.Is(err, operator.ErrQueued) {
			// The daemon collects; what it will do is a dry run's.
			g.note("%v", err)
			if rep == nil {
				return nil
			}
			if g.JSON {
				return g.printJSON(rep)
			}
			c.DryRun = true
		} else if err != nil {
			return err
		} else if g.JSON {
			return g.printJSON(rep)
		}
		for _, it := range rep.Items {
			items = append(items, fmt.Sprintf("%s %s/%s (%s)", it.What, it.AgentName, it.ID, it.Why))
		}
		kept = rep.Kept
	} else {
		if c.Grace != time.Hour || c.Retention != 720*time.Hour {
			g.note("note: --grace and --retention are the host's: an agent's gc removes only its own files the host no longer needs")
		}
		cl, err := agent.OpenClient(h)
		if err != nil {
			return err
		}
		defer cl.Close()
		files, again, err := cl.GC(c.DryRun)
		if err != nil && files == nil {
			return err // it did nothing
		}
		// What was done is said even when an ack could not be written
		// again; the error follows.
		if g.JSON {
			if perr := g.printJSON(map[string]any{"dry_run": c.DryRun, "files": files, "acked_again": again}); perr != nil {
				return perr
			}
			return err
		}
		items, acked, failed = files, again, err
	}
	verb, ackVerb := "removed", "acked again"
	if c.DryRun {
		verb, ackVerb = "would remove", "would ack again"
	}
	for _, it := range items {
		g.printf("%s %s\n", verb, it)
	}
	for _, it := range acked {
		g.printf("%s %s\n", ackVerb, it)
	}
	if len(items) == 0 && len(acked) == 0 {
		g.note("nothing to collect")
	}
	if failed != nil {
		return failed
	}
	for _, k := range kept {
		what := k.What
		if k.Count != 1 {
			what = map[string]string{"acked result": "acked results", "result nobody acked": "results nobody acked",
				"unfinished request": "unfinished requests", "ledger entry": "ledger entries", "inbox message": "inbox messages"}[k.What]
		}
		when := ""
		if k.Until != nil {
			when = " (the first may go from " + k.Until.Local().Format(time.DateTime) + ")"
		}
		g.note("kept: %d %s%s: %s", k.Count, what, when, k.Why)
	}
	return nil
}
