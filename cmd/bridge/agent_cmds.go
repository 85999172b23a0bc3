package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/operator"
)

// Agent commands that read what the host answered: status, wait, result,
// cancel, ls, ops, ping and inbox.

// StatusCmd shows a request's state.
type StatusCmd struct {
	ID string `arg:"" optional:"" help:"Request id; without one, each host's liveness and every request whose answer this home has not acked."`
}

// statusSummary is `bridge status` without an id: what an agent asks first
// ("is the host there, and what have I got going?").
type statusSummary struct {
	Hosts       []*agent.Liveness `json:"hosts"`
	Outstanding []*agent.State    `json:"outstanding"`
}

func (c *StatusCmd) summary(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	if h.Config.Role == "host" {
		return &codeError{code: exitUsage, err: withHintf(errors.New("status: on a host, without a request id"),
			"`bridge ls` lists the requests and their states, `bridge service status` whether serve runs, `bridge doctor` checks everything")}
	}
	cl, err := agent.OpenClient(h)
	if err != nil {
		return err
	}
	defer cl.Close()
	sum := statusSummary{Hosts: []*agent.Liveness{}, Outstanding: []*agent.State{}}
	peers, err := h.Peers()
	if err != nil {
		return err
	}
	for _, p := range peers {
		if p.Role != "host" {
			continue
		}
		if lv, err := cl.HostLiveness(p.ID); err == nil {
			sum.Hosts = append(sum.Hosts, lv)
		}
	}
	ids, err := cl.Outstanding()
	if err != nil {
		return err
	}
	for _, id := range ids {
		st, err := cl.Status(id)
		if err != nil {
			st = &agent.State{ID: id, State: "error: " + err.Error()}
		}
		sum.Outstanding = append(sum.Outstanding, st)
	}
	if g.JSON {
		return g.printJSON(sum)
	}
	if len(sum.Hosts) == 0 {
		g.printf("no host is trusted: pair with one (`bridge pair`)\n")
	}
	for _, lv := range sum.Hosts {
		g.printf("%s\n", escapeControls(lv.Message))
	}
	if len(sum.Outstanding) == 0 {
		g.printf("nothing outstanding: every request this home sent has its answer, acked, or was forgotten (`cancel --forget`; `bridge ls` lists them all)\n")
		return nil
	}
	late := 0
	for _, st := range sum.Outstanding {
		if st.State == bridge.StateSubmitted && st.Reason == string(bridge.ReasonPastExpiry) {
			late++
		}
	}
	if late == 0 {
		g.printf("%d outstanding (answers not acked: `bridge wait --all --ack` collects them):\n", len(sum.Outstanding))
	} else {
		g.printf("%d outstanding (`bridge wait --all --ack` collects the answers; %d past their expiry with none: `bridge wait ID` says whether one may still come, `bridge cancel ID --forget` stops waiting for one):\n",
			len(sum.Outstanding), late)
	}
	for _, st := range sum.Outstanding {
		g.printf("  %s\n", statusLine(st))
	}
	return nil
}

// statusLine is one request's state as `status` prints it.
func statusLine(st *agent.State) string {
	line := fmt.Sprintf("%s  %s  %s", st.ID, st.Op, st.State)
	if st.Reason != "" && st.Reason != st.State {
		line += " (" + st.Reason + ")"
	}
	if st.ExitCode != nil {
		line += fmt.Sprintf(" exit %d", *st.ExitCode)
	}
	if st.Forgotten {
		line += ", forgotten here"
	}
	return escapeControls(line)
}

func (c *StatusCmd) Run(g *Globals) error {
	if c.ID == "" {
		return c.summary(g)
	}
	cl, err := clientFor(g, &c.ID)
	if err != nil {
		return err
	}
	defer cl.Close()
	st, err := cl.Status(c.ID)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(st)
	}
	g.printf("%s\n", statusLine(st))
	return nil
}

