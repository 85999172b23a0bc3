package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// InitCmd: bridge init host|agent --folder F.
type InitCmd struct {
	Role   string `arg:"" enum:"host,agent" help:"host or agent."`
	Folder string `required:"" placeholder:"DIR" help:"The synced folder."`
	Name   string `placeholder:"NAME" help:"A name for this party (default: the host name)."`
}

func (c *InitCmd) Run(g *Globals) error {
	h, err := bridge.InitHome(g.Home, c.Role, c.Name, c.Folder)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"home": h.Dir, "role": h.Config.Role, "name": h.Config.Name, "id": h.Config.ID,
			"folder": h.Config.Folder, "fingerprint": h.Bundle().Fingerprint(), "bundle": h.BundleText()})
	}
	g.printf("initialised %s %q in %s\n", c.Role, h.Config.Name, h.Dir)
	g.printf("id          %s\nfingerprint %s\n\n", h.Config.ID, h.Bundle().Fingerprint())
	g.printf("Give this line to the other side (`bridge keys trust LINE`):\n%s\n", h.BundleText())
	if c.Role == "host" {
		g.printf("\nNext: write %s, then run `bridge serve`.\n", h.Path(bridge.PolicyName))
	}
	return nil
}

// KeysCmd groups key commands.
type KeysCmd struct {
	Show   KeysShowCmd   `cmd:"" help:"Show this party's keys and the trusted peers."`
	Export KeysExportCmd `cmd:"" help:"Print this party's public bundle as one line."`
	Trust  KeysTrustCmd  `cmd:"" help:"Trust a peer's bundle."`
	Rotate KeysRotateCmd `cmd:"" help:"Replace this party's keys; peers follow by themselves."`
	Revoke KeysRevokeCmd `cmd:"" help:"Revoke a peer's key (local, at once)."`
}

type KeysShowCmd struct{}

// keyView is one key generation as `keys show` reports it.
type keyView struct {
	Seq        uint64 `json:"seq"`
	SignKid    string `json:"sign_kid"`
	BoxKid     string `json:"box_kid"`
	State      string `json:"state"` // current | overlap | expired | revoked | kept (own, retired)
	ValidUntil int64  `json:"valid_until,omitempty"`
	KeepUntil  int64  `json:"keep_until,omitempty"`
}

type peerView struct {
	Name        string    `json:"name"`
	Role        string    `json:"role"`
	ID          string    `json:"id"`
	Fingerprint string    `json:"fingerprint"`
	Keys        []keyView `json:"keys"`
}

func (c *KeysShowCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	peers, err := h.Peers()
	if err != nil {
		return err
	}
	own, err := h.OwnKeys()
	if err != nil {
		return err
	}
	b := h.Bundle()
	var mine []keyView
	for _, k := range own {
		v := keyView{Seq: k.Seq, SignKid: k.Identity.SignKid(), BoxKid: k.Identity.BoxKid(), State: "current"}
		if k.ValidUntil != 0 {
			v.State, v.ValidUntil, v.KeepUntil = "retired", k.ValidUntil, k.KeepUntil
		}
		mine = append(mine, v)
	}
	now := time.Now()
	var views []peerView
	for _, p := range peers {
		pv := peerView{Name: p.Name, Role: p.Role, ID: p.ID}
		if _, cb, err := h.Peer(p.ID); err == nil {
			pv.Fingerprint = cb.Fingerprint()
		}
		for i := len(p.Keys) - 1; i >= 0; i-- {
			k := p.Keys[i]
			v := keyView{Seq: k.Seq, SignKid: k.SignKid(), BoxKid: k.BoxKid(), ValidUntil: k.ValidUntil}
			switch p.State(k, now) {
			case bridge.KeyRevoked:
				v.State = "revoked"
			case bridge.KeyExpired:
				v.State = "expired"
			default:
				v.State = "current"
				if k.ValidUntil != 0 {
					v.State = "overlap"
				}
			}
			pv.Keys = append(pv.Keys, v)
		}
		views = append(views, pv)
	}
	if g.JSON {
		return g.printJSON(map[string]any{"role": h.Config.Role, "name": h.Config.Name, "id": h.Config.ID, "seq": b.Seq,
			"fingerprint": b.Fingerprint(), "keys": mine, "peers": views})
	}
	g.printf("%s %q\n  id          %s\n  fingerprint %s\n", h.Config.Role, h.Config.Name, h.Config.ID, b.Fingerprint())
	printKeys := func(keys []keyView) {
		for _, k := range keys {
			g.printf("  key %-3d %-8s sign %s  box %s", k.Seq, k.State, k.SignKid, k.BoxKid)
			if k.ValidUntil != 0 {
				g.printf("  valid until %s", time.Unix(k.ValidUntil, 0).Format(time.RFC3339))
			}
			g.printf("\n")
		}
	}
	printKeys(mine)
	for _, pv := range views {
		g.printf("trusted %s %q\n  id          %s\n  fingerprint %s\n", pv.Role, pv.Name, pv.ID, pv.Fingerprint)
		printKeys(pv.Keys)
	}
	return nil
}

