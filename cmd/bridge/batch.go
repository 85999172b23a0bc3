package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// Batches: `bridge submit --batch` sends many requests from one process
// (JSON lines on standard input), and `bridge wait` many ids, printing each
// answer as it lands. One process, one opened home and one catalog read per
// host, where a loop of `bridge submit` pays them per request.

// batchLine is one request of a batch: a line of JSON. Fields it does not
// know are refused (a misspelt "arg" would else send an op without its
// arguments).
type batchLine struct {
	Op    string            `json:"op"`
	Args  map[string]string `json:"args"`
	Key   string            `json:"key"`
	Host  string            `json:"host"`
	TTL   string            `json:"ttl"`
	Stdin *string           `json:"stdin"`
}

// maxBatchLine bounds one line: a request's standard input rides in it,
// and a longer input goes with `bridge submit --stdin FILE`.
const maxBatchLine = 1 << 20

// submitBatch sends each line of in as a request, in order, and prints
// each line's id or its refusal as it goes; a bad line does not stop the
// rest. It returns the code of the first refused line, if any.
func submitBatch(g *Globals, in io.Reader, defaultHost string, defaultTTL time.Duration, noCheck bool) error {
	cl, err := openClient(g)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, stop := signalContext()
	defer stop()
	b := &batch{g: g, cl: cl, noCheck: noCheck, cats: map[string]catalogRead{}}
	r := bufio.NewReaderSize(in, 64<<10)
	for n := 1; ; n++ {
		if ctx.Err() != nil {
			// Lines not read are not sent: the ids printed so far are
			// what went.
			return &codeError{code: exitInterrupt, err: withHintf(fmt.Errorf("interrupted at line %d", n),
				"the lines before it were sent (their ids are printed); send the rest again from line %d", n)}
		}
		line, long, err := readBatchLine(r)
		if len(line) == 0 && !long && err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("read the batch at line %d: %w", n, err)
		}
		if long {
			b.refuse(n, &codeError{code: exitUsage, err: withHintf(fmt.Errorf("longer than %d bytes", maxBatchLine),
				"send a large input on its own: `bridge submit OP --stdin FILE`")})
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue // a blank line is no request
		}
		b.send(n, line, defaultHost, defaultTTL)
	}
	if b.first != nil {
		code, _ := errorCode(b.first)
		return &codeError{code: code} // each refusal was said with its line
	}
	return nil
}

// catalogRead is a host's catalog as read once for a batch.
type catalogRead struct {
	cat *bridge.Catalog
	err error
}

type batch struct {
	g       *Globals
	cl      *agent.Client
	noCheck bool
	cats    map[string]catalogRead // by --host value
	first   error                  // the first refusal
}

// send parses, checks and sends line n.
func (b *batch) send(n int, line []byte, defaultHost string, defaultTTL time.Duration) {
	var l batchLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		b.refuse(n, &codeError{code: exitUsage, err: withHintf(fmt.Errorf("not a request: %v", err),
			`a line is one JSON object: {"op": "echo", "args": {"msg": "hi"}}, with "key", "host", "ttl" and "stdin" optional`)})
		return
	}
	if dec.More() {
		b.refuse(n, &codeError{code: exitUsage, err: withHintf(errors.New("more than one JSON value"), "one request per line")})
		return
	}
	if l.Op == "" {
		b.refuse(n, &codeError{code: exitUsage, err: withHintf(errors.New(`no "op"`), "`bridge ops` lists the ops")})
		return
	}
	if l.Host == "" {
		l.Host = defaultHost
	}
	ttl := defaultTTL
	if l.TTL != "" {
		d, err := time.ParseDuration(l.TTL)
		if err != nil {
			b.refuse(n, &codeError{code: exitUsage, err: withHintf(fmt.Errorf("ttl %q: %v", l.TTL, err), `a duration such as "1h" or "90m"`)})
			return
		}
		ttl = d
	}
	if ttl <= 0 || ttl > bridge.MaxValidity {
		b.refuse(n, &codeError{code: exitUsage, err: withHintf(fmt.Errorf("ttl %s: a request is valid for more than 0 and at most %s", ttl, bridge.MaxValidity),
			"the host refuses a longer one")})
		return
	}
	if l.Args == nil {
		l.Args = map[string]string{}
	}
	given := bridge.CallInput{}
	var in io.Reader
	if l.Stdin != nil {
		given = bridge.CallInput{Given: true, Len: int64(len(*l.Stdin))}
		in = strings.NewReader(*l.Stdin)
	}
	if !b.noCheck {
		if err := b.check(l.Host, l.Op, l.Args, given); err != nil {
			b.refuse(n, err)
			return
		}
	}
	s, err := b.cl.Submit(agent.SubmitOptions{Host: l.Host, Op: l.Op, Args: l.Args, Key: l.Key, Stdin: in, TTL: ttl})
	if err != nil {
		b.refuse(n, err)
		return
	}
	if b.g.JSON {
		b.g.printJSONLine(map[string]any{"line": n, "id": s.ID, "host": s.HostName, "op": s.Op})
	} else {
		b.g.printf("%d\t%s\n", n, s.ID)
	}
}

