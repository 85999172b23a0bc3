// Command bridge lets an agent run allow-listed operations on a host through
// a synced folder. See README.md and docs/CLI.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/alecthomas/kong"
	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/syncthing"
	"github.com/syncbridge/bridge/bridge/trust"
)

// Exit codes (docs/CLI.md, "Exit status"). `bridge run` and `bridge result`
// exit with the operation's own code when it ran; these are bridge's own.
const (
	exitOK          = 0
	exitUsage       = 64 // bad command line
	exitError       = 65 // bridge itself failed: config, folder, keys, I/O
	exitRejected    = 66 // the host refused the request (policy, arguments, malformed, incomplete)
	exitExpired     = 67 // the request expired before it ran
	exitUncertain   = 68 // the host crashed while the op ran; a human must reconcile
	exitCancelled   = 69 // the request was cancelled
	exitStartFail   = 70 // the host could not start the op
	exitOpTimeout   = 71 // the op ran out of time on the host
	exitWaitTime    = 75 // gave up waiting; the request may still complete (`bridge wait ID`)
	exitNotAccepted = 77 // the host's liveness stamp says it accepts none of this agent's keys
	exitClock       = 78 // the host refused the request as dated in its future: a clock is wrong (not-yet-valid)
	exitInterrupt   = 130
	defaultHomeDir  = "bridge"
)

