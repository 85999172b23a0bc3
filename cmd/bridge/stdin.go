package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// The standard input of `bridge run` and `bridge submit`, and the check of
// a call against the host's catalog before it is sent (docs/CLI.md,
// "Standard input" and "Checked before sending").
//
// --stdin=FILE or --stdin=- sends it. Without --stdin, what bridge does
// depends on the op's stdin mode in the host's catalog, because standard
// input is often not meant for the op at all: the rest of a `while read`
// loop's list, or of a script run as `sh < script.sh`.
//   - required: it is read as the op's input, with a note, when it is a
//     file or a pipe (one that stays open and empty too: the op needs
//     it); a terminal, the null device, an empty file or a closed empty
//     pipe is nothing, refused as the op's input is missing;
//   - optional (declared, or the default), or not known (no catalog): it
//     is never read; when it is a file at its start with bytes in it (not
//     a loop's list, which a read has moved into) or a pipe with bytes in
//     it within pipeWait, a warning says it was not sent and how to send
//     it (--stdin=-);
//   - none: it is never read, and nothing is said: the op could not have
//     used it.
// A regular file's length is what is left to read from its offset (a loop
// has read part of it); a size of 0 means "not known" (/proc files), and
// its first bytes are read to find out.

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

// inspectStdin says what r is and, for a regular file, how many bytes are
// left to read from its current offset; -1 when its size is 0, which for
// a file in /proc or /sys says nothing of what a read returns.
func inspectStdin(r io.Reader) (*os.File, stdinKind, int64) {
	f, ok := r.(*os.File)
	if !ok || f == nil {
		return nil, stdinNone, 0
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, stdinNone, 0
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		if fi.Size() == 0 {
			return f, stdinFile, -1
		}
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			off = 0
		}
		return f, stdinFile, max(fi.Size()-off, 0)
	case m&(os.ModeNamedPipe|os.ModeSocket) != 0:
		return f, stdinPipe, -1
	}
	return nil, stdinNone, 0
}

// fileInput is what to send of regular file f with left bytes left to read
// (-1: not known). A file of unknown length has its first bytes read to
// tell an empty file (0, nothing to send) from one in /proc (-1, the bytes
// read and the rest).
func fileInput(f *os.File, left int64) (io.Reader, int64) {
	if left >= 0 {
		return f, left
	}
	buf := make([]byte, 64<<10)
	got, _ := f.Read(buf)
	if got == 0 {
		return f, 0
	}
	return io.MultiReader(bytes.NewReader(buf[:got]), f), -1
}

// hasBytes reports, without reading them away, whether standard input f
// has bytes for a reader: a file with some left, a pipe with some in it
// within pipeWait.
func hasBytes(f *os.File, kind stdinKind, left int64) bool {
	switch {
	case kind == stdinFile && left == -1:
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return false
		}
		n, _ := f.ReadAt(make([]byte, 1), off)
		return n > 0
	case kind == stdinFile:
		return left > 0
	case kind == stdinPipe:
		_, data := pipeReady(f, pipeWait)
		return data
	}
	return false
}

// watchPipe looks for bytes in pipe f for up to pipeWait, beside the
// command, and returns what says the warning if there were some: it waits
// no longer than that look already did; a look still going on is finished
// by a look that does not wait.
func watchPipe(f *os.File, warn func()) func() {
	seen := make(chan bool, 1)
	fd := f.Fd()
	go func() {
		_, data := pollReady(fd, pipeWait)
		seen <- data
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			var data bool
			select {
			case data = <-seen:
			default:
				_, data = pollReady(fd, 0)
			}
			if data {
				warn()
			}
		})
	}
}

