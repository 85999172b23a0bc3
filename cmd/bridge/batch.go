package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
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
	// Lines are read on a goroutine of their own, one ahead at most, so a
	// signal ends the batch at once while it waits for input (a producer
	// that is idle): what was not sent yet is not sent.
	type read struct {
		line []byte
		long bool
		err  error
	}
	lines := make(chan read)
	go func() {
		r := bufio.NewReaderSize(in, 64<<10)
		for {
			line, long, err := readBatchLine(r)
			select {
			case lines <- read{line, long, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for n := 1; ; n++ {
		var next read
		select {
		case <-ctx.Done():
		case next = <-lines:
		}
		if ctx.Err() != nil {
			// Lines not read are not sent: the ids printed so far are
			// what went.
			return &codeError{code: exitInterrupt, err: withHintf(fmt.Errorf("interrupted at line %d: it was not sent", n),
				"the lines before it were sent (their ids are printed); send the rest again from line %d", n)}
		}
		line, long, err := next.line, next.long, next.err
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
		if b.broken != nil {
			return withHintf(b.broken, "it and the lines before it were sent; their ids are in `bridge ls` (a batch sent again with keys sends nothing twice)")
		}
	}
	if b.first == nil && b.sent == 0 && !g.JSON {
		g.note("note: the batch held no request: nothing was sent")
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
	sent    int                    // lines sent (or found sent before)
	broken  error                  // standard output failed: nothing more is sent
}

// send parses, checks and sends line n.
func (b *batch) send(n int, line []byte, defaultHost string, defaultTTL time.Duration) {
	var l batchLine
	if err := checkLineShape(line); err != nil {
		b.refuse(n, &codeError{code: exitUsage, err: err})
		return
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		b.refuse(n, &codeError{code: exitUsage, err: lineError(err)})
		return
	}
	if l.Op == "" {
		b.refuse(n, &codeError{code: exitUsage, err: withHintf(errors.New(`no "op"`), "`bridge ops` lists the ops")})
		return
	}
	ownHost := l.Host != ""
	if !ownHost {
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
	hostErr := func(err error) error {
		if ownHost && (errors.Is(err, agent.ErrUnknownHost) || errors.Is(err, agent.ErrAmbiguousHost)) {
			// Said of the line's "host", not of a --host flag.
			_, hint := errorCode(err)
			return &codeError{code: exitUsage, err: withHintf(fmt.Errorf("host %q: no trusted host has that name or id", l.Host), "%s", hint)}
		}
		return err
	}
	if !b.noCheck {
		if err := b.check(l.Host, l.Op, l.Args, given); err != nil {
			b.refuse(n, hostErr(err))
			return
		}
	}
	// NoCheck: the input's length was checked above, against the catalog
	// Submit would read again for it (or there is none to check).
	s, err := b.cl.Submit(agent.SubmitOptions{Host: l.Host, Op: l.Op, Args: l.Args, Key: l.Key, Stdin: in, TTL: ttl, NoCheck: true})
	if err != nil {
		b.refuse(n, hostErr(err))
		return
	}
	b.sent++
	var werr error
	if b.g.JSON {
		werr = b.g.printJSONLine(map[string]any{"line": n, "id": s.ID, "host": s.HostName, "op": s.Op, "earlier_send": s.Earlier})
	} else {
		_, werr = fmt.Fprintf(b.g.stdout, "%d\t%s\n", n, s.ID)
	}
	if werr != nil {
		// An id that cannot be printed is a request the caller cannot
		// follow: stop sending.
		b.broken = fmt.Errorf("print the id of line %d (%s, sent): %w", n, s.ID, werr)
		return
	}
	if s.Earlier && !b.g.JSON {
		if l.Stdin != nil {
			b.g.note("note: line %d: sent before with key %q (as %s): not sent again, nor its standard input (not part of the key)", n, l.Key, s.ID)
		} else {
			b.g.note("note: line %d: sent before with key %q (as %s): not sent again", n, l.Key, s.ID)
		}
	}
}

// check checks a call against its host's catalog, read once per host: as
// callInput does for one request, with its note said once.
func (b *batch) check(host, op string, args map[string]string, given bridge.CallInput) error {
	c, ok := b.cats[host]
	if !ok {
		c.cat, c.err = b.cl.Ops(host)
		if errors.Is(c.err, agent.ErrUnknownHost) || errors.Is(c.err, agent.ErrAmbiguousHost) {
			// Not kept: a batch may name any number of hosts that do not
			// exist; only the trusted ones' catalogs are.
			return c.err
		}
		b.cats[host] = c
		switch {
		case c.err != nil:
			b.g.note("note: no catalog from host %q to check the batch against (%v); its lines go as they are, the host decides", host, c.err)
		case c.cat.Warning != "":
			b.g.note("warning: %s", c.cat.Warning)
		}
	}
	if c.err != nil || c.cat.Stale {
		return nil // none, or one that may be older than the host's policy: the host decides
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

// lineHint is what a line holds.
const lineHint = `a line is one JSON object: {"op": "echo", "args": {"msg": "hi"}}, with "key", "host", "ttl" and "stdin" optional`

// lineError says, in a batch's own terms, why a line is not a request.
func lineError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return withHintf(fmt.Errorf("not a request: not JSON at byte %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: ")), lineHint)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return withHintf(errors.New("not a request: the JSON is cut short"), lineHint)
	case errors.As(err, &typ):
		return withHintf(fmt.Errorf("%q: %s, where it is a string", typ.Field, withArticle(typ.Value)), lineHint)
	}
	return withHintf(fmt.Errorf("not a request: %v", err), lineHint)
}

// batchFields are a line's fields, as they are spelt: JSON decoding into a
// struct would take "OP" for "op", and the last of two "args" silently.
var batchFields = []string{"op", "args", "key", "host", "ttl", "stdin"}

// checkLineShape refuses a line that is not one JSON object of known fields,
// each given once and not null, whose "args" is an object of strings, each
// given once: what decoding would let through quietly (a field spelt in
// another case, a repeated one, a null key that makes the request unkeyed,
// an argument given twice or as a number).
func checkLineShape(line []byte) error {
	seen := map[string]bool{}
	dec, err := eachMember(line, func(name string, v json.RawMessage) error {
		if !slices.Contains(batchFields, name) {
			for _, known := range batchFields {
				if strings.EqualFold(name, known) || strings.HasPrefix(name, known) || strings.HasPrefix(known, name) {
					return withHintf(fmt.Errorf("unknown field %q", name), "did you mean %q? %s", known, lineHint)
				}
			}
			return withHintf(fmt.Errorf("unknown field %q", name), lineHint)
		}
		if seen[name] {
			return withHintf(fmt.Errorf("field %q given twice", name), "give each field once")
		}
		seen[name] = true
		want := "a string"
		if name == "args" {
			want = `an object of strings, {"NAME": "VALUE"}`
		}
		switch {
		case string(v) == "null":
			return withHintf(fmt.Errorf("%q: null, where it is %s", name, want), "leave the field out instead")
		case name == "args" && v[0] != '{':
			return withHintf(fmt.Errorf(`"args": %s, where it is %s`, withArticle(rawKind(v)), want), lineHint)
		case name != "args" && v[0] != '"':
			return withHintf(fmt.Errorf("%q: %s, where it is a string", name, withArticle(rawKind(v))), lineHint)
		case name == "args":
			return checkArgsShape(v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if rest := bytes.TrimSpace(line[dec.InputOffset():]); len(rest) > 0 {
		return withHintf(fmt.Errorf("more after the request: %q", string(rest[:min(len(rest), 20)])), "one request per line")
	}
	return nil
}

// checkArgsShape refuses an "args" object with an argument given twice or
// as anything but a string.
func checkArgsShape(obj json.RawMessage) error {
	seen := map[string]bool{}
	_, err := eachMember(obj, func(name string, v json.RawMessage) error {
		if seen[name] {
			return withHintf(fmt.Errorf("argument %q given twice", name), "give each argument once")
		}
		seen[name] = true
		if v[0] != '"' {
			return withHintf(fmt.Errorf("argument %q: %s, where arguments are strings", name, withArticle(rawKind(v))),
				`give every argument's value as a JSON string, e.g. {"%s": "2"}; the host's catalog says what it must hold`, name)
		}
		return nil
	})
	return err
}

// eachMember calls f with each member of the JSON object that data starts
// with, in order, repeats included (which decoding would fold), and returns
// the decoder past the object's end.
func eachMember(data []byte, f func(name string, v json.RawMessage) error) (*json.Decoder, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, lineError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, withHintf(fmt.Errorf("not a request: %s, not an object", withArticle(tokenKind(tok))), lineHint)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, lineError(err)
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, lineError(err)
		}
		if err := f(name, bytes.TrimSpace(v)); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, lineError(err)
	}
	return dec, nil
}

// rawKind names the kind of a JSON value by its first byte.
func rawKind(v json.RawMessage) string {
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// tokenKind names the kind of a JSON token that starts a value.
func tokenKind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			return "array"
		}
		return "object"
	case string:
		return "string"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	return "number"
}

// withArticle is kind with "a" or "an" before it.
func withArticle(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
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
			if len(bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))) > maxBatchLine {
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
// printed, whose answer is not a success (answers print as they land, then
// the ids still unanswered at the timeout, 75).
func waitMany(g *Globals, ids []string, all, ack bool, timeout time.Duration) error {
	cl, err := openClient(g)
	if err != nil {
		return err
	}
	defer cl.Close()
	g.stdout = &lineTracker{w: g.stdout}
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
				g.note("nothing to wait for: every request this home sent has its answer, acked, or was forgotten (`cancel --forget`; `bridge ls`)")
			}
			return nil
		}
	}
	ctx, stop := signalContext()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	first := 0 // the code of the first answer printed that is not a success
	note := func(code int) {
		if first == 0 {
			first = code
		}
	}
	// What a host's stamp says while the wait goes on (stopped, silent,
	// never stamped, serving again), once per change, as one wait says it.
	said := map[string]*progress{}
	for _, id := range ids {
		if s, err := cl.Sent(id); err == nil && said[s.Host] == nil {
			p := newProgress(g.stderr, "")
			p.route = g.routeCheck(s.Host, s.HostName)
			said[s.Host] = p
		}
	}
	tick := func(elapsed time.Duration) {
		for host, p := range said {
			if lv, err := cl.HostLiveness(host); err == nil {
				p.elapsed = elapsed
				p.sayLiveness(lv)
			}
			p.checkRoute(elapsed)
		}
	}
	left, werr := cl.WaitAll(ctx, ids, func(id string, out *agent.Outcome, err error) {
		if err != nil {
			var na *agent.NotAcceptedError
			if errors.As(err, &na) {
				err = notAccepted(id, na.Liveness)
			}
			note(printItemError(g, id, err))
			return
		}
		defer out.Close()
		code, printed := printAnswer(g, out)
		note(code)
		if ack && printed {
			// Not when the answer could not be written: unacked, it is
			// printed again by the next wait (as one wait --ack does).
			if err := cl.Ack(out); err != nil {
				g.note("warning: could not ack %s: %v", id, err)
			}
		}
	}, tick)
	lives := map[string]*agent.Liveness{} // by host id: one look each
	for _, id := range left {
		var err error
		if errors.Is(werr, context.Canceled) {
			err = &codeError{code: exitInterrupt, id: id, err: withHintf(fmt.Errorf("interrupted while waiting for %s", id),
				"%s", notWithdrawn(nil, id, false))}
		} else {
			err = timedOut(cl, lives, id, timeout)
			if s, serr := cl.Sent(id); serr == nil && said[s.Host] != nil {
				if rerr := routeTimeout(said[s.Host], id, timeout); rerr != nil {
					err = rerr
				}
			}
		}
		note(printItemError(g, id, err))
	}
	if first != 0 {
		return &codeError{code: first} // each was said with its id
	}
	return nil
}

// timedOut is the error of a request still unanswered at the timeout: with
// its host's liveness when that explains it (stopped, stale, no stamp), as
// one `wait` says it.
func timedOut(cl *agent.Client, lives map[string]*agent.Liveness, id string, timeout time.Duration) error {
	var lv *agent.Liveness
	s, serr := cl.Sent(id)
	if serr == nil {
		var seen bool
		if lv, seen = lives[s.Host]; !seen {
			lv, _ = cl.HostLiveness(s.Host)
			lives[s.Host] = lv
		}
	}
	if lv != nil && (lv.Verdict == agent.LivenessStopped || lv.Verdict == agent.LivenessDraining || lv.Verdict == agent.LivenessStale || lv.Verdict == agent.LivenessNoStamp) {
		hint := fmt.Sprintf("the request stays queued and runs if the host sees it before %s; once the host runs and the folder syncs, `bridge wait %s` gets its answer (`bridge doctor` shows each host's liveness); `bridge cancel %s` withdraws it", expiryOf(s), id, id)
		if h := pastExpiry(s, id, runningPastExpiry(cl, s)); h != "" {
			hint = h
		}
		return &codeError{code: exitWaitTime, id: id, liveness: lv, err: withHintf(fmt.Errorf("no result for %s after %s: %s", id, timeout, lv.Message), "%s", hint)}
	}
	return &codeError{code: exitWaitTime, id: id, liveness: lv, err: withHintf(fmt.Errorf("no result for %s after %s", id, timeout),
		"%s", notWithdrawn(s, id, runningPastExpiry(cl, s)))}
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

// printAnswer prints one answer of many and returns its exit code, and
// whether it was written whole.
func printAnswer(g *Globals, out *agent.Outcome) (code int, printed bool) {
	rc := out.Receipt
	if g.JSON {
		v, err := outcomeJSON(out)
		if err == nil {
			err = g.printJSONLine(v)
		}
		if err != nil {
			return printItemError(g, rc.ID, fmt.Errorf("print the answer to %s: %w", rc.ID, err)), false
		}
		return exitFor(rc), true
	}
	head := rc.Status
	if rc.Status == bridge.StatusDone {
		head = fmt.Sprintf("exit %d", rc.ExitCode)
	}
	// The header starts a line whatever the last answer's output ended
	// with. Text is for people: an op's output may hold anything, a line
	// that looks like a header too; --json is what a script reads.
	w := g.stdout.(*lineTracker)
	if !w.atLineStart() {
		w.Write([]byte("\n"))
	}
	op := rc.Op
	if op == "" && out.Sent != nil {
		op = out.Sent.Op // a request the host refused unread (expired) names none
	}
	if _, err := fmt.Fprintf(w, "== %s %s: %s\n", rc.ID, escapeControls(op), head); err != nil {
		return printItemError(g, rc.ID, fmt.Errorf("print the answer to %s: %w", rc.ID, err)), false
	}
	err := printOutcome(g, out)
	var ce *codeError
	if err != nil && !errors.As(err, &ce) {
		return printItemError(g, rc.ID, fmt.Errorf("print the answer to %s: %w", rc.ID, err)), false
	}
	if err == nil {
		return 0, true
	}
	return ce.code, true
}

// lineTracker remembers whether what was written last ended a line.
type lineTracker struct {
	w    io.Writer
	last byte
}

func (t *lineTracker) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if n > 0 {
		t.last = p[n-1]
	}
	return n, err
}

func (t *lineTracker) atLineStart() bool { return t.last == 0 || t.last == '\n' }

// printItemError says why there is no answer for id, and returns its code.
func printItemError(g *Globals, id string, err error) int {
	code, hint := errorCode(err)
	if g.JSON {
		v := map[string]any{"id": id, "error": escapeControls(err.Error()), "bridge_exit_code": code}
		if hint != "" {
			v["hint"] = escapeControls(hint)
		}
		if ce, ok := errors.AsType[*codeError](err); ok && ce.liveness != nil {
			v["host_liveness"] = ce.liveness
		}
		g.printJSONLine(v)
	}
	g.note("error: %v", err)
	if hint != "" {
		g.note("hint: %s", hint)
	}
	return code
}
