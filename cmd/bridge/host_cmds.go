package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/trust"
)

// Host commands: serve, and the operator's decisions on requests
// (reconcile, pending, approve, deny), messages to agents, ledger repair.

// ServeCmd runs the host daemon.
type ServeCmd struct {
	Rescan         time.Duration `default:"30s" help:"Interval of full folder rescans."`
	PendingTimeout time.Duration `name:"pending-timeout" default:"1h" help:"How long a request may wait for its payload to arrive complete before it is rejected as incomplete."`
	MaxQueueAge    time.Duration `name:"max-queue-age" default:"24h" help:"How long a request may wait on this host, whatever its own expiry says."`
	ApprovalTTL    time.Duration `name:"approval-ttl" default:"1h" help:"How long a request may wait for a human's approval."`
	Drain          time.Duration `default:"30s" help:"On SIGTERM or SIGINT, how long running ops may go on before they are stopped (a second signal stops them at once)."`
	AllowRoot      bool          `name:"allow-root" env:"BRIDGE_ALLOW_ROOT" help:"Allow serving as root (refused by default)."`
	LogFormat      string        `name:"log-format" enum:"text,json" default:"text" help:"Log format: text or json."`
	Verbose        bool          `short:"v" help:"Log debug detail."`
	SyncthingFlags `embed:""`
}

func (c *ServeCmd) Run(g *Globals) error {
	// Signals are caught first: a SIGINT while the daemon starts up stops
	// it cleanly once Open is done, instead of killing it midway (or, before
	// this line, at once: a supervisor's stop that comes that early finds
	// nothing open). A second signal kills the running ops' process groups
	// and exits 130 at once: the ledger keeps them running, and the next
	// start recovers them as after a crash (docs/OPERATIONS.md, "Stopping
	// the daemon").
	var daemon atomic.Pointer[host.Daemon]
	ctx, stop := signalContext(func() {
		if d := daemon.Load(); d != nil {
			d.Abort()
		}
	})
	defer stop()
	// Which signal stopped it, for the last line of the log.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	g.syncthing = &c.SyncthingFlags
	h, err := g.openHome()
	if err != nil {
		return err
	}
	host.TuneDaemonGC()
	level := bridge.LogInfo
	if c.Verbose {
		level = bridge.LogDebug
	}
	logger := bridge.NewLogger(g.stderr, c.LogFormat, level)
	if fi, err := os.Stat(filepath.Join(h.Config.Folder, ".stfolder")); h.Nudger == nil && err == nil && fi.IsDir() {
		logger.Warn("the folder is Syncthing's and no nudge is set: each hop waits for Syncthing's watcher (10 s by default)",
			"hint", "bridge syncthing setup --share-results, on both sides")
	}
	if h.Nudger != nil {
		// The daemon's nudge failures go to its log, in its format.
		n, err := c.SyncthingFlags.over(mustSyncthingConfig(h)).nudger(logger)
		if err != nil {
			return err
		}
		g.nudger, h.Nudger = n, nil
		if n != nil { // never a nil pointer in the interface
			h.Nudger = n
		}
	}
	d, err := host.NewDaemon(h, host.DaemonOptions{Rescan: c.Rescan, PendingTimeout: c.PendingTimeout, MaxQueueAge: c.MaxQueueAge,
		AllowRoot: c.AllowRoot, ApprovalTTL: c.ApprovalTTL, Logger: logger})
	if err != nil {
		return err
	}
	daemon.Store(d)
	if err := d.Open(); err != nil {
		return err
	}
	runErr := d.Run(ctx)
	// First signal: drain, giving running ops time to finish, then stop
	// them with the signal ladder.
	closeCtx, cancel := context.WithTimeout(context.Background(), c.Drain)
	defer cancel()
	err = errors.Join(runErr, d.Close(closeCtx))
	how := "asked to"
	select {
	case sig := <-sigs:
		how = "by " + signalName(sig)
	default:
	}
	if err != nil {
		how = "on an error: " + err.Error()
	}
	logStopped(logger, h, how)
	return err
}