// WaitCmd waits for a result without acking it.
type WaitCmd struct {
	IDs     []string      `arg:"" optional:"" name:"id" help:"Request ids (several: each answer is printed as it lands)."`
	All     bool          `help:"Also wait for every request this home sent whose answer it has not acked (as 'bridge ls' lists them)."`
	Ack     bool          `help:"Ack each answer once it is printed (as run does), so the next --all waits for the rest only."`
	Timeout time.Duration `default:"10m" help:"How long to wait."`
}

func (c *WaitCmd) Run(g *Globals) error {
	if err := checkTimeout(c.Timeout, false); err != nil {
		return err
	}
	if len(c.IDs) != 1 || c.All {
		if len(c.IDs) == 0 && !c.All {
			return &codeError{code: exitUsage, err: withHintf(errors.New("wait: no request id given"),
				"`bridge wait ID...`, or `bridge wait --all` for every request whose answer this home has not acked (`bridge ls` lists them)")}
		}
		return waitMany(g, c.IDs, c.All, c.Ack, c.Timeout)
	}
	id := c.IDs[0]
	cl, err := clientFor(g, &id)
	if err != nil {
		return err
	}
	defer cl.Close()
	return waitAndPrint(g, cl, id, c.Timeout, c.Ack)
}

// ResultCmd prints a result that is already there.
type ResultCmd struct {
	ID  string `arg:"" help:"Request id."`
	Ack bool   `help:"Also ack the result and remove this agent's request files."`
}

func (c *ResultCmd) Run(g *Globals) error {
	cl, err := clientFor(g, &c.ID)
	if err != nil {
		return err
	}
	defer cl.Close()
	out, err := cl.Result(c.ID)
	if errors.Is(err, agent.ErrNoResult) {
		return &codeError{code: exitWaitTime, id: c.ID, err: withHintf(fmt.Errorf("request %s has no result yet", c.ID), "run `bridge wait %s`", c.ID)}
	} else if err != nil {
		return err
	}
	if c.Ack {
		if err := cl.Ack(out); err != nil {
			return err
		}
	}
	return printOutcome(g, out)
}

// CancelCmd asks the host to cancel.
type CancelCmd struct {
	ID     string `arg:"" help:"Request id."`
	Forget bool   `help:"Also stop waiting for it here: it leaves status and wait --all (an answer that comes all the same puts it back)."`
}

func (c *CancelCmd) Run(g *Globals) error {
	cl, err := clientFor(g, &c.ID)
	if err != nil {
		return err
	}
	defer cl.Close()
	if out, err := cl.Result(c.ID); err == nil && !cl.RerunOrdered(out) {
		// Answered already: a cancel would change nothing, so none is
		// sent; say how it ended instead. (An uncertain answer whose
		// rerun a human ordered is still to run: that one is cancelled.)
		rc := out.Receipt
		how := rc.Status
		switch {
		case rc.Status == bridge.StatusDone:
			how += fmt.Sprintf(", exit %d", rc.ExitCode)
		case rc.Reason != "" && string(rc.Reason) != rc.Status:
			how += " (" + string(rc.Reason) + ")"
		}
		ended := ""
		if rc.Finished > 0 {
			ended = time.UnixMilli(rc.Finished).UTC().Format(time.RFC3339)
			how += " at " + time.UnixMilli(rc.Finished).Local().Format(time.DateTime)
		}
		out.Close()
		if g.JSON {
			m := map[string]any{"id": c.ID, "cancel": "answered", "status": rc.Status, "reason": rc.Reason, "op": rc.Op}
			if rc.Status == bridge.StatusDone {
				m["exit_code"] = rc.ExitCode
			}
			if ended != "" {
				m["finished"] = ended
			}
			return g.printJSON(m)
		}
		g.note("%s (%s) is answered already: %s; nothing to cancel, no cancel was sent", c.ID, rc.Op, how)
		if c.Forget {
			g.note("hint: nothing to forget: its answer is here (`bridge result %s --ack` acks it, and it is no longer outstanding)", c.ID)
		}
		return nil
	}
	if err := cl.Cancel(c.ID); err != nil {
		return err
	}
	if c.Forget {
		if err := cl.Forget(c.ID); err != nil {
			return fmt.Errorf("cancel for %s published, but forget it here: %w", c.ID, err)
		}
	}
	if g.JSON {
		return g.printJSON(map[string]any{"id": c.ID, "cancel": "sent", "forgotten": c.Forget})
	}
	if c.Forget {
		g.note("cancel for %s published, and no longer waited for here (`bridge status`, `bridge wait --all`); an answer that comes all the same is shown again", c.ID)
		return nil
	}
	g.note("cancel for %s published; the host stops it when the file arrives", c.ID)
	return nil
}

