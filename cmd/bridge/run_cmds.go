package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// bridge run and bridge submit, and what every command that shows a result
// shares: argument parsing, waiting, printing an outcome, the exit code.

// RunCmd submits, waits and prints.
type RunCmd struct {
	Op             string        `arg:"" help:"The op to run (see 'bridge ops')."`
	Args           []string      `arg:"" optional:"" help:"Arguments as NAME=VALUE."`
	Key            string        `placeholder:"K" help:"Idempotency key: running the same command with the same key again returns the first result."`
	Host           string        `placeholder:"NAME" help:"The host to ask (default: the only trusted host)."`
	Timeout        time.Duration `default:"10m" help:"How long to wait for the result (the request stays valid; use 'bridge wait ID')."`
	TTL            time.Duration `default:"24h" help:"How long the request stays valid on the host."`
	Stdin          string        `placeholder:"FILE" help:"Send FILE (or - for standard input) as the op's standard input. Without it, this command's own input (a file or a pipe) is sent only to an op whose input is required (docs/CLI.md)."`
	NoCheck        bool          `name:"no-check" help:"Send without checking the op and arguments against the host's catalog (when its policy changed since); the host decides."`
	Detach         bool          `help:"Submit and print the id without waiting."`
	SyncthingFlags `embed:""`
}

func (c *RunCmd) Run(g *Globals) error {
	if err := checkEmpty(g.args, "--key", "--host", "--stdin"); err != nil {
		return err
	}
	if !c.Detach {
		if err := checkTimeout(c.Timeout, true); err != nil {
			return err
		}
	}
	// A host whose fresh stamp refuses this agent's key would never run
	// it: say so now rather than after --timeout. One read of one file,
	// with the client the request is then sent with (the home is opened
	// once); a home that does not open is submit's to report.
	g.syncthing = &c.SyncthingFlags
	pre, err := openClient(g)
	if err == nil {
		if lv, lerr := pre.HostLiveness(c.Host); lerr == nil && lv.Verdict == agent.LivenessNotAccepted {
			pre.Close()
			return notAccepted("", lv)
		}
	}
	cl, s, err := submitWith(g, pre, c.Op, c.Args, c.Key, c.Host, c.Stdin, c.NoCheck, c.TTL, c.SyncthingFlags)
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
	Op             string        `arg:"" optional:"" help:"The op to run (none with --batch)."`
	Args           []string      `arg:"" optional:"" help:"Arguments as NAME=VALUE."`
	Key            string        `placeholder:"K" help:"Idempotency key."`
	Host           string        `placeholder:"NAME" help:"The host to ask."`
	TTL            time.Duration `default:"24h" help:"How long the request stays valid."`
	Stdin          string        `placeholder:"FILE" help:"Send FILE (or -) as the op's standard input (as for run)."`
	NoCheck        bool          `name:"no-check" help:"Send without checking against the host's catalog."`
	Batch          bool          `help:"Read many requests from standard input, one JSON object a line ({\"op\": ..., \"args\": {...}, \"key\": ..., \"host\": ..., \"ttl\": ..., \"stdin\": ...}); print each line's number and id, or its refusal, as it goes."`
	SyncthingFlags `embed:""`
}

func (c *SubmitCmd) Run(g *Globals) error {
	if err := checkEmpty(g.args, "--key", "--host", "--stdin"); err != nil {
		return err
	}
	if c.Batch {
		if c.Op != "" || len(c.Args) > 0 || c.Key != "" || c.Stdin != "" {
			return &codeError{code: exitUsage, err: withHintf(errors.New("--batch takes its requests from standard input, not the command line"),
				`give each line its "op", "args", "key" and "stdin"; --host, --ttl and --no-check apply to every line`)}
		}
		g.syncthing = &c.SyncthingFlags
		return submitBatch(g, g.stdin, c.Host, c.TTL, c.NoCheck)
	}
	if c.Op == "" {
		return &codeError{code: exitUsage, err: withHintf(errors.New("submit: no op given"),
			"`bridge submit OP NAME=VALUE...`, or `bridge submit --batch` with one JSON request a line on standard input; `bridge ops` lists the ops")}
	}
	cl, s, err := submit(g, c.Op, c.Args, c.Key, c.Host, c.Stdin, c.NoCheck, c.TTL, c.SyncthingFlags)
	if err != nil {
		return err
	}
	defer cl.Close()
	return printSubmitted(g, s)
}