// logStopped writes the daemon's last line: how it stopped, and what it
// leaves for its next start (requests the ledger holds unanswered).
func logStopped(logger *slog.Logger, h *trust.Home, how string) {
	entries, err := operator.LedgerEntries(h)
	if err != nil {
		logger.Info("stopped "+how, "left", "unknown: "+err.Error())
		return
	}
	counts := map[string]int{}
	var states []string
	for _, e := range entries {
		if e.State.Terminal() {
			continue
		}
		if counts[string(e.State)] == 0 {
			states = append(states, string(e.State))
		}
		counts[string(e.State)]++
	}
	if len(states) == 0 {
		logger.Info("stopped "+how+": no request is left unanswered", "left", 0)
		return
	}
	sort.Strings(states)
	var parts []string
	n := 0
	for _, st := range states {
		parts = append(parts, fmt.Sprintf("%d %s", counts[st], st))
		n += counts[st]
	}
	logger.Info("stopped "+how+": requests are left for the next start", "left", n, "states", strings.Join(parts, ", "),
		"hint", "`bridge ls` lists them; `bridge serve` takes them up again (uncertain ones wait for `bridge reconcile`)")
}

// signalName is a stopping signal as a person knows it.
func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// ReconcileCmd settles an uncertain request on the host.
type ReconcileCmd struct {
	ID string `arg:"" name:"ref" help:"The request: its id, or AGENT/ID as 'bridge ls' shows it."`
	As string `required:"" enum:"done,failed,rerun" placeholder:"done|failed|rerun" help:"done: it had its effect; failed: it did not; rerun: run it again."`
}

func (c *ReconcileCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	dec, err := host.Reconcile(h, c.ID, c.As)
	if err != nil {
		return refError(err)
	}
	if g.JSON {
		// The entry as it stood (queued: the daemon applies "as" within a
		// second), or as it stands now.
		return g.printJSON(struct {
			*operator.Decision
			As string `json:"as"`
		}{dec, c.As})
	}
	if dec.Queued {
		g.printf("%s: settling as %s; `bridge serve` applies it within a second\n", dec.Ref, c.As)
		return nil
	}
	g.printf("%s: %s\n", dec.Ref, dec.State)
	return nil
}

// PendingCmd lists requests awaiting approval.
type PendingCmd struct {
	Stdin string `placeholder:"REF" help:"Print the whole standard input of request REF, which waits for approval (checked against the SHA-256 the approval is bound to): as it is to a pipe or file, escaped to a terminal."`
}

func (c *PendingCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	if c.Stdin != "" {
		if g.JSON {
			return &codeError{code: exitUsage, err: withHintf(errors.New("pending --stdin prints the input's bytes, not JSON"),
				"drop --json; `bridge --json pending` shows the input's size, hash and start")}
		}
		if !isTerminal(g.stdout) {
			// The input as it is, for a pager or a file.
			_, err := operator.PendingInput(h, c.Stdin, g.stdout)
			return refError(err)
		}
		// To a terminal, the agent's bytes could move the cursor and
		// erase what was shown: every control written as an escape, as
		// it streams (an input may be as large as the op's max_stdin).
		w := &escapeWriter{w: g.stdout}
		if _, err := operator.PendingInput(h, c.Stdin, w); err != nil {
			return refError(err)
		}
		if err := w.Close(); err != nil {
			return err
		}
		g.note("note: standard output is a terminal, so control characters are shown escaped (\\x1b); pipe it (| less, > FILE) for the bytes as they are")
		return nil
	}
	list, err := operator.Pending(h)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(list)
	}
	if len(list) == 0 {
		g.note("no request waits for approval")
	}
	// The request's line, then the reason, then what it would run as a
	// block under it, then the start of its input, so that several
	// requests stay apart.
	for _, e := range list {
		head, block, _ := strings.Cut(e.Reason, "\n")
		g.printf("%s  %s  waiting since %s (%s)\n    %s\n", e.Ref, e.Op, e.Updated.Local().Format(time.DateTime),
			agent.Ago(time.Since(e.Updated)), head)
		if block != "" {
			g.printf("        %s\n", strings.ReplaceAll(strings.TrimSuffix(block, "\n"), "\n", "\n        "))
		}
		printPendingInput(g, e)
	}
	return nil
}