// KeysRotateCmd replaces this party's keys.
type KeysRotateCmd struct {
	Overlap time.Duration `default:"168h" help:"How long peers keep accepting the old key."`
}

func (c *KeysRotateCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	info, err := h.Rotate(c.Overlap)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(info)
	}
	g.printf("rotated to key %d (sign %s)\nfingerprint %s\n", info.Seq, info.NewSignKid, info.Fingerprint)
	g.printf("the old key stays valid for peers until %s; they pick up the rotation from the folder by themselves\n",
		time.Unix(info.OldValidUntil, 0).Format(time.RFC3339))
	return nil
}

// KeysRevokeCmd revokes a peer's key.
type KeysRevokeCmd struct {
	Kid string `arg:"" help:"The signing or box key id (see 'bridge keys show')."`
}

func (c *KeysRevokeCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	p, err := h.Revoke(c.Kid)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"peer": p.Name, "id": p.ID, "revoked": c.Kid})
	}
	g.printf("revoked %s of %s %q: nothing signed by it is accepted from now on\n", c.Kid, p.Role, p.Name)
	if _, ok := p.Current(); !ok {
		g.note("hint: that was %q's current key; pair with it again when it has new keys", p.Name)
	}
	return nil
}

// PairCmd trusts a peer whose bundle is in the folder, after the user
// confirmed its fingerprint.
type PairCmd struct {
	Peer        string `placeholder:"ID" help:"The peer's id, when several are in the folder."`
	Name        string `placeholder:"NAME" help:"Local name for the peer (host: the [agents.NAME] of the policy)."`
	Fingerprint string `placeholder:"FP" help:"The fingerprint the other side shows; without it, bridge asks on the terminal."`
}

func (c *PairCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	cands, err := h.Candidates()
	if err != nil {
		return err
	}
	var pick []bridge.Candidate
	for _, cd := range cands {
		if (c.Peer == "" && !cd.Trusted) || cd.ID == c.Peer {
			pick = append(pick, cd)
		}
	}
	switch {
	case len(pick) == 0:
		return withHintf(errors.New("pair: no new peer bundle in the folder"),
			"the other side publishes its bundle with `bridge init host` (host) or `bridge keys trust` (agent); wait for the sync, or pass --peer ID")
	case len(pick) > 1:
		for _, cd := range pick {
			g.printf("%s %q  id %s  fingerprint %s\n", cd.Role, cd.Name, cd.ID, cd.Fingerprint)
		}
		return &codeError{code: exitUsage, err: withHintf(errors.New("pair: several peers are in the folder"), "choose one with --peer ID")}
	}
	cd := pick[0]
	g.note("%s %q (id %s) shows fingerprint %s", cd.Role, cd.Name, cd.ID, cd.Fingerprint)
	fp := c.Fingerprint
	if fp == "" {
		if !isTerminal(g.stdin) {
			return &codeError{code: exitUsage, err: withHintf(errors.New("pair: no --fingerprint and no terminal to ask on"),
				"run `bridge keys export` on the other side and pass what it shows: --fingerprint %s", "xxxx-xxxx-xxxx-xxxx")}
		}
		fmt.Fprintf(g.stderr, "Type the fingerprint the other side shows (bridge keys export): ")
		line, _ := bufio.NewReader(g.stdin).ReadString('\n')
		fp = strings.TrimSpace(line)
	}
	if strings.ToLower(strings.TrimSpace(fp)) != cd.Fingerprint {
		return &codeError{code: exitRejected, err: withHintf(fmt.Errorf("pair: fingerprint mismatch: the bundle in the folder shows %s", cd.Fingerprint),
			"do not trust it: someone else may have written it; check you are comparing with the right machine")}
	}
	p, err := h.Trust(cd.Bundle, c.Name)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"name": p.Name, "role": p.Role, "id": p.ID, "fingerprint": cd.Fingerprint})
	}
	g.printf("paired with %s %q (id %s)\n", p.Role, p.Name, p.ID)
	return nil
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