// codeError carries a specific exit code out of a command. err nil: the
// command already printed everything. id, if set, names the request the
// error is about (in --json output).
type codeError struct {
	code     int
	err      error
	id       string
	liveness *agent.Liveness // the host's, when it explains the error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

// Globals are the flags every command takes.
type Globals struct {
	Home    string           `name:"home" env:"BRIDGE_HOME" placeholder:"DIR" help:"State directory (default: the user config dir + /bridge). Never inside the synced folder."`
	JSON    bool             `name:"json" env:"BRIDGE_JSON" help:"Print machine-readable JSON; set BRIDGE_JSON=1 to make it the default."`
	Version kong.VersionFlag `name:"version" help:"Print the version and exit."`

	stdout io.Writer
	stderr io.Writer
	stdin  io.Reader

	// syncthing is the nudge flags of a command that has them, set before
	// it opens the home (homeNudger); nil: the environment and the home's
	// file decide.
	syncthing *SyncthingFlags
	nudger    *syncthing.Nudger // the home's, flushed at exit
	folder    string            // the home's bridge folder (with nudger)
	saidNudge bool              // its failure was said already (in a timeout's hint)
	// pipeNote, if set, says the warning of a piped standard input that
	// was not sent, once its look is done: before the op's output is
	// printed (waitAndPrint), else when the command ends.
	pipeNote func()
	// args is the command line as given (checkEmpty reads it).
	args []string
}

// CLI is the whole command line (docs/CLI.md).
type CLI struct {
	Globals

	Init       InitCmd       `cmd:"" help:"Create a host or agent home bound to a synced folder."`
	Keys       KeysCmd       `cmd:"" help:"Show, export, trust, rotate and revoke keys."`
	Pair       PairCmd       `cmd:"" help:"Trust the peer whose bundle is in the folder, after checking its fingerprint."`
	Serve      ServeCmd      `cmd:"" help:"Run the host daemon in the foreground."`
	Run        RunCmd        `cmd:"" help:"Agent: submit an op, wait, print its output and exit with its exit code."`
	Submit     SubmitCmd     `cmd:"" help:"Agent: submit an op and print the request id."`
	Status     StatusCmd     `cmd:"" help:"Agent: show a request's state (reads only)."`
	Wait       WaitCmd       `cmd:"" help:"Agent: wait for requests' results and print each as it lands (a pure read, unless --ack)."`
	Result     ResultCmd     `cmd:"" help:"Agent: print a request's output and exit with its exit code."`
	Cancel     CancelCmd     `cmd:"" help:"Agent: ask the host to cancel a request."`
	Ls         LsCmd         `cmd:"" help:"Agent: list sent requests. Host: list the ledger."`
	Ops        OpsCmd        `cmd:"" help:"Agent: list the ops the host offers (its signed catalog)."`
	Guide      GuideCmd      `cmd:"" help:"Agent: write how to use the bridge, from the host's catalog, for an AI agent to read."`
	Ping       PingCmd       `cmd:"" help:"Agent: a round trip through the sync with a built-in no-op."`
	Mcp        McpCmd        `cmd:"" name:"mcp" help:"Agent: serve the hosts' ops as MCP tools (stdio, or --http on loopback)."`
	Reconcile  ReconcileCmd  `cmd:"" help:"Host: settle an uncertain request."`
	GC         GCCmd         `cmd:"" name:"gc" help:"Remove this side's files the other side no longer needs."`
	Pending    PendingCmd    `cmd:"" help:"Host: list requests waiting for a human's approval."`
	Approve    ApproveCmd    `cmd:"" help:"Host: approve a request waiting for approval."`
	Deny       DenyCmd       `cmd:"" help:"Host: deny a request waiting for approval."`
	Send       SendCmd       `cmd:"" help:"Host: send a signed, sealed message to an agent's inbox."`
	Inbox      InboxCmd      `cmd:"" help:"Agent: read the hosts' messages and notices."`
	Logs       LogsCmd       `cmd:"" help:"Agent: print an op's output as the host streams it; -f follows it to the end."`
	Ledger     LedgerCmd     `cmd:"" help:"Host: ledger maintenance."`
	Policy     PolicyCmd     `cmd:"" help:"Host: check the policy or explain an op."`
	Audit      AuditCmd      `cmd:"" help:"Host: print or verify the hash-chained audit log."`
	Doctor     DoctorCmd     `cmd:"" help:"Check the set-up: folder, permissions, clocks, disk, sync litter, keys, daemon."`
	Service    ServiceCmd    `cmd:"" help:"Host: install bridge serve as a user service (systemd, launchd)."`
	Syncthing  SyncthingCmd  `cmd:"" help:"Set up the Syncthing nudge: find Syncthing's API and folder ids, optionally share the results on their own."`
	Demo       DemoCmd       `cmd:"" help:"Run the whole loop on temporary folders, no set-up needed."`
	Version    VersionCmd    `cmd:"" help:"Print the version, commit and platform of this build."`
	Help       HelpCmd       `cmd:"" help:"Show a command's help (bridge help COMMAND), or the manual page (--man)."`
	Completion CompletionCmd `cmd:"" help:"Print a shell completion script: bash, zsh or fish."`
}

func version() string { return currentVersion().Version }

func main() {
	host.RunnerMain()
	os.Exit(realMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// realMain parses args, runs the command and maps its error to an exit code.
// main_test.go runs it as the `bridge` command of the testscript scripts.
func realMain(args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	if kctx, g := fastParse(args, stdin, stdout, stderr); kctx != nil {
		return runParsed(kctx, g, stdout, stderr)
	}
	cli := CLI{}
	cli.stdout, cli.stderr, cli.stdin, cli.args = stdout, stderr, stdin, args
	exited := false
	parser, err := kong.New(&cli, parserOptions(stdout, stderr, func(c int) { exited = true; code = c; panic(kongExit{}) })...)
	if err != nil {
		fmt.Fprintf(stderr, "bridge: internal error: %v\n", err)
		return exitError
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(kongExit); ok && exited {
				return
			}
			panic(r)
		}
	}()
	kctx, err := parser.Parse(args)
	if err != nil {
		// Under --json a script reads the error on stdout as ever; the
		// flags may not be applied when the line did not parse.
		asJSON := cli.JSON || slices.Contains(args, "--json")
		if v, ok := os.LookupEnv("BRIDGE_JSON"); ok {
			b, _ := strconv.ParseBool(v)
			asJSON = asJSON || b
		}
		return report(stderr, &codeError{code: exitUsage, err: withHintf(mendShortFlag(err), "%s", parseHint(err, args))}, asJSON, stdout)
	}
	return runParsed(kctx, &cli.Globals, stdout, stderr)
}

// parserOptions are the kong options of the whole CLI and of the fast
// path's (fastParse).
func parserOptions(stdout, stderr io.Writer, exit func(int)) []kong.Option {
	return []kong.Option{
		kong.Name("bridge"),
		kong.Description(description),
		kong.Vars{"version": "bridge " + version()},
		kong.Writers(stdout, stderr),
		kong.Exit(exit),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	}
}

// runParsed runs the command a parse selected, with its globals g.
func runParsed(kctx *kong.Context, g *Globals, stdout, stderr io.Writer) int {
	if g.Home == "" && !noHome(kctx.Command()) {
		dir, err := os.UserConfigDir()
		if err != nil {
			fmt.Fprintf(stderr, "bridge: error: no --home given and no user config dir: %v\n", err)
			return exitError
		}
		g.Home = filepath.Join(dir, defaultHomeDir)
	}
	err := kctx.Run(g)
	if g.pipeNote != nil {
		g.pipeNote()
	}
	// The nudges of the command's last writes (an ack, a submit) go out
	// before the process does.
	g.nudger.Flush(2 * time.Second)
	if ferr := g.nudger.Failure(); ferr != nil && !g.saidNudge {
		// Once, in bridge's words, not as a log line.
		g.note("warning: %v: files sync on Syncthing's own schedule (seconds or more later); is Syncthing running here? `bridge doctor` checks", ferr)
	}
	if err == nil {
		return exitOK
	}
	return report(stderr, err, g.JSON, stdout)
}

// description opens `bridge --help` with what an agent needs first.
const description = `Run allow-listed operations on a host through a synced folder.

An agent needs five commands:
  bridge ops                        what the host offers, with a ready line per op
  bridge run OP NAME=VALUE...       run an op: its output, then its exit code
  bridge run OP --stdin=FILE        send FILE as the op's standard input
  bridge --json run OP ...          "exit_code" (the op's) vs "bridge_exit_code"
  bridge ls                         what was sent and how it ended
BRIDGE_JSON=1 makes --json the default. Exit codes: bridge run --help.`

// noHome: the commands that need no home, and may run where there is none.
func noHome(cmd string) bool {
	return cmd == "version" || cmd == "completion <shell>" || strings.HasPrefix(cmd, "help")
}

type kongExit struct{}

// parseHint is the hint for a command line that did not parse: the help of
// the command, or what went wrong where the parser's words would mislead
// ("bridge run --stdin hello": --stdin took the op as its file, and the
// parser says only that the op is missing).
func parseHint(err error, args []string) string {
	if i := slices.Index(args, "--stdin"); i >= 0 && i+1 < len(args) && strings.Contains(err.Error(), `expected "<op>"`) {
		return fmt.Sprintf("--stdin took %q as its file: name the op, then --stdin=FILE, or --stdin=- to send this command's input", args[i+1])
	}
	if strings.Contains(err.Error(), `but got "EOL"`) {
		return "a flag at the end of the command line has no value (an unset variable in a script?)"
	}
	if strings.Contains(err.Error(), "missing unit in duration") {
		return "a duration needs its unit: 30s, 5m, 1h30m"
	}
	if i := slices.Index(args, "--wait"); i >= 0 && i+1 < len(args) && strings.Contains(err.Error(), "unexpected argument "+args[i+1]) {
		// `pair --wait` takes its duration glued: alone it means the
		// default, so a separate word is an argument of its own.
		return fmt.Sprintf("pair's --wait takes its duration after an =: --wait=%s (alone, --wait waits 2 minutes)", args[i+1])
	}
	return fmt.Sprintf("run `%s --help`", helpPath(err))
}

// mendShortFlag replaces the parser's suggestion for an unknown short flag
// ("-k, did you mean "-h"?": any letter is one edit from any other) with
// the command's long flags that begin with that letter, or none.
func mendShortFlag(err error) error {
	var pe *kong.ParseError
	msg := err.Error()
	rest, ok := strings.CutPrefix(msg, "unknown flag -")
	if !errors.As(err, &pe) || pe.Context == nil || !ok || len(rest) < 1 || rest[0] == '-' ||
		len(rest) > 1 && !strings.HasPrefix(rest[1:], ",") {
		return err
	}
	letter := rest[:1]
	var names []string
	for _, f := range pe.Context.Flags() {
		// Not --version or --help: following "did you mean --version?"
		// for -v would print the version and run nothing.
		if !f.Hidden && f.Name != "version" && f.Name != "help" && strings.HasPrefix(f.Name, strings.ToLower(letter)) {
			names = append(names, fmt.Sprintf("%q", "--"+f.Name))
		}
	}
	text := "unknown flag -" + letter
	switch len(names) {
	case 0:
	case 1:
		text += ", did you mean " + names[0] + "?"
	default:
		text += ", did you mean one of " + strings.Join(names, ", ") + "?"
	}
	return &mendedError{text: text, err: err}
}

// mendedError says text in place of err's own message, and is err for
// errors.As (the hint reads the parser's context from it).
type mendedError struct {
	text string
	err  error
}

func (e *mendedError) Error() string { return e.text }
func (e *mendedError) Unwrap() error { return e.err }

// helpPath names the deepest command the parser recognised before it failed
// ("bridge keys"), so the hint points at help that exists.
func helpPath(err error) string {
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		if n := pe.Context.Selected(); n != nil {
			return n.FullPath()
		}
	}
	return "bridge"
}

// report prints an error with its hint and returns its exit code.
func report(stderr io.Writer, err error, asJSON bool, stdout io.Writer) int {
	var ce *codeError
	if errors.As(err, &ce) && ce.err == nil {
		return ce.code // the command already said everything
	}
	code, hint := errorCode(err)
	if asJSON {
		// bridge_exit_code, as in the output of a finished op, so a script
		// reads bridge's own code under one name whatever happened.
		// JSON escapes C0 controls itself, not C1 ones or bidi overrides.
		v := map[string]any{"error": escapeControls(err.Error()), "bridge_exit_code": code}
		if hint != "" {
			v["hint"] = escapeControls(hint)
		}
		if ce != nil && ce.id != "" {
			v["id"] = ce.id
		}
		if ce != nil && ce.liveness != nil {
			v["host_liveness"] = ce.liveness
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // as printJSON: "<op>" stays readable
		enc.Encode(v)
	}
	fmt.Fprintf(stderr, "bridge: error: %s\n", escapeControls(err.Error()))
	if hint != "" {
		fmt.Fprintf(stderr, "bridge: hint: %s\n", escapeControls(hint))
	}
	return code
}

// errorCode is the exit code an error stands for, and its hint.
func errorCode(err error) (code int, hint string) {
	code = exitError
	var ce *codeError
	if errors.As(err, &ce) {
		code = ce.code
	}
	if errors.Is(err, context.Canceled) {
		code = exitInterrupt
	}
	if code == exitError && (errors.Is(err, agent.ErrUnknownHost) || errors.Is(err, agent.ErrAmbiguousHost)) {
		code = exitUsage // --host names no trusted host, or is needed
	}
	if code == exitError && errors.Is(err, bridge.ErrTooLarge) {
		// Refused before sending what the host would refuse: the same code.
		code = exitRejected
	}
	var he *bridge.HintError
	if errors.As(err, &he) {
		hint = he.Hint
	}
	return code, hint
}

// signalContext is cancelled on the first SIGINT/SIGTERM; a second one runs
// beforeExit (if any) and exits at once with 130.
func signalContext(beforeExit ...func()) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		n := 0
		for range ch {
			n++
			if n == 1 {
				cancel()
				continue
			}
			for _, f := range beforeExit {
				f()
			}
			os.Exit(exitInterrupt)
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

func (g *Globals) printJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // an argv's "2>&1" stays readable
	return enc.Encode(v)
}

// printJSONLine prints v as one line of JSON lines, for a stream
// (`logs --json`, `inbox --json --follow`).
func (g *Globals) printJSONLine(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printf and note print lines for a person. Their values may carry text a
// folder writer chose (a name, an error quoting one, a peer's message), so
// every string and error among args is escaped (escapeControls); the format
// is ours and keeps its line breaks. The op's own output is not printed
// through these: it goes to stdout and stderr as it came.
func (g *Globals) printf(format string, args ...any) {
	fmt.Fprintf(g.stdout, format, escapeArgs(args)...)
}
func (g *Globals) note(format string, args ...any) {
	fmt.Fprintf(g.stderr, "bridge: "+format+"\n", escapeArgs(args)...)
}

// escapeControls returns s with every rune a terminal could act on written
// as in a Go string literal (\x1b, \a, \u009b): C0 and C1 controls but
// line feed and tab, DEL, invisible format characters such as bidi
// overrides, and bytes that are not UTF-8. Text without them is returned as
// it is, so ordinary messages and names stay readable.
func escapeControls(s string) string {
	clean := func(r rune) bool {
		return r == '\n' || r == '\t' || (r != utf8.RuneError && unicode.IsPrint(r) && !bridge.Invisible(r))
	}
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !clean(r) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	// Something is escaped: a backslash of the text is too, so that no
	// text can pass for an escape (or hide one).
	var b strings.Builder
	for i = 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case clean(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// escapeArgs applies escapeControls to the strings and errors among args.
func escapeArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = escapeControls(v)
		case error:
			out[i] = escapeControls(v.Error())
		case []string:
			c := make([]string, len(v))
			for j := range v {
				c[j] = escapeControls(v[j])
			}
			out[i] = c
		default:
			out[i] = a
		}
	}
	return out
}

// openHome opens the home. An ephemeral sandbox has none: with the agent's
// secret ($BRIDGE_AGENT_KEY or $BRIDGE_AGENT_KEY_FILE) and $BRIDGE_FOLDER
// set, it is rebuilt from them first (KEYS.md "Ephemeral sandboxes").
func (g *Globals) openHome() (*trust.Home, error) {
	h, err := g.openHomeOnly()
	if err != nil {
		return nil, err
	}
	if err := g.homeNudger(h); err != nil {
		return nil, err
	}
	return h, nil
}

func (g *Globals) openHomeOnly() (*trust.Home, error) {
	h, err := trust.OpenHome(g.Home)
	folder := os.Getenv("BRIDGE_FOLDER")
	if !errors.Is(err, trust.ErrNoHome) || folder == "" {
		return h, err
	}
	secret, serr := agentSecret(g, os.Getenv("BRIDGE_AGENT_KEY_FILE"))
	if serr != nil || secret == "" {
		return h, err
	}
	if _, rerr := trust.RestoreAgentHome(g.Home, folder, secret); rerr != nil && !errors.Is(rerr, trust.ErrHomeExists) {
		return nil, rerr
	}
	g.note("restored the agent's home %s from its secret", g.Home)
	h, err = trust.OpenHome(g.Home)
	if err == nil {
		g.noteNoNudge(h)
	}
	return h, err
}