// printPendingInput shows the start of a waiting request's input, each line
// escaped (it is the agent's text), and how to see all of it.
func printPendingInput(g *Globals, e operator.Waiting) {
	in := e.Input
	switch {
	case in == nil:
		return
	case !in.Kept:
		g.printf("    input: %s\n", in.Problem)
		return
	case !in.Text:
		g.printf("    input: not text (%d bytes); to see it: bridge pending --stdin %s | od -c | less\n", in.Bytes, e.Ref)
		return
	}
	what := "all of it"
	if in.Cut {
		what = "its start"
	}
	g.printf("    input, %s (every byte: bridge pending --stdin %s | less):\n", what, e.Ref)
	for _, line := range strings.Split(strings.TrimSuffix(in.Preview, "\n"), "\n") {
		g.printf("      | %s\n", line)
	}
	switch {
	case in.Cut:
		g.printf("      | …\n")
	case !strings.HasSuffix(in.Preview, "\n"):
		g.printf("      (no line break at the end)\n")
	}
}

// ApproveCmd approves a waiting request.
type ApproveCmd struct {
	ID           string `arg:"" name:"ref" help:"The request: its id, or AGENT/ID as 'bridge pending' shows it."`
	DespiteInput bool   `name:"despite-input" help:"Approve even though what pending shows of its input is not the input the approval is bound to (its SHA-256 still binds what runs)."`
}

func (c *ApproveCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	approve := operator.Approve
	if c.DespiteInput {
		approve = operator.ApproveDespiteInput
	}
	dec, err := approve(h, c.ID)
	if errors.Is(err, operator.ErrInputNotShown) {
		return &codeError{code: exitRejected, err: err}
	} else if err != nil {
		return refError(err)
	}
	if g.JSON {
		return g.printJSON(map[string]any{"ref": dec.Ref, "id": dec.ID, "op": dec.Op, "decision": "approved"})
	}
	g.printf("approved %s (%s); %s\n", dec.Ref, dec.Op, whenServed(h, "runs it"))
	return nil
}

// whenServed says when the daemon acts on an order left for it.
func whenServed(h *trust.Home, what string) string {
	if _, ok := operator.DaemonRunning(h); ok {
		return "`bridge serve` " + what + " within a second"
	}
	return "`bridge serve` is not running: it " + what + " when it starts"
}

// DenyCmd denies a waiting request.
type DenyCmd struct {
	ID     string `arg:"" name:"ref" help:"The request: its id, or AGENT/ID as 'bridge pending' shows it."`
	Reason string `placeholder:"TEXT" help:"Why, for the agent."`
}

func (c *DenyCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	dec, err := operator.Deny(h, c.ID, c.Reason)
	if err != nil {
		return refError(err)
	}
	if g.JSON {
		return g.printJSON(map[string]any{"ref": dec.Ref, "id": dec.ID, "op": dec.Op, "decision": "denied"})
	}
	g.printf("denied %s (%s); %s\n", dec.Ref, dec.Op, whenServed(h, "answers it"))
	return nil
}

// SendCmd sends a message to an agent.
type SendCmd struct {
	To   string `required:"" placeholder:"AGENT" help:"The agent (its local name or id)."`
	File string `placeholder:"FILE" help:"Send the text of FILE (or - for standard input)."`
	Text string `arg:"" optional:"" help:"The message."`
}