// emptyFlagWhy says, per flag that must not be given empty, what leaving
// its value out would do instead.
var emptyFlagWhy = map[string]string{
	"--key":         "a send with it would have no key, so a retry would run again",
	"--host":        "without it, bridge picks the host itself (the only trusted one)",
	"--stdin":       "without it, this command's own input (a pipe, a loop's list) may be sent instead, to an op whose input is required",
	"--fingerprint": "without it, pair asks on the terminal",
	"--name":        "without it, the peer's own name is used",
	"--peer":        "without it, pair looks for the one new peer in the folder",
}

// checkEmpty refuses any of flags given an empty value on the command line
// (a script's "$KEY" with KEY unset): without a word, the command would go
// on as if the flag were absent (emptyFlagWhy). Kong cannot tell an empty
// value from an absent flag, so the command line is looked at.
func checkEmpty(args []string, flags ...string) error {
	for i, a := range args {
		if a == "--" {
			break
		}
		for _, f := range flags {
			if a == f+"=" || a == f && i+1 < len(args) && args[i+1] == "" {
				return &codeError{code: exitUsage, err: withHintf(fmt.Errorf("%s is empty", f),
					"give it a value, or leave %s out (an unset variable in a script?): %s", f, emptyFlagWhy[f])}
			}
		}
	}
	return nil
}

// checkTimeout refuses a --timeout that would end the wait before it began:
// the request would be sent, and bridge would give up at once (75).
func checkTimeout(d time.Duration, sends bool) error {
	if d > 0 {
		return nil
	}
	hint := "how long to wait, e.g. --timeout 30s"
	if sends {
		hint += "; to send without waiting, use `bridge submit` (or run --detach)"
	}
	return &codeError{code: exitUsage, err: withHintf(fmt.Errorf("--timeout %s: must be more than 0", d), "%s", hint)}
}