// check checks a call against its host's catalog, read once per host: as
// callInput does for one request, with its note said once.
func (b *batch) check(host, op string, args map[string]string, given bridge.CallInput) error {
	c, ok := b.cats[host]
	if !ok {
		c.cat, c.err = b.cl.Ops(host)
		b.cats[host] = c
		if c.err != nil && !errors.Is(c.err, agent.ErrUnknownHost) && !errors.Is(c.err, agent.ErrAmbiguousHost) {
			b.g.note("note: no catalog from host %q to check the batch against (%v); its lines go as they are, the host decides", host, c.err)
		}
	}
	if errors.Is(c.err, agent.ErrUnknownHost) || errors.Is(c.err, agent.ErrAmbiguousHost) {
		return c.err
	}
	if c.err != nil {
		return nil
	}
	if err := c.cat.CheckCall(op, args, given); err != nil {
		var ce *bridge.CallError
		if errors.As(err, &ce) {
			// The code the host's refusal would have had.
			return &codeError{code: exitRejected, err: err}
		}
		return err
	}
	return nil
}

// refuse says why line n was not sent, and goes on.
func (b *batch) refuse(n int, err error) {
	if b.first == nil {
		b.first = err
	}
	code, hint := errorCode(err)
	if b.g.JSON {
		v := map[string]any{"line": n, "error": escapeControls(err.Error()), "bridge_exit_code": code}
		if hint != "" {
			v["hint"] = escapeControls(hint)
		}
		b.g.printJSONLine(v)
	}
	b.g.note("error: line %d: %v", n, err)
	if hint != "" {
		b.g.note("hint: %s", hint)
	}
}