func (c *SendCmd) Run(g *Globals) error {
	text := c.Text
	switch {
	case c.File == "-":
		b, err := io.ReadAll(io.LimitReader(g.stdin, bridge.MaxMessageText+1))
		if err != nil {
			return err
		}
		text = string(b)
	case c.File != "":
		b, err := os.ReadFile(c.File)
		if err != nil {
			return err
		}
		text = string(b)
	}
	if text == "" {
		return &codeError{code: exitUsage, err: withHintf(errors.New("send: no message"), "bridge send --to AGENT \"text\", or --file FILE")}
	}
	h, err := g.openHome()
	if err != nil {
		return err
	}
	m, err := host.Send(h, c.To, text)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"id": m.ID, "seq": m.Seq, "to": c.To})
	}
	g.printf("sent message %d to %s (%s)\n", m.Seq, c.To, m.ID)
	return nil
}

// LedgerCmd groups ledger maintenance.
type LedgerCmd struct {
	Repair LedgerRepairCmd `cmd:"" help:"Host: make a damaged ledger loadable again (stop serve first)."`
}

// LedgerRepairCmd repairs a damaged ledger.
type LedgerRepairCmd struct{}

func (c *LedgerRepairCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	rep, err := host.RepairLedger(h)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(rep)
	}
	for _, f := range rep.Files() {
		records := fmt.Sprintf("%d records", f.Entries)
		if f.Entries == 1 {
			records = "1 record"
		}
		switch {
		case f.Damaged:
			g.printf("repaired %s: %s\nkept %d bytes (%s), dropped %d bytes; the damaged file is kept as %s (remove it once you no longer need it)\n",
				f.Path, f.Problem, f.BytesKept, records, f.BytesDropped, f.Backup)
		default:
			g.printf("%s is intact\n", f.Path)
		}
	}
	if !rep.Repaired {
		g.printf("nothing to repair\n")
	}
	if len(rep.Lost) == 0 {
		g.note("the audit log knows no request the ledger lacks; if the whole home came from a backup, `bridge serve` also checks the folder for what it did since (docs/OPERATIONS.md)")
	}
	if n := len(rep.Lost); n > 0 {
		what := fmt.Sprintf("%d requests", n)
		if n == 1 {
			what = "1 request"
		}
		g.printf("%s this host took further than the ledger now records (the audit log or the home knows them):\n", what)
		for _, k := range rep.Lost {
			g.printf("    %s\n", k)
		}
		g.note("if one of them comes back, `bridge serve` holds it uncertain instead of running it again; settle it with `bridge reconcile`")
	}
	return nil
}

// refError gives a reference that cannot name a request the usage exit code.
func refError(err error) error {
	if errors.Is(err, operator.ErrBadRef) {
		return &codeError{code: exitUsage, err: err}
	}
	return err
}

// escapeWriter writes what it is given with every control and invisible
// character escaped (escapeControls), a chunk at a time: a character split
// between two writes waits for its rest. Close ends the last line.
type escapeWriter struct {
	w       io.Writer
	carry   []byte
	endedNL bool
	wrote   bool
}

func (e *escapeWriter) Write(p []byte) (int, error) {
	b := append(e.carry, p...)
	// Keep back an incomplete character at the end (at most 3 bytes).
	cut := len(b)
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i
			}
			break
		}
	}
	e.carry = append([]byte(nil), b[cut:]...)
	if cut > 0 {
		if _, err := io.WriteString(e.w, escapeControls(string(b[:cut]))); err != nil {
			return 0, err
		}
		e.wrote, e.endedNL = true, b[cut-1] == '\n'
	}
	return len(p), nil
}

func (e *escapeWriter) Close() error {
	if len(e.carry) > 0 {
		if _, err := io.WriteString(e.w, escapeControls(string(e.carry))); err != nil {
			return err
		}
		e.wrote, e.endedNL, e.carry = true, false, nil
	}
	if e.wrote && !e.endedNL {
		_, err := io.WriteString(e.w, "\n")
		return err
	}
	return nil
}