type KeysExportCmd struct{}

func (c *KeysExportCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"bundle": h.BundleText(), "fingerprint": h.Bundle().Fingerprint(), "id": h.Config.ID})
	}
	g.printf("%s\n", h.BundleText())
	g.note("fingerprint %s (compare it with what the other side shows)", h.Bundle().Fingerprint())
	return nil
}

type KeysTrustCmd struct {
	Bundle string `arg:"" help:"The line printed by 'bridge keys export' on the other side, or - to read it from stdin."`
	Name   string `placeholder:"NAME" help:"Local name for the peer (host: the [agents.NAME] of the policy)."`
}

func (c *KeysTrustCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	text := c.Bundle
	if text == "-" {
		b, err := io.ReadAll(io.LimitReader(g.stdin, 64<<10))
		if err != nil {
			return err
		}
		text = string(b)
	}
	p, err := h.Trust(text, c.Name)
	if err != nil {
		return err
	}
	b, _, _ := bcrypto.ParseBundleText(p.Bundle)
	if g.JSON {
		return g.printJSON(map[string]any{"name": p.Name, "role": p.Role, "id": p.ID, "fingerprint": b.Fingerprint()})
	}
	g.printf("trusted %s %q (id %s)\nfingerprint %s — check it matches what the other side shows\n", p.Role, p.Name, p.ID, b.Fingerprint())
	return nil
}

// ServeCmd runs the host daemon.
type ServeCmd struct {
	Rescan         time.Duration `default:"30s" help:"Interval of full folder rescans."`
	PendingTimeout time.Duration `name:"pending-timeout" default:"1h" help:"How long a request may wait for its payload to arrive complete before it is rejected as incomplete."`
	MaxQueueAge    time.Duration `name:"max-queue-age" default:"24h" help:"How long a request may wait on this host, whatever its own expiry says."`
	ApprovalTTL    time.Duration `name:"approval-ttl" default:"1h" help:"How long a request may wait for a human's approval."`
	AllowRoot      bool          `name:"allow-root" env:"BRIDGE_ALLOW_ROOT" help:"Allow serving as root (refused by default)."`
	LogFormat      string        `name:"log-format" enum:"text,json" default:"text" help:"Log format: text or json."`
	Verbose        bool          `short:"v" help:"Log debug detail."`
	SyncthingFlags `embed:""`
}

func (c *ServeCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	bridge.TuneDaemonGC()
	level := bridge.LogInfo
	if c.Verbose {
		level = bridge.LogDebug
	}
	logger := bridge.NewLogger(g.stderr, c.LogFormat, level)
	nudger, err := c.nudger(logger)
	if err != nil {
		return err
	}
	d, err := bridge.NewDaemon(h, bridge.DaemonOptions{Rescan: c.Rescan, PendingTimeout: c.PendingTimeout, MaxQueueAge: c.MaxQueueAge,
		AllowRoot: c.AllowRoot, ApprovalTTL: c.ApprovalTTL, Nudger: nudger, Logger: logger})
	if err != nil {
		return err
	}
	// Signals are caught before Open: a SIGINT while the daemon starts up
	// stops it cleanly once Open is done, instead of killing it midway.
	ctx, stop := signalContext()
	defer stop()
	if err := d.Open(); err != nil {
		return err
	}
	runErr := d.Run(ctx)
	// First signal: drain, giving running ops time to finish; a second
	// signal exits at once (signalContext).
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(runErr, d.Close(closeCtx))
}