// implicitStdin is the op's input when --stdin was not given, by the rule
// above; mode "" is not known (no catalog).
func (g *Globals) implicitStdin(op, mode string) (io.Reader, bridge.CallInput) {
	f, kind, left := inspectStdin(g.stdin)
	if kind == stdinNone || mode == bridge.StdinNone {
		return nil, bridge.CallInput{}
	}
	if mode != bridge.StdinRequired {
		warn := func(what string) {
			g.note("warning: standard input (%s) was not sent: op %s's input is optional and bridge sends it only when told; to send it: --stdin=- (or --stdin=FILE)", what, op)
		}
		if kind == stdinPipe {
			// Only a warning hangs on it, nothing sent: the look at the
			// pipe goes on beside the request rather than before it (a
			// harness's pipe that stays open and empty cost every call
			// pipeWait), and is said when the command ends (pipeNote).
			g.pipeNote = watchPipe(f, func() { warn("a pipe") })
			return nil, bridge.CallInput{}
		}
		// A file read from its start is one the user redirected to this
		// command (< fix.patch); one a loop has read into (while read x;
		// ...; done < list.txt) is the loop's list, and a warning on every
		// turn of the loop would only be noise.
		if off, err := f.Seek(0, io.SeekCurrent); (err != nil || off == 0) && hasBytes(f, kind, left) {
			warn("a file")
		}
		return nil, bridge.CallInput{}
	}
	if kind == stdinFile {
		in, n := fileInput(f, left)
		if n == 0 {
			return nil, bridge.CallInput{}
		}
		g.note("note: sending standard input (redirected from a file) as %s's input, which it requires; --stdin=FILE or --stdin=- says so explicitly", op)
		return in, bridge.CallInput{Given: true, Len: n}
	}
	ready, data := pipeReady(f, pipeWait)
	switch {
	case data:
		g.note("note: sending standard input (from a pipe) as %s's input, which it requires; --stdin=- says so explicitly", op)
	case ready:
		return nil, bridge.CallInput{} // closed and empty
	default:
		// Open and empty: the op needs input, so wait for its end.
		g.note("note: reading standard input (a pipe) to its end as %s's input, which it requires", op)
	}
	return f, bridge.CallInput{Given: true, Len: -1}
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
	var given bridge.CallInput
	switch flag {
	case "-":
		in, given = g.stdin, bridge.CallInput{Given: true, Len: -1}
		if f, kind, left := inspectStdin(g.stdin); kind == stdinFile {
			in, given.Len = fileInput(f, left)
		}
	case "":
		mode := ""
		switch {
		case op == bridge.PingOp:
			mode = bridge.StdinNone
		case info != nil:
			mode = info.StdinMode()
		case catErr == nil:
			// Not in the catalog: refused below, and its input is moot.
			mode = bridge.StdinNone
		}
		in, given = g.implicitStdin(op, mode)
	default:
		f, err := os.Open(flag)
		if err != nil {
			return nil, done, &codeError{code: exitUsage, err: withHintf(fmt.Errorf("--stdin: %w", err), "name a readable file, or - for standard input")}
		}
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			f.Close()
			return nil, done, &codeError{code: exitUsage, err: withHintf(fmt.Errorf("--stdin: %s is a directory", flag), "name a readable file, or - for standard input")}
		}
		in, given, done = f, bridge.CallInput{Given: true, Len: -1}, func() { f.Close() }
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			left := fi.Size()
			if left == 0 {
				left = -1
			}
			in, given.Len = fileInput(f, left)
		}
	}
	if flag != "" && given.Len == 0 && info != nil && info.StdinMode() == bridge.StdinNone {
		// An explicit --stdin to an op that takes none is refused whatever
		// it holds, as it is for /dev/null or a pipe (CLI.md): an empty
		// file is no exception.
		given.Len = -1
	}
	if in != nil && given.Given && given.Len < 0 && info != nil && info.StdinMode() == bridge.StdinRequired {
		// Of unknown length (a pipe, /dev/null): an empty one is refused
		// here as an empty file is, not sent for the host to refuse. The
		// op needs the input whole anyway, so waiting for its first byte
		// costs nothing.
		br := bufio.NewReader(in)
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			given.Len = 0
		}
		in = br
	}
	if noCheck {
		return in, done, nil
	}
	if errors.Is(catErr, agent.ErrUnknownHost) || errors.Is(catErr, agent.ErrAmbiguousHost) {
		done()
		return nil, func() {}, catErr // not sent anywhere: no note that it is
	}
	if catErr != nil {
		g.note("note: no catalog from the host to check the call against (%v); sending it as it is, the host decides", catErr)
		return in, done, nil
	}
	if cat.Warning != "" {
		g.note("warning: %s", cat.Warning)
	}
	if cat.Stale {
		// It may describe another policy than the host's: the host decides.
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