// LsCmd lists requests.
type LsCmd struct{}

func (c *LsCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	if h.Config.Role == "host" {
		entries, err := operator.List(h)
		if err != nil {
			return err
		}
		if g.JSON {
			return g.printJSON(entries)
		}
		if len(entries) == 0 {
			g.note("the ledger holds no request yet")
			return nil
		}
		// Oldest first, one line each; the age is since the host first saw
		// the request. The agent is its local name (in the ref), its id
		// only for an agent no longer trusted; --json has both.
		now := time.Now()
		wRef, wOp := len("REQUEST"), len("OP")
		wState := len("STATE")
		for _, e := range entries {
			wRef, wOp, wState = max(wRef, len(e.Ref)), max(wOp, len(e.Op)), max(wState, len(e.State))
		}
		g.printf("%-5s  %-*s  %-*s  %-*s  %s\n", "AGE", wRef, "REQUEST", wOp, "OP", wState, "STATE", "REASON")
		for _, e := range entries {
			reason, _, _ := strings.Cut(e.Reason, "\n")
			if e.ExitCode != nil {
				// It ran: the op's own code says how, 0 included, as the
				// agent's ls does (a new user saw a refused write as a
				// bare "done"). A reconciled one has no exit of its own.
				reason = strings.TrimSpace(fmt.Sprintf("exit %d %s", *e.ExitCode, reason))
			}
			if e.State == "awaiting-approval" { // the ledger's state (this is the host's ls)
				reason = "`bridge pending` shows what it would run" // its first line ends in "it would run:"
			}
			line := fmt.Sprintf("%-5s  %-*s  %-*s  %-*s  %s", shortAge(now.Sub(e.FirstSeen)), wRef, e.Ref, wOp, e.Op, wState, e.State, reason)
			g.printf("%s\n", strings.TrimRight(line, " "))
		}
		return nil
	}
	cl, err := agent.OpenClient(h)
	if err != nil {
		return err
	}
	defer cl.Close()
	sent, err := cl.List()
	if err != nil {
		return err
	}
	states := []*agent.State{} // `[]`, not `null`, when nothing was sent
	for _, s := range sent {
		st, err := cl.Status(s.ID)
		if err != nil {
			st = &agent.State{ID: s.ID, Op: s.Op, Host: s.HostName, State: "error: " + err.Error(),
				Created: agent.UnixTime(s.Created), Expires: agent.UnixTime(s.Expires)}
		}
		states = append(states, st)
	}
	if g.JSON {
		return g.printJSON(states)
	}
	if len(states) == 0 {
		g.note("no request sent from this home yet")
		return nil
	}
	// The host's columns, so one reading serves both sides: the age since
	// it was sent, the id, op, state, and how it ended (`exit N` for an op
	// that ran, else the reason, `-` while there is no answer).
	now := time.Now()
	wOp, wState := len("OP"), len("STATE")
	for _, st := range states {
		wOp, wState = max(wOp, len(st.Op)), max(wState, len(st.State))
	}
	g.printf("%-5s  %-32s  %-*s  %-*s  %s\n", "AGE", "REQUEST", wOp, "OP", wState, "STATE", "REASON")
	for _, st := range states {
		op := st.Op
		if op == "" {
			op = "-" // sealed to the host: known once the result's receipt names it
		}
		age := "-"
		if st.Created != nil {
			age = shortAge(now.Sub(*st.Created))
		}
		reason := exitColumn(st)
		if st.Forgotten {
			reason += ", forgotten here"
		}
		g.printf("%-5s  %-32s  %-*s  %-*s  %s\n", age, st.ID, wOp, op, wState, st.State, reason)
	}
	return nil
}