// RunCmd submits, waits and prints.
type RunCmd struct {
	Op             string        `arg:"" help:"The op to run (see 'bridge ops')."`
	Args           []string      `arg:"" optional:"" help:"Arguments as NAME=VALUE."`
	Key            string        `placeholder:"K" help:"Idempotency key: running the same command with the same key again returns the first result."`
	Host           string        `placeholder:"NAME" help:"The host to ask (default: the only trusted host)."`
	Timeout        time.Duration `default:"10m" help:"How long to wait for the result (the request stays valid; use 'bridge wait ID')."`
	TTL            time.Duration `default:"24h" help:"How long the request stays valid on the host."`
	Stdin          string        `placeholder:"FILE" help:"Send FILE (or - for standard input) as the op's standard input."`
	Detach         bool          `help:"Submit and print the id without waiting."`
	SyncthingFlags `embed:""`
}

func (c *RunCmd) Run(g *Globals) error {
	cl, s, err := submit(g, c.Op, c.Args, c.Key, c.Host, c.Stdin, c.TTL, c.SyncthingFlags)
	if err != nil {
		return err
	}
	defer cl.Close()
	if c.Detach {
		return printSubmitted(g, s)
	}
	return waitAndPrint(g, cl, s.ID, c.Timeout, true)
}

// SubmitCmd submits only.
type SubmitCmd struct {
	Op             string        `arg:"" help:"The op to run."`
	Args           []string      `arg:"" optional:"" help:"Arguments as NAME=VALUE."`
	Key            string        `placeholder:"K" help:"Idempotency key."`
	Host           string        `placeholder:"NAME" help:"The host to ask."`
	TTL            time.Duration `default:"24h" help:"How long the request stays valid."`
	Stdin          string        `placeholder:"FILE" help:"Send FILE (or -) as the op's standard input."`
	SyncthingFlags `embed:""`
}

func (c *SubmitCmd) Run(g *Globals) error {
	cl, s, err := submit(g, c.Op, c.Args, c.Key, c.Host, c.Stdin, c.TTL, c.SyncthingFlags)
	if err != nil {
		return err
	}
	defer cl.Close()
	return printSubmitted(g, s)
}

func printSubmitted(g *Globals, s *bridge.Sent) error {
	if g.JSON {
		return g.printJSON(map[string]any{"id": s.ID, "host": s.HostName, "op": s.Op})
	}
	g.printf("%s\n", s.ID)
	return nil
}

func parseArgs(args []string) (map[string]string, error) {
	m := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, &codeError{code: exitUsage, err: withHintf(fmt.Errorf("argument %q is not NAME=VALUE", a),
				"give arguments as NAME=VALUE (e.g. msg=hi); `bridge ops` lists each op's arguments")}
		}
		if _, dup := m[k]; dup {
			return nil, &codeError{code: exitUsage, err: fmt.Errorf("argument %q given twice", k)}
		}
		m[k] = v
	}
	return m, nil
}

// homeFor checks a request id, then opens the home.
func homeFor(g *Globals, id string) (*bridge.Home, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	return g.openHome()
}

// clientFor checks a request id, then opens the agent's client.
func clientFor(g *Globals, id string) (*bridge.Client, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	return openClient(g)
}

func openClient(g *Globals) (*bridge.Client, error) {
	h, err := g.openHome()
	if err != nil {
		return nil, err
	}
	return bridge.OpenClient(h)
}

func submit(g *Globals, op string, args []string, key, host, stdin string, ttl time.Duration, st SyncthingFlags) (*bridge.Client, *bridge.Sent, error) {
	m, err := parseArgs(args)
	if err != nil {
		return nil, nil, err
	}
	nudger, err := st.nudger(bridge.NewLogger(g.stderr, "text", bridge.LogInfo))
	if err != nil {
		return nil, nil, err
	}
	cl, err := openClient(g)
	if err != nil {
		return nil, nil, err
	}
	cl.Nudger = nudger
	var in io.Reader
	switch stdin {
	case "":
	case "-":
		in = g.stdin
	default:
		f, err := os.Open(stdin)
		if err != nil {
			cl.Close()
			return nil, nil, err
		}
		defer f.Close()
		in = f
	}
	s, err := cl.Submit(bridge.SubmitOptions{Host: host, Op: op, Args: m, Key: key, Stdin: in, TTL: ttl})
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return cl, s, nil
}

