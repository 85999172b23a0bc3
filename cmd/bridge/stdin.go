package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// The standard input of `bridge run` and `bridge submit`, and the check of
// a call against the host's catalog before it is sent (docs/CLI.md,
// "Standard input" and "Checked before sending").
//
// The rule, without --stdin:
//   - standard input is a terminal, the null device or absent: nothing is
//     sent (and an op that requires input is refused here);
//   - it is a file (`< fix.patch`) with bytes in it: sent when the op takes
//     input (the redirection says what was meant), refused when it takes
//     none;
//   - it is a pipe: if bytes are in it within pipeWait, as for a file; if
//     it is closed and empty, nothing; if it stays open and empty, it is
//     read (waiting for its end) only when the op requires input, else not
//     read (a pipe an agent's harness leaves open would hang the command)
//     and a warning says so and how to send it (--stdin=-).
//
// Nothing is ever dropped silently.

// pipeWait is how long a look at a piped standard input waits for its
// first bytes: long enough for `cat fix.patch |`, short enough not to
// notice for a pipe that never brings any.
const pipeWait = 300 * time.Millisecond

// stdinKind is what the command's standard input is connected to.
type stdinKind int

const (
	stdinNone stdinKind = iota // a terminal, /dev/null, or not a file at all
	stdinFile                  // a regular file
	stdinPipe                  // a pipe or socket: its length is known only once read
)

func inspectStdin(r io.Reader) (stdinKind, int64) {
	f, ok := r.(*os.File)
	if !ok || f == nil {
		return stdinNone, 0
	}
	fi, err := f.Stat()
	if err != nil {
		return stdinNone, 0
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		return stdinFile, fi.Size()
	case m&(os.ModeNamedPipe|os.ModeSocket) != 0:
		return stdinPipe, -1
	}
	return stdinNone, 0
}

// callInput resolves the op's standard input from --stdin (flag) and the
// command's own, and, unless noCheck, checks the call against the host's
// catalog. It returns the reader to send (nil: none) and a function that
// closes what it opened.
func (g *Globals) callInput(cl *agent.Client, hostName, op string, args map[string]string, flag string, noCheck bool) (io.Reader, func(), error) {
	done := func() {}
	var info *bridge.OpInfo
	cat, catErr := cl.Ops(hostName)
	if catErr == nil {
		for i := range cat.Ops {
			if cat.Ops[i].Name == op {
				info = &cat.Ops[i]
			}
		}
	}
	var in io.Reader
	given := bridge.CallInput{Len: 0}
	switch flag {
	case "-":
		in, given.Given = g.stdin, true
		if k, n := inspectStdin(g.stdin); k == stdinFile {
			given.Len = n
		} else {
			given.Len = -1
		}
	case "":
		kind, n := inspectStdin(g.stdin)
		mode := ""
		if info != nil {
			mode = info.StdinMode()
		}
		var src io.Reader = g.stdin
		from := "redirected from a file"
		if kind == stdinPipe && op != bridge.PingOp {
			// Look without waiting long: a pipe with bytes in it (or one
			// already closed) says what was meant; an open, empty one may
			// be a harness's and would block a read for ever.
			kind, n = stdinNone, 0
			if f := g.stdin.(*os.File); pipeReady(f, pipeWait) {
				buf := make([]byte, 64<<10)
				if got, _ := f.Read(buf); got > 0 {
					kind, n, src, from = stdinFile, -1, io.MultiReader(bytes.NewReader(buf[:got]), f), "from a pipe"
				}
			} else if mode == bridge.StdinRequired {
				in, given = g.stdin, bridge.CallInput{Given: true, Len: -1}
				break
			} else {
				why := "it is sent only with --stdin=- (or --stdin=FILE)"
				if mode == bridge.StdinNone {
					why = fmt.Sprintf("op %s takes none", op)
				}
				g.note("warning: standard input is a pipe with nothing in it yet; it was not read or sent: %s", why)
			}
		}
		switch {
		case kind != stdinFile || n == 0:
		case mode == bridge.StdinNone:
			// Refused by the check below, with the op's usage.
			given = bridge.CallInput{Given: true, Len: n}
		default:
			in, given = src, bridge.CallInput{Given: true, Len: n}
			g.note("note: sending standard input (%s) as %s's input; --stdin=FILE or --stdin=- says so explicitly", from, op)
		}
	default:
		f, err := os.Open(flag)
		if err != nil {
			return nil, done, &codeError{code: exitUsage, err: withHintf(fmt.Errorf("--stdin: %w", err), "name a readable file, or - for standard input")}
		}
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			given.Len = -1
		} else {
			given.Len = fi.Size()
		}
		in, given.Given, done = f, true, func() { f.Close() }
	}
	if noCheck {
		return in, done, nil
	}
	if catErr != nil {
		g.note("note: no catalog from the host to check the call against (%v); sending it as it is, the host decides", catErr)
		return in, done, nil
	}
	if err := cat.CheckCall(op, args, given); err != nil {
		done()
		var ce *bridge.CallError
		if errors.As(err, &ce) {
			// The code the host's refusal would have had.
			return nil, func() {}, &codeError{code: exitRejected, err: err}
		}
		return nil, func() {}, err
	}
	return in, done, nil
}