func printSubmitted(g *Globals, s *agent.Sent) error {
	if g.JSON {
		return g.printJSON(map[string]any{"id": s.ID, "host": s.HostName, "op": s.Op})
	}
	_, err := fmt.Fprintf(g.stdout, "%s\n", s.ID)
	return err // the id not printed: a caller cannot follow the request it sent
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

// bareWordError is the error for a bare word among a call's arguments
// (`bridge run test TestAdd`) with a hint from the host's catalog: when op
// takes exactly one argument, the word is surely its value, and the hint
// says it as NAME=VALUE; else the op's usage line. nil without a catalog
// or the op (parseArgs's own error stands).
func (g *Globals) bareWordError(hostName, op string, args []string) error {
	word := ""
	for _, a := range args {
		if k, _, ok := strings.Cut(a, "="); !ok || k == "" {
			word = a
			break
		}
	}
	if word == "" || strings.HasPrefix(word, "=") {
		return nil
	}
	cl, err := openClient(g)
	if err != nil {
		return nil
	}
	defer cl.Close()
	cat, err := cl.Ops(hostName)
	if err != nil {
		return nil
	}
	for i := range cat.Ops {
		info := &cat.Ops[i]
		if info.Name != op {
			continue
		}
		err := fmt.Errorf("argument %q is not NAME=VALUE", word)
		if len(info.Args) == 1 {
			return &codeError{code: exitUsage, err: withHintf(err, "did you mean %s=%s? op %s takes one argument, %s; usage: %s",
				info.Args[0].Name, word, op, info.Args[0].Name, bridge.ExampleLine(info))}
		}
		return &codeError{code: exitUsage, err: withHintf(err, "give arguments as NAME=VALUE; usage: %s", bridge.ExampleLine(info))}
	}
	return nil
}

// clientFor checks a request id, then opens the agent's client.
// clientFor opens the agent's client for a command on request *id: a
// whole id, or the first 8 or more of its digits when they name one request
// this home sent (as `bridge ls` shows it), which *id is then set to.
func clientFor(g *Globals, id *string) (*agent.Client, error) {
	prefix := len(*id) >= 8 && len(*id) < 32 && bridge.ValidID(*id+strings.Repeat("0", 32-len(*id)))
	if !prefix {
		if err := checkID(*id); err != nil {
			return nil, err
		}
	}
	cl, err := openClient(g)
	if err != nil || !prefix {
		return cl, err
	}
	sent, err := cl.List()
	if err != nil {
		cl.Close()
		return nil, err
	}
	var found []string
	for _, s := range sent {
		if strings.HasPrefix(s.ID, *id) {
			found = append(found, s.ID)
		}
	}
	switch len(found) {
	case 1:
		*id = found[0]
		return cl, nil
	case 0:
		cl.Close()
		return nil, withHintf(fmt.Errorf("no request %s… was sent from this home", *id), "`bridge ls` lists the request ids")
	}
	cl.Close()
	return nil, withHintf(fmt.Errorf("%s… names %d requests: %s", *id, len(found), strings.Join(found, ", ")), "give more of its digits")
}

func openClient(g *Globals) (*agent.Client, error) {
	h, err := g.openHome()
	if err != nil {
		return nil, err
	}
	cl, err := agent.OpenClient(h)
	if err != nil {
		return nil, err
	}
	// The output is written as it is opened, never held whole in memory
	// (printOutcome).
	cl.StreamOutput = true
	return cl, nil
}

func submit(g *Globals, op string, args []string, key, hostName, stdin string, noCheck bool, ttl time.Duration, st SyncthingFlags) (*agent.Client, *agent.Sent, error) {
	return submitWith(g, nil, op, args, key, hostName, stdin, noCheck, ttl, st)
}

// submitWith is submit with the client cl, if not nil, opened already with
// the same nudge flags (it is closed on failure, as submit's own is).
func submitWith(g *Globals, cl *agent.Client, op string, args []string, key, hostName, stdin string, noCheck bool, ttl time.Duration, st SyncthingFlags) (*agent.Client, *agent.Sent, error) {
	g.syncthing = &st
	m, err := parseArgs(args)
	if err == nil && (ttl <= 0 || ttl > bridge.MaxValidity) {
		err = &codeError{code: exitUsage, err: withHintf(fmt.Errorf("--ttl %s: a request is valid for more than 0 and at most %s", ttl, bridge.MaxValidity),
			"the host refuses a longer one; pass --ttl 24h (the default) or up to %s", bridge.MaxValidity)}
	} else if err != nil {
		if e := g.bareWordError(hostName, op, args); e != nil {
			err = e
		}
	}
	if err != nil {
		if cl != nil {
			cl.Close()
		}
		return nil, nil, err
	}
	if cl == nil {
		if cl, err = openClient(g); err != nil {
			return nil, nil, err
		}
	}
	in, done, err := g.callInput(cl, hostName, op, m, stdin, noCheck)
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	defer done()
	s, err := cl.Submit(agent.SubmitOptions{Host: hostName, Op: op, Args: m, Key: key, Stdin: in, TTL: ttl, NoCheck: noCheck})
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return cl, s, nil
}

// waitAndPrint waits for a result, prints the op's output and returns the
// error that carries the right exit code. ack: also ack and clean up.
func waitAndPrint(g *Globals, cl *agent.Client, id string, timeout time.Duration, ack bool) error {
	ctx, stop := signalContext()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	prog := newProgress(g.stderr, id)
	prog.state = func() string {
		if st, err := cl.Status(id); err == nil {
			return st.State
		}
		return ""
	}
	if s, err := cl.Sent(id); err == nil {
		prog.liveness = func() *agent.Liveness {
			lv, _ := cl.HostLiveness(s.Host)
			return lv
		}
		prog.route = g.routeCheck(s.Host, s.HostName)
	}
	tick := prog.tick
	var st *streamer
	if !g.JSON {
		// The op's output as it arrives; the spinner gives way to it.
		st = newStreamer(g, cl, id, func() { prog.done(); prog.quiet() })
		tick = func(e time.Duration) { st.poll(); prog.tick(e) }
	}
	out, err := cl.Wait(ctx, id, tick)
	prog.done()
	if g.pipeNote != nil {
		g.pipeNote()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return g.withNudgeFailure(func() error {
			if err := routeTimeout(prog, id, timeout); err != nil {
				return err
			}
			if prog.awaiting {
				return &codeError{code: exitWaitTime, id: id, err: withHintf(fmt.Errorf("no result for %s after %s: it waits for a human's approval on the host", id, timeout),
					"the request stays queued until it is approved, denied or its approval times out; run `bridge wait %s` later", id)}
			}
			if st, err := cl.Status(id); err == nil {
				switch {
				case st.Reason == string(bridge.ReasonPastExpiry):
					s, _ := cl.Sent(id)
					// The host's stamp goes with it, as with any time-out:
					// whether the host can still answer in time is its.
					var lv *agent.Liveness
					msg := fmt.Sprintf("no result for %s after %s, and it is past its expiry", id, timeout)
					if s != nil {
						if lv, _ = cl.HostLiveness(s.Host); lv != nil && lv.Verdict != agent.LivenessOK {
							msg += ": " + lv.Message
						}
					}
					return &codeError{code: exitWaitTime, id: id, liveness: lv, err: withHintf(errors.New(msg), "%s", pastExpiry(s, id, st.State == bridge.StateRunning))}
				case st.State == bridge.StateRerunOrdered:
					return &codeError{code: exitWaitTime, id: id, err: withHintf(fmt.Errorf("no new answer for %s after %s: a human on the host ordered it run again", id, timeout),
						"run `bridge wait %s` later for the rerun's answer", id)}
				}
			}
			if lv := prog.alarm(); lv != nil {
				s, _ := cl.Sent(id)
				hint := fmt.Sprintf("the request stays queued and runs if the host sees it before %s; once the host runs and the folder syncs, `bridge wait %s` gets its answer (`bridge doctor` shows each host's liveness); `bridge cancel %s` withdraws it", expiryOf(s), id, id)
				if lv.Verdict == agent.LivenessNoStamp {
					hint = fmt.Sprintf("the request stays queued and runs if the host sees it before %s; once the host has paired this agent and `bridge serve` runs there, `bridge wait %s` gets its answer; `bridge cancel %s` withdraws it", expiryOf(s), id, id)
				}
				return &codeError{code: exitWaitTime, id: id, liveness: lv, err: withHintf(fmt.Errorf("no result for %s after %s: %s", id, timeout, lv.Message), "%s", hint)}
			}
			// The host looks alive: its stamp still goes with the error, so a
			// script can tell a slow op from a host that is down (CLI.md).
			var lv *agent.Liveness
			s, serr := cl.Sent(id)
			if serr == nil {
				lv, _ = cl.HostLiveness(s.Host)
			}
			return &codeError{code: exitWaitTime, id: id, liveness: lv, err: withHintf(fmt.Errorf("no result for %s after %s", id, timeout),
				"%s", notWithdrawn(s, id, runningPastExpiry(cl, s)))}
		}())
	}
	var na *agent.NotAcceptedError
	if errors.As(err, &na) {
		return notAccepted(id, na.Liveness)
	}
	if errors.Is(err, context.Canceled) {
		// Interrupting the wait does not withdraw the request.
		return &codeError{code: exitInterrupt, id: id, err: withHintf(fmt.Errorf("interrupted while waiting for %s", id),
			"%s", notWithdrawn(nil, id, false))}
	}
	if err != nil {
		return err
	}
	// Printed first, acked after: the ack (the home's copies of the result,
	// then <id>.ack) is not on the path the user waits on. A process killed
	// between the two leaves the result in the folder unacked, where
	// `bridge result ID --ack` or a later `run --key` finds it.
	var perr error
	if st != nil && !g.JSON {
		so, se := st.skip(out)
		perr = printOutcomeTo(g, out, &skipWriter{w: g.stdout, skip: so}, &skipWriter{w: g.stderr, skip: se})
	} else {
		perr = printOutcome(g, out)
	}
	var ce *codeError
	if ack && (perr == nil || errors.As(perr, &ce)) {
		// Not when the output could not be written: unacked, it can be
		// printed again (`bridge result ID`).
		if err := cl.Ack(out); err != nil {
			g.note("warning: could not ack %s: %v", id, err)
		}
	}
	return perr
}

// notAccepted is the error of a command that stops because the host's
// stamp says it accepts none of this agent's keys. id: the request sent,
// if any.
func notAccepted(id string, lv *agent.Liveness) error {
	hint := "a human on the host runs `bridge keys show` there. Not listed: pair it (`bridge pair` on both sides). " +
		"Its key revoked (a revoked key is never trusted again): `bridge keys rotate` here, then on the host " +
		"`bridge keys remove <this agent's name>` and `bridge pair --fingerprint <this agent's new fingerprint>` (docs/KEYS.md)"
	if id != "" {
		hint += "; the request sent will not run"
	}
	return &codeError{code: exitNotAccepted, id: id, liveness: lv, err: withHintf(errors.New(lv.Message), "%s", hint)}
}

// checkID refuses what cannot be a request id before anything is opened.
func checkID(id string) error {
	if bridge.ValidID(id) {
		return nil
	}
	return &codeError{code: exitUsage, err: withHintf(fmt.Errorf("%q is not a request id (32 hex digits, or the first 8 or more)", id),
		"`bridge ls` lists the request ids")}
}

func withHintf(err error, hint string, args ...any) error {
	return &bridge.HintError{Err: err, Hint: fmt.Sprintf(hint, args...)}
}

// opExitCode is the op's exit code for --json: null when it never ran
// (refused, expired, cancelled before it started), so a script never reads a
// refusal as a success.
func opExitCode(rc *bridge.Receipt) any {
	if rc.Status != bridge.StatusDone {
		return nil
	}
	return rc.ExitCode
}

// printOutcome prints an op's output and returns the exit code as an error.
func printOutcome(g *Globals, out *agent.Outcome) error {
	return printOutcomeTo(g, out, g.stdout, g.stderr)
}

// printOutcomeTo is printOutcome with the op's output written to stdout and
// stderr (what a stream printed already is skipped).
func printOutcomeTo(g *Globals, out *agent.Outcome, stdout, stderr io.Writer) error {
	rc := out.Receipt
	code := exitFor(rc)
	if g.JSON {
		v, err := outcomeJSON(out)
		if err != nil {
			return err
		}
		if err := g.printJSON(v); err != nil {
			return err // not acked: the answer was not written
		}
	} else {
		if out.Earlier {
			g.note("note: request %s was sent before with this key; this is that send's answer: the op did not run again, and standard input, which is not part of the key, was not sent (use a new key for new input)", rc.ID)
		}
		if err := out.WriteOutput(stdout, stderr); err != nil {
			return err
		}
		switch rc.Status {
		case bridge.StatusDone:
			if rc.TimedOut {
				g.note("error: %s timed out on the host: %s", rc.Op, rc.Detail)
				g.note("hint: the policy's timeout for %s stopped it; it may have had part of its effect", rc.Op)
			} else if rc.Signal != "" {
				g.note("%s was killed by %s", rc.Op, rc.Signal)
			} else if rc.Reason == bridge.ReasonReconciled {
				// Its run was cut off; the output (if any) is the check's.
				g.note("note: request %s done (reconciled): %s", rc.ID, rc.Detail)
			}
		default:
			how := rc.Status
			if rc.Reason != "" && string(rc.Reason) != rc.Status {
				how += " (" + string(rc.Reason) + ")" // never "cancelled (cancelled)"
			}
			// The host's detail may name the request again ("request ID:
			// expired: ..."): said once.
			if detail := strings.TrimPrefix(rc.Detail, "request "+rc.ID+": "); detail != "" {
				g.note("error: request %s %s: %s", rc.ID, how, detail)
			} else {
				g.note("error: request %s %s", rc.ID, how)
			}
			if h := hintFor(rc, out.Result.Agent); h != "" {
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

// outcomeJSON is an outcome as --json prints it.
func outcomeJSON(out *agent.Outcome) (map[string]any, error) {
	rc := out.Receipt
	argv := rc.Argv
	if argv == nil {
		argv = []string{} // a settled or refused request ran nothing
	}
	// One JSON document holds the output as strings: in memory.
	var stdout, stderr bytes.Buffer
	if err := out.WriteOutput(&stdout, &stderr); err != nil {
		return nil, err
	}
	op := rc.Op
	if op == "" && out.Sent != nil {
		// Refused before the host opened the call (its times, its key):
		// the op is the one this agent sent.
		op = out.Sent.Op
	}
	return map[string]any{"id": rc.ID, "op": op, "status": rc.Status, "reason": rc.Reason, "detail": rc.Detail,
		"exit_code": opExitCode(rc), "signal": rc.Signal, "timed_out": rc.TimedOut, "argv": argv,
		"stdout": stdout.String(), "stderr": stderr.String(), "stdout_truncated": rc.StdoutTruncated,
		"stderr_truncated": rc.StderrTruncated, "policy_sha256": rc.PolicySHA256, "bridge_exit_code": exitFor(rc), "earlier_send": out.Earlier}, nil
}

// notWithdrawn is the hint of a wait that ended without an answer while the
// host looked alive (or nothing says otherwise): what may still happen to
// the request, until when, and how to withdraw it.
func notWithdrawn(s *agent.Sent, id string, running bool) string {
	if h := pastExpiry(s, id, running); h != "" {
		return h
	}
	until := expiryOf(s)
	return fmt.Sprintf("the request is not withdrawn: if the host is up it goes on with it (queued, running, or waiting for a human's approval), "+
		"and it may still run until %s; run `bridge wait %s` later, or `bridge status %s`; `bridge cancel %s` withdraws it", until, id, id, id)
}

// withNudgeFailure adds to a wait's time-out the failed Syncthing nudge,
// when there was one: the likeliest reason nothing came back.
func (g *Globals) withNudgeFailure(err error) error {
	f := g.nudger.Failure()
	var ce *codeError
	if f == nil || !errors.As(err, &ce) {
		return err
	}
	g.saidNudge = true
	cause, hint := ce.err, "is Syncthing running here? (`bridge doctor` checks its API); without the nudge each hop waits for Syncthing's own schedule"
	var h *bridge.HintError
	if errors.As(ce.err, &h) {
		cause, hint = h.Err, hint+"; "+h.Hint
	}
	ce.err = withHintf(fmt.Errorf("%w; and %v", cause, f), "%s", hint)
	return ce
}

// pastExpiry is the hint for a request s with no answer once its expiry
// passed ("" before); running: the host's progress says it started. The
// host judges the expiry by its own clock, which it lets run behind this
// one by up to its skew (it refuses a request dated further ahead): until
// the expiry plus the skew such a host may still start it, and until twice
// the skew it answers it `expired`; after that a host that sees it only
// then refuses it without an answer (SPEC §8). One the host saw or started
// in time and was out of reach since still answers, whatever the time:
// the agent cannot tell that from the folder.
func pastExpiry(s *agent.Sent, id string, running bool) string {
	if s == nil || s.Expires == 0 || time.Now().Unix() < s.Expires {
		return ""
	}
	expires := time.Unix(s.Expires, 0)
	at := expires.Local().Format(time.DateTime)
	if running {
		return fmt.Sprintf("it is past its expiry (%s), but it started before it (the host's progress says so): its answer comes once the host has finished it "+
			"(one that stopped while it ran answers `uncertain` when it serves again); run `bridge wait %s` later", at, id)
	}
	if time.Now().Before(expires.Add(2 * bridge.DefaultSkew)) {
		return fmt.Sprintf("it is past its expiry (%s): the host will not start it now unless its clock runs behind this one's (it allows up to %s); "+
			"it answers it `expired` if it sees it within %s of the expiry by its own clock (up to %s by this one's), and nothing if it sees it later; "+
			"an answer still comes if it started in time (`bridge status %s` says `running` once the host's progress shows it); "+
			"if it is still needed, send it again after %s (sooner, a host whose clock lags could run both), or `bridge cancel %s` first "+
			"(`--forget` also stops waiting for it here)",
			at, bridge.DefaultSkew, bridge.DefaultSkew, 2*bridge.DefaultSkew, id, expires.Add(bridge.DefaultSkew).Local().Format(time.DateTime), id)
	}
	return fmt.Sprintf("it is past its expiry (%s) by more than %s: it will not start now, and a host that sees it only now "+
		"refuses it without an answer (SPEC §8); an answer still comes if the host saw or started it in time and was out of reach since "+
		"(`bridge doctor` shows its liveness); `bridge cancel %s --forget` withdraws it and stops waiting for it here; send it again if it is still needed "+
		"(if the op must not run twice, check on the host first: `bridge ls` there)",
		at, 2*bridge.DefaultSkew, id)
}

// runningPastExpiry reports whether request s is past its expiry and the
// host's progress says it started: read only then (pastExpiry's case).
func runningPastExpiry(cl *agent.Client, s *agent.Sent) bool {
	return s != nil && s.Expires > 0 && time.Now().Unix() >= s.Expires && cl.Started(s.ID)
}

// expiryOf says when the request s expires: "its expiry (TIME)", or "its
// expiry (--ttl)" when s is not known here.
func expiryOf(s *agent.Sent) string {
	if s != nil && s.Expires > 0 {
		return "its expiry (" + time.Unix(s.Expires, 0).Local().Format(time.DateTime) + ")"
	}
	return "its expiry (--ttl)"
}

// reasonNotYetValid is the host's reason for a request dated in its future.
const reasonNotYetValid = "not-yet-valid"

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
		if rc.Reason == reasonNotYetValid {
			return exitClock // not a bad call: fixing a clock and sending again is
		}
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

func hintFor(rc *bridge.Receipt, agent string) string {
	return bridge.NextStep(rc, bridge.HintWords{Ops: "run `bridge ops`", Again: "send it again", Retry: "run the command again",
		Settle: fmt.Sprintf("A human on the host checks, then runs `bridge reconcile %s/%s --as done|failed|rerun`; "+
			"`bridge status %s` then shows the new answer, and `bridge wait %s` waits for a rerun's", agent, rc.ID, rc.ID, rc.ID)})
}