// waitAndPrint waits for a result, prints the op's output and returns the
// error that carries the right exit code. ack: also ack and clean up.
func waitAndPrint(g *Globals, cl *bridge.Client, id string, timeout time.Duration, ack bool) error {
	ctx, stop := signalContext()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	prog := newProgress(g.stderr, id)
	out, err := cl.Wait(ctx, id, prog.tick)
	prog.done()
	if errors.Is(err, context.DeadlineExceeded) {
		return &codeError{code: exitWaitTime, id: id, err: withHintf(fmt.Errorf("no result for %s after %s", id, timeout),
			"the request stays queued; run `bridge wait %s` later, or `bridge status %s`", id, id)}
	}
	if errors.Is(err, context.Canceled) {
		// Interrupting the wait does not withdraw the request.
		return &codeError{code: exitInterrupt, id: id, err: withHintf(fmt.Errorf("interrupted while waiting for %s", id),
			"the request stays queued; run `bridge wait %s` later, or `bridge cancel %s`", id, id)}
	}
	if err != nil {
		return err
	}
	if ack {
		if err := cl.Ack(out); err != nil {
			g.note("warning: could not ack %s: %v", id, err)
		}
	}
	return printOutcome(g, out)
}

// checkID refuses what cannot be a request id before anything is opened.
func checkID(id string) error {
	if bridge.ValidID(id) {
		return nil
	}
	return &codeError{code: exitUsage, err: withHintf(fmt.Errorf("%q is not a request id (32 hex digits)", id),
		"`bridge ls` lists the request ids")}
}

func withHintf(err error, hint string, args ...any) error {
	return &bridge.HintError{Err: err, Hint: fmt.Sprintf(hint, args...)}
}

// printOutcome prints an op's output and returns the exit code as an error.
func printOutcome(g *Globals, out *bridge.Outcome) error {
	rc := out.Receipt
	code := exitFor(rc)
	if g.JSON {
		g.printJSON(map[string]any{"id": rc.ID, "op": rc.Op, "status": rc.Status, "reason": rc.Reason, "detail": rc.Detail,
			"exit_code": rc.ExitCode, "signal": rc.Signal, "timed_out": rc.TimedOut, "argv": rc.Argv,
			"stdout": string(out.Stdout), "stderr": string(out.Stderr), "stdout_truncated": rc.StdoutTruncated,
			"stderr_truncated": rc.StderrTruncated, "policy_sha256": rc.PolicySHA256, "bridge_exit_code": code})
	} else {
		g.stdout.Write(out.Stdout)
		g.stderr.Write(out.Stderr)
		switch rc.Status {
		case bridge.StatusDone:
			if rc.TimedOut {
				g.note("error: %s timed out on the host: %s", rc.Op, rc.Detail)
			} else if rc.Signal != "" {
				g.note("%s was killed by %s", rc.Op, rc.Signal)
			}
		default:
			g.note("error: request %s %s (%s): %s", rc.ID, rc.Status, rc.Reason, rc.Detail)
			if h := hintFor(rc); h != "" {
				g.note("hint: %s", h)
			}
		}
		if rc.StdoutTruncated || rc.StderrTruncated {
			g.note("warning: output was over the op's cap; the middle was dropped")
		}
	}
	if code == 0 {
		return nil
	}
	return &codeError{code: code}
}

func exitFor(rc *bridge.Receipt) int {
	switch rc.Status {
	case bridge.StatusDone:
		switch {
		case rc.TimedOut:
			return exitOpTimeout
		case rc.Signal != "" && rc.ExitCode < 0:
			if n := signalNumber(rc.Signal); n > 0 {
				return 128 + n
			}
			return exitError
		}
		return rc.ExitCode
	case bridge.StatusRejected:
		return exitRejected
	case bridge.StatusExpired:
		return exitExpired
	case bridge.StatusUncertain:
		return exitUncertain
	case bridge.StatusCancelled:
		return exitCancelled
	case bridge.StatusFailed:
		return exitStartFail
	}
	return exitError
}