// OpsCmd shows the host's catalog.
type OpsCmd struct {
	Host string `placeholder:"NAME" help:"The host (default: the only trusted host)."`
}

func (c *OpsCmd) Run(g *Globals) error {
	if err := checkEmpty(g.args, "--host"); err != nil {
		return err
	}
	cl, err := openClient(g)
	if err != nil {
		return err
	}
	defer cl.Close()
	cat, err := cl.Ops(c.Host)
	if err != nil {
		return err
	}
	if cat.Warning != "" {
		g.note("warning: %s", cat.Warning)
	}
	if g.JSON {
		// The signed catalog as it is, and the agent's warning beside it.
		return g.printJSON(struct {
			*bridge.Catalog
			Warning string `json:"warning,omitempty"`
		}{cat, cat.Warning})
	}
	if len(cat.Ops) == 0 {
		// Nothing on stdout (a script reads the list), but a person
		// should not take silence for a broken command.
		g.note("note: the host offers this agent no op: its policy grants it none (the host's owner adds ops under [agents.<this agent's name>] in policy.toml)")
	}
	for _, op := range cat.Ops {
		g.printf("%s", op.Name)
		if op.Description != "" {
			g.printf(" — %s", op.Description)
		}
		g.printf("\n")
		g.printf("    example: %s\n", bridge.ExampleLine(&op))
		g.printf("    stdin: %s\n", stdinSummary(&op))
		g.printf("    scope: %s\n", scopeSummary(&op))
		for _, a := range op.Args {
			req := "optional"
			if a.Required {
				req = "required"
			}
			g.printf("    %s (%s, %s", a.Name, a.Type, req)
			if a.Default != nil {
				g.printf(", default %q", *a.Default)
			}
			g.printf(")")
			if a.Description != "" {
				g.printf(" — %s", a.Description)
			}
			// The same rules, in the same words, as the guide's (a new
			// user's trial: ops showed no int range, and glued a pattern
			// to the type).
			if rules := argRules(a, func(s string) string { return s }); len(rules) > 0 {
				g.printf(": %s", strings.Join(rules, "; "))
			}
			g.printf("\n")
		}
	}
	return nil
}

// PingCmd is a round trip through the sync.
type PingCmd struct {
	Host           string        `placeholder:"NAME" help:"The host (default: the only trusted host)."`
	Timeout        time.Duration `default:"2m" help:"How long to wait."`
	SyncthingFlags `embed:""`
}