// readBatchLine reads one line without its newline. long: the line was
// over maxBatchLine, and was read to its end and dropped.
func readBatchLine(r *bufio.Reader) (line []byte, long bool, err error) {
	for {
		part, err := r.ReadSlice('\n')
		if !long {
			line = append(line, part...)
			if len(line) > maxBatchLine+1 {
				line, long = nil, true
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if long {
			return nil, true, err
		}
		return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")), false, err
	}
}

// waitMany waits for the answers to ids (all: and to every request this
// home sent whose answer it has not acked) and prints each as it lands
// (ack: then acks it): --json, one
// line of JSON each, as `wait --json` prints one; else a line naming it,
// then its output. It returns the code of the first id, in the order
// given, whose answer is not a success, or 75 if some are still
// unanswered at the timeout.
func waitMany(g *Globals, ids []string, all, ack bool, timeout time.Duration) error {
	cl, err := openClient(g)
	if err != nil {
		return err
	}
	defer cl.Close()
	ids, err = resolveIDs(cl, ids)
	if err != nil {
		return err
	}
	if all {
		more, err := cl.Outstanding()
		if err != nil {
			return err
		}
		ids = append(ids, more...)
		if len(ids) == 0 {
			if !g.JSON {
				g.note("nothing to wait for: every request this home sent has its answer, acked (`bridge ls`)")
			}
			return nil
		}
	}
	ctx, stop := signalContext()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	codes := map[string]int{}
	left, werr := cl.WaitAll(ctx, ids, func(id string, out *agent.Outcome, err error) {
		if err != nil {
			var na *agent.NotAcceptedError
			if errors.As(err, &na) {
				err = notAccepted(id, na.Liveness)
			}
			codes[id] = printItemError(g, id, err)
			return
		}
		defer out.Close()
		codes[id] = printAnswer(g, out)
		if ack {
			if err := cl.Ack(out); err != nil {
				g.note("warning: could not ack %s: %v", id, err)
			}
		}
	})
	for _, id := range left {
		err := &codeError{code: exitWaitTime, id: id, err: withHintf(fmt.Errorf("no result for %s after %s", id, timeout),
			"the request is not withdrawn: the host goes on with it; run `bridge wait %s` later, or `bridge status %s`", id, id)}
		if errors.Is(werr, context.Canceled) {
			err = &codeError{code: exitInterrupt, id: id, err: withHintf(fmt.Errorf("interrupted while waiting for %s", id),
				"the request is not withdrawn: the host goes on with it; run `bridge wait %s` later", id)}
		}
		codes[id] = printItemError(g, id, err)
	}
	for _, id := range ids {
		if c := codes[id]; c != 0 {
			return &codeError{code: c} // each was said with its id
		}
	}
	return nil
}

// resolveIDs checks each id, and makes whole the ones given by their first
// 8 or more digits (as clientFor does for one).
func resolveIDs(cl *agent.Client, ids []string) ([]string, error) {
	var sent []agent.Sent
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		prefix := len(id) >= 8 && len(id) < 32 && bridge.ValidID(id+strings.Repeat("0", 32-len(id)))
		if !prefix {
			if err := checkID(id); err != nil {
				return nil, err
			}
			out = append(out, id)
			continue
		}
		if sent == nil {
			var err error
			if sent, err = cl.List(); err != nil {
				return nil, err
			}
		}
		var found []string
		for _, s := range sent {
			if strings.HasPrefix(s.ID, id) {
				found = append(found, s.ID)
			}
		}
		switch len(found) {
		case 1:
			out = append(out, found[0])
		case 0:
			return nil, withHintf(fmt.Errorf("no request %s… was sent from this home", id), "`bridge ls` lists the request ids")
		default:
			return nil, withHintf(fmt.Errorf("%s… names %d requests: %s", id, len(found), strings.Join(found, ", ")), "give more of its digits")
		}
	}
	return out, nil
}

// printAnswer prints one answer of many and returns its exit code.
func printAnswer(g *Globals, out *agent.Outcome) int {
	rc := out.Receipt
	if g.JSON {
		v, err := outcomeJSON(out)
		if err != nil {
			return printItemError(g, rc.ID, err)
		}
		g.printJSONLine(v)
		return exitFor(rc)
	}
	head := rc.Status
	if rc.Status == bridge.StatusDone {
		head = fmt.Sprintf("exit %d", rc.ExitCode)
	}
	g.printf("== %s %s: %s\n", rc.ID, rc.Op, head)
	err := printOutcome(g, out)
	code, _ := errorCode(err)
	if err == nil {
		code = 0
	}
	var ce *codeError
	if err != nil && !errors.As(err, &ce) {
		g.note("error: %s: %v", rc.ID, err)
	}
	return code
}

// printItemError says why there is no answer for id, and returns its code.
func printItemError(g *Globals, id string, err error) int {
	code, hint := errorCode(err)
	if g.JSON {
		v := map[string]any{"id": id, "error": escapeControls(err.Error()), "bridge_exit_code": code}
		if hint != "" {
			v["hint"] = escapeControls(hint)
		}
		g.printJSONLine(v)
	}
	g.note("error: %v", err)
	if hint != "" {
		g.note("hint: %s", hint)
	}
	return code
}