func hintFor(rc *bridge.Receipt) string {
	switch rc.Reason {
	case "not-allowed":
		return "run `bridge ops` to see what this agent may run; the host's policy decides"
	case "bad-argument":
		return "run `bridge ops` to see each argument's type and pattern"
	case "crashed":
		return "on the host, check whether the op had its effect, then run `bridge reconcile ID --as done|failed|rerun`"
	case "incomplete":
		return "the payload never arrived complete; check the sync client, then run the command again"
	case bridge.ReasonCeiling:
		return "the host's policy caps this agent's runs; try again later (the detail names the ceiling)"
	}
	return ""
}

// StatusCmd shows a request's state.
type StatusCmd struct {
	ID string `arg:"" help:"Request id."`
}

func (c *StatusCmd) Run(g *Globals) error {
	cl, err := clientFor(g, c.ID)
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
	g.printf("%s  %s  %s", st.ID, st.Op, st.State)
	if st.Reason != "" {
		g.printf(" (%s)", st.Reason)
	}
	if st.ExitCode != nil {
		g.printf(" exit %d", *st.ExitCode)
	}
	g.printf("\n")
	return nil
}

// WaitCmd waits for a result without acking it.
type WaitCmd struct {
	ID      string        `arg:"" help:"Request id."`
	Timeout time.Duration `default:"10m" help:"How long to wait."`
}

func (c *WaitCmd) Run(g *Globals) error {
	cl, err := clientFor(g, c.ID)
	if err != nil {
		return err
	}
	defer cl.Close()
	return waitAndPrint(g, cl, c.ID, c.Timeout, false)
}

// ResultCmd prints a result that is already there.
type ResultCmd struct {
	ID  string `arg:"" help:"Request id."`
	Ack bool   `help:"Also ack the result and remove this agent's request files."`
}

func (c *ResultCmd) Run(g *Globals) error {
	cl, err := clientFor(g, c.ID)
	if err != nil {
		return err
	}
	defer cl.Close()
	out, err := cl.Result(c.ID)
	if errors.Is(err, bridge.ErrNoResult) {
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
	ID string `arg:"" help:"Request id."`
}

func (c *CancelCmd) Run(g *Globals) error {
	cl, err := clientFor(g, c.ID)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.Cancel(c.ID); err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"id": c.ID, "cancel": "sent"})
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
		entries, err := bridge.LedgerEntries(h)
		if err != nil {
			return err
		}
		if g.JSON {
			return g.printJSON(entries)
		}
		for _, e := range entries {
			g.printf("%s  %-10s %-12s %s %s\n", e.ID, e.Op, e.State, e.Agent, e.Reason)
		}
		return nil
	}
	cl, err := bridge.OpenClient(h)
	if err != nil {
		return err
	}
	defer cl.Close()
	sent, err := cl.List()
	if err != nil {
		return err
	}
	var states []*bridge.State
	for _, s := range sent {
		st, err := cl.Status(s.ID)
		if err != nil {
			st = &bridge.State{ID: s.ID, Op: s.Op, Host: s.HostName, State: "error: " + err.Error(), Created: s.Created}
		}
		states = append(states, st)
	}
	if g.JSON {
		return g.printJSON(states)
	}
	for _, st := range states {
		g.printf("%s  %s  %-10s %s\n", time.Unix(st.Created, 0).Format("2006-01-02 15:04:05"), st.ID, st.Op, st.State)
	}
	return nil
}

// OpsCmd shows the host's catalog.
type OpsCmd struct {
	Host string `placeholder:"NAME" help:"The host (default: the only trusted host)."`
}