func (c *PingCmd) Run(g *Globals) error {
	if err := checkTimeout(c.Timeout, false); err != nil {
		return err
	}
	if err := checkEmpty(g.args, "--host"); err != nil {
		return err
	}
	g.syncthing = &c.SyncthingFlags
	cl, err := openClient(g)
	if err != nil {
		return err
	}
	defer cl.Close()
	// As run: a host whose fresh stamp refuses this agent's key would
	// never answer; say so (77) and send nothing.
	if lv, lerr := cl.HostLiveness(c.Host); lerr == nil && lv.Verdict == agent.LivenessNotAccepted {
		return notAccepted("", lv)
	}
	start := time.Now()
	s, err := cl.Submit(agent.SubmitOptions{Host: c.Host, Op: bridge.PingOp, TTL: time.Hour})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	// As run's wait: a spinner on a terminal, and a line when the host's
	// stamp says it stopped, went silent, or has none for this agent.
	prog := newProgress(g.stderr, s.ID)
	prog.liveness = func() *agent.Liveness {
		lv, _ := cl.HostLiveness(s.Host)
		return lv
	}
	prog.route = g.routeCheck(s.Host, s.HostName)
	out, err := cl.Wait(ctx, s.ID, prog.tick)
	prog.done()
	var na *agent.NotAcceptedError
	if errors.As(err, &na) {
		return notAccepted(s.ID, na.Liveness)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		if err := routeTimeout(prog, s.ID, c.Timeout); err != nil {
			return err
		}
		// The host's liveness stamp tells why, when it can: stopped,
		// silent, or none at all for this agent (never paired).
		lv, _ := cl.HostLiveness(s.Host)
		if lv != nil && lv.Verdict != agent.LivenessOK {
			hint := fmt.Sprintf("the ping stays queued (`bridge cancel %s` withdraws it); `bridge doctor` shows each host's liveness", s.ID)
			if lv.Verdict == agent.LivenessNoStamp {
				hint = fmt.Sprintf("pair this agent on the host and run `bridge serve` there; the ping stays queued (`bridge cancel %s` withdraws it)", s.ID)
			}
			return &codeError{code: exitWaitTime, id: s.ID, liveness: lv, err: withHintf(fmt.Errorf("no answer from %s after %s: %s", s.HostName, c.Timeout, lv.Message), "%s", hint)}
		}
		return &codeError{code: exitWaitTime, id: s.ID, liveness: lv, err: withHintf(fmt.Errorf("no answer from %s after %s", s.HostName, c.Timeout), "is `bridge serve` running on the host, and is the folder syncing?")}
	} else if err != nil {
		return err
	}
	rtt := time.Since(start)
	cl.Ack(out)
	if g.JSON {
		return g.printJSON(map[string]any{"host": s.HostName, "id": s.ID, "round_trip_ms": rtt.Milliseconds(), "status": out.Receipt.Status})
	}
	if out.Receipt.Status != bridge.StatusDone {
		return printOutcome(g, out)
	}
	g.printf("pong from %s in %s\n", s.HostName, rtt.Round(time.Millisecond))
	return nil
}

// InboxCmd reads messages.
type InboxCmd struct {
	All    bool `help:"Show messages seen before too."`
	Follow bool `short:"f" help:"Keep watching and show messages as they arrive."`
	NoAck  bool `name:"no-ack" help:"Do not ack what is shown (the host then keeps it until its retention)."`
}

func (c *InboxCmd) Run(g *Globals) error {
	cl, err := openClient(g)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, stop := signalContext()
	defer stop()
	for {
		items, err := cl.Inbox()
		if err != nil {
			return err
		}
		show := []agent.InboxItem{} // `[]`, not `null`, when there is none
		for _, it := range items {
			if c.All || it.New {
				show = append(show, it)
			}
		}
		if g.JSON && !c.Follow {
			// One document, as every --json; --follow streams JSON lines.
			if err := g.printJSON(show); err != nil {
				return err
			}
			return cl.MarkSeen(show, !c.NoAck)
		}
		for _, it := range show {
			if g.JSON {
				g.printJSONLine(it)
				continue
			}
			from := it.HostName
			if it.Note.Kind == bridge.NoteNotice {
				from += " (" + string(it.Note.Event) + ")"
			}
			// Continuation lines indented: none can pass for an entry.
			g.printf("%s  %s  %s\n", it.Created.Local().Format(time.DateTime), from, strings.ReplaceAll(it.Note.Text, "\n", "\n    "))
		}
		if err := cl.MarkSeen(show, !c.NoAck); err != nil {
			return err
		}
		if !c.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// shortAge is an age for a column: "40s", "12m", "3h", "5d".
func shortAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(0, int(d/time.Second)))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}