func (c *OpsCmd) Run(g *Globals) error {
	cl, err := openClient(g)
	if err != nil {
		return err
	}
	defer cl.Close()
	cat, err := cl.Ops(c.Host)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(cat)
	}
	for _, op := range cat.Ops {
		g.printf("%s", op.Name)
		if op.Description != "" {
			g.printf(" — %s", op.Description)
		}
		g.printf("\n")
		for _, a := range op.Args {
			req := "optional"
			if a.Required {
				req = "required"
			}
			g.printf("    %s (%s, %s)", a.Name, a.Type, req)
			if a.Pattern != "" {
				g.printf(" pattern %s", a.Pattern)
			}
			if len(a.Values) > 0 {
				g.printf(" one of %s", strings.Join(a.Values, ", "))
			}
			if a.Default != nil {
				g.printf(" default %q", *a.Default)
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
	nudger, err := c.nudger(bridge.NewLogger(g.stderr, "text", bridge.LogInfo))
	if err != nil {
		return err
	}
	cl, err := openClient(g)
	if err != nil {
		return err
	}
	defer cl.Close()
	cl.Nudger = nudger
	start := time.Now()
	s, err := cl.Submit(bridge.SubmitOptions{Host: c.Host, Op: bridge.PingOp, TTL: time.Hour})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	out, err := cl.Wait(ctx, s.ID, nil)
	if errors.Is(err, context.DeadlineExceeded) {
		return &codeError{code: exitWaitTime, id: s.ID, err: withHintf(fmt.Errorf("no answer from %s after %s", s.HostName, c.Timeout), "is `bridge serve` running on the host, and is the folder syncing?")}
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

// ReconcileCmd settles an uncertain request on the host.
type ReconcileCmd struct {
	ID string `arg:"" help:"Request id."`
	As string `required:"" enum:"done,failed,rerun" placeholder:"done|failed|rerun" help:"done: it had its effect; failed: it did not; rerun: run it again."`
}

func (c *ReconcileCmd) Run(g *Globals) error {
	h, err := homeFor(g, c.ID)
	if err != nil {
		return err
	}
	e, err := bridge.Reconcile(h, c.ID, c.As)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(e)
	}
	g.printf("%s: %s\n", e.ID, e.State)
	return nil
}

// PolicyCmd groups policy commands.
type PolicyCmd struct {
	Check   PolicyCheckCmd   `cmd:"" help:"Check the policy file and list what each agent may run."`
	Explain PolicyExplainCmd `cmd:"" help:"Render an op's argv for given arguments, without running it."`
}

type PolicyCheckCmd struct {
	File string `arg:"" optional:"" help:"Policy file (default: policy.toml in the home)."`
}

func (c *PolicyCheckCmd) Run(g *Globals) error {
	file := c.File
	if file == "" {
		h, err := g.openHome()
		if err != nil {
			return err
		}
		file = h.Path(bridge.PolicyName)
	}
	sum, err := bridge.CheckPolicy(file)
	if err != nil {
		return policyError(err)
	}
	if g.JSON {
		return g.printJSON(sum)
	}
	g.printf("%s: ok (sha256 %s)\n", file, sum.SHA256)
	agents := make([]string, 0, len(sum.Agents))
	for a := range sum.Agents {
		agents = append(agents, a)
	}
	sort.Strings(agents)
	for _, a := range agents {
		g.printf("  agent %s may run: %s\n", a, strings.Join(sum.Agents[a], ", "))
	}
	return nil
}

// policyError: a policy that does not load or does not allow the call is
// "rejected" (66), as serve would reject it; a file that cannot be read is
// bridge's own failure (65).
func policyError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return err
	}
	return &codeError{code: exitRejected, err: err}
}

type PolicyExplainCmd struct {
	Op    string   `arg:"" help:"The op."`
	Args  []string `arg:"" optional:"" help:"Arguments as NAME=VALUE."`
	Agent string   `placeholder:"NAME" help:"Check as this agent (default: any agent that may run the op)."`
	File  string   `placeholder:"FILE" help:"Policy file (default: policy.toml in the home)."`
}

func (c *PolicyExplainCmd) Run(g *Globals) error {
	m, err := parseArgs(c.Args)
	if err != nil {
		return err
	}
	file := c.File
	if file == "" {
		h, err := g.openHome()
		if err != nil {
			return err
		}
		file = h.Path(bridge.PolicyName)
	}
	ex, err := bridge.ExplainPolicy(file, c.Agent, c.Op, m)
	if err != nil {
		return policyError(err)
	}
	if g.JSON {
		return g.printJSON(ex)
	}
	g.printf("%s", ex.Text)
	return nil
}

// GCCmd collects this side's own files.
type GCCmd struct {
	DryRun    bool          `name:"dry-run" help:"Only list what would be removed."`
	Grace     time.Duration `default:"1h" help:"Host: keep an acked result this long after its request finished."`
	Retention time.Duration `default:"720h" help:"Host: keep a result nobody acked this long after its request finished."`
}

func (c *GCCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	var items []string
	if h.Config.Role == "host" {
		rep, err := bridge.GC(h, bridge.GCOptions{Grace: c.Grace, Retention: c.Retention, DryRun: c.DryRun})
		if errors.Is(err, bridge.ErrQueued) {
			g.note("%v", err)
			return nil
		} else if err != nil {
			return err
		}
		if g.JSON {
			return g.printJSON(rep)
		}
		for _, it := range rep.Items {
			items = append(items, fmt.Sprintf("%s %s/%s (%s)", it.What, it.Agent, it.ID, it.Why))
		}
	} else {
		cl, err := bridge.OpenClient(h)
		if err != nil {
			return err
		}
		defer cl.Close()
		files, err := cl.GC(c.DryRun)
		if err != nil {
			return err
		}
		if g.JSON {
			return g.printJSON(map[string]any{"dry_run": c.DryRun, "files": files})
		}
		items = files
	}
	verb := "removed"
	if c.DryRun {
		verb = "would remove"
	}
	for _, it := range items {
		g.printf("%s %s\n", verb, it)
	}
	if len(items) == 0 {
		g.note("nothing to collect")
	}
	return nil
}

// PendingCmd lists requests awaiting approval.
type PendingCmd struct{}

func (c *PendingCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	list, err := bridge.Pending(h)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(list)
	}
	if len(list) == 0 {
		g.note("no request waits for approval")
	}
	for _, e := range list {
		g.printf("%s  %s  agent %s  waiting since %s\n    %s\n", e.ID, e.Op, e.Agent, e.Updated.Local().Format(time.DateTime), strings.ReplaceAll(e.Reason, "\n", "\n    "))
	}
	return nil
}

// ApproveCmd approves a waiting request.
type ApproveCmd struct {
	ID string `arg:"" help:"Request id (see 'bridge pending')."`
}

func (c *ApproveCmd) Run(g *Globals) error {
	h, err := homeFor(g, c.ID)
	if err != nil {
		return err
	}
	e, err := bridge.Approve(h, c.ID)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"id": e.ID, "op": e.Op, "decision": "approved"})
	}
	g.printf("approved %s (%s); the daemon runs it within a second\n", e.ID, e.Op)
	return nil
}

// DenyCmd denies a waiting request.
type DenyCmd struct {
	ID     string `arg:"" help:"Request id (see 'bridge pending')."`
	Reason string `placeholder:"TEXT" help:"Why, for the agent."`
}

func (c *DenyCmd) Run(g *Globals) error {
	h, err := homeFor(g, c.ID)
	if err != nil {
		return err
	}
	e, err := bridge.Deny(h, c.ID, c.Reason)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"id": e.ID, "op": e.Op, "decision": "denied"})
	}
	g.printf("denied %s (%s)\n", e.ID, e.Op)
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
	m, err := bridge.Send(h, c.To, text)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"id": m.ID, "seq": m.Seq, "to": c.To})
	}
	g.printf("sent message %d to %s (%s)\n", m.Seq, c.To, m.ID)
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
		var show []bridge.InboxItem
		for _, it := range items {
			if c.All || it.New {
				show = append(show, it)
			}
		}
		for _, it := range show {
			if g.JSON {
				enc := json.NewEncoder(g.stdout)
				enc.Encode(it)
				continue
			}
			from := it.HostName
			if it.Note.Kind == "notice" {
				from += " (" + it.Note.Event + ")"
			}
			g.printf("%s  %s  %s\n", it.Created.Local().Format(time.DateTime), from, it.Note.Text)
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
	rep, err := bridge.RepairLedger(h)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(rep)
	}
	if !rep.Damaged {
		g.printf("%s is intact; nothing to repair\n", rep.Path)
		return nil
	}
	g.printf("repaired %s: %s\nkept %d bytes (%d entries), dropped %d; the damaged file is kept as %s\n",
		rep.Path, rep.Problem, rep.BytesKept, rep.Entries, rep.BytesDropped, rep.Backup)
	return nil
}
