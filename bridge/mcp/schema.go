package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncbridge/bridge/bridge"
)

// The inputs every op tool takes besides the op's own arguments. An op's
// argument names start with a letter (the policy's rule), so these, which
// start with '_', never collide with one.
const (
	inKey  = "_key"          // idempotency key, as `bridge run --key`
	inWait = "_wait_seconds" // how long this call waits for the result
	inIn   = "_stdin"        // the op's standard input, as text
)

// maxPathLen is the longest path value the host's policy takes.
const maxPathLen = 4096

// opTool is one op of one host's catalog as a tool.
type opTool struct {
	tool     *sdk.Tool
	host     string // the host's id
	hostName string // its local name
	op       bridge.OpInfo
	schema   *jsonschema.Resolved
	def      []byte // the tool's JSON, to tell a changed tool from the same
	// stale: from a catalog that may describe another policy than the
	// host's (bridge.Catalog.Stale): a call is not checked against it.
	stale bool
}

// toolName is the tool's name for op: the op's own name when the agent
// trusts one host, else "<host name>__<op>" (a host's local name, the one
// `bridge keys trust --name` gave it). An op named like a bridge_* tool
// also takes the long form.
func toolName(hostName, op string, severalHosts bool) string {
	if severalHosts || strings.HasPrefix(op, "bridge_") {
		return hostName + "__" + op
	}
	return op
}

// stdinMode says whether op takes standard input: none, optional or
// required (the catalog's stdin field, or from max_stdin in a catalog
// written before it).
func stdinMode(op bridge.OpInfo) string { return op.StdinMode() }

// waits are how long a call waits by default and at most (Options.Wait,
// MaxWait): the schema and the description say them.
type waits struct{ def, max time.Duration }

// orDefault fills in New's defaults.
func (w waits) orDefault() waits {
	if w.def <= 0 {
		w.def = 50 * time.Second
	}
	if w.max <= 0 {
		w.max = 10 * time.Minute
	}
	return w
}

// newOpTool derives the tool for op of host from its catalog entry.
func newOpTool(hostID, hostName string, op bridge.OpInfo, severalHosts bool, w waits) (*opTool, error) {
	w = w.orDefault()
	in := &jsonschema.Schema{
		Type:                 "object",
		Properties:           map[string]*jsonschema.Schema{},
		Required:             []string{},
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
	}
	for _, a := range op.Args {
		s, err := argSchema(a)
		if err != nil {
			return nil, fmt.Errorf("op %s: argument %s: %w", op.Name, a.Name, err)
		}
		in.Properties[a.Name] = s
		if a.Required {
			in.Required = append(in.Required, a.Name)
		}
	}
	sort.Strings(in.Required)
	in.Properties[inKey] = &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(256),
		Description: "Retry key: the same call with the same key returns the first call's result; it never runs twice."}
	in.Properties[inWait] = waitSchema(w, "Then status pending: continue with bridge_wait.")
	switch stdinMode(op) {
	case "optional", "required":
		in.Properties[inIn] = &jsonschema.Schema{Type: "string",
			Description: fmt.Sprintf("Text given to the op on its standard input%s (at most %d bytes).", stdinWhat(op), op.MaxStdin)}
		if stdinMode(op) == "required" {
			in.Required = append(in.Required, inIn)
		}
	}
	resolved, err := in.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("op %s: input schema: %w", op.Name, err)
	}
	readOnly := op.Scope == "read"
	destructive := !readOnly
	t := &sdk.Tool{
		Title:        op.Name + " on " + hostName,
		Name:         toolName(hostName, op.Name, severalHosts),
		Description:  describe(hostName, op, w),
		InputSchema:  in,
		OutputSchema: outcomeSchema,
		Annotations: &sdk.ToolAnnotations{
			Title:           op.Name + " on " + hostName,
			ReadOnlyHint:    readOnly,
			DestructiveHint: &destructive,
			IdempotentHint:  op.Idempotent,
			OpenWorldHint:   ptr(false),
		},
	}
	def, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	return &opTool{tool: t, host: hostID, hostName: hostName, op: op, schema: resolved, def: def}, nil
}

// argSchema is the JSON schema of one typed argument. It states what the
// host's policy checks that a schema can state; the host checks the rest
// (a path's confinement, a leading '-', '@' or '+'), and says so.
func argSchema(a bridge.ArgInfo) (*jsonschema.Schema, error) {
	s := &jsonschema.Schema{Description: a.Description}
	var notes []string
	switch a.Type {
	case "string":
		s.Type = "string"
		// The host refuses a line break or other control character in
		// any value (a trial agent met it only in the error).
		notes = append(notes, "one line: no line break or other control character (for text of several lines, an op that takes standard input)")
		if a.MaxLen > 0 {
			// max_len counts bytes, maxLength characters: the schema is
			// at most looser, and the host holds the byte bound.
			s.MaxLength = ptr(a.MaxLen)
			notes = append(notes, fmt.Sprintf("at most %d bytes", a.MaxLen))
		}
		switch {
		case a.Pattern == "":
		case ecmaSafe(a.Pattern):
			// The host matches the whole value (the policy anchors it).
			s.Pattern = "^(?:" + a.Pattern + ")$"
		default:
			// Not said the same in ECMA-262: said in words, checked
			// when called.
			notes = append(notes, "the whole value must match the Go (RE2) regular expression "+a.Pattern)
		}
		for _, lead := range []struct {
			c       string
			allowed bool
		}{{"-", a.AllowDash}, {"@", a.AllowAt}, {"+", a.AllowPlus}} {
			if !lead.allowed {
				notes = append(notes, "must not start with '"+lead.c+"'")
			}
		}
	case "int":
		s.Type = "integer"
		if a.Min != nil {
			s.Minimum = ptr(float64(*a.Min))
		}
		if a.Max != nil {
			s.Maximum = ptr(float64(*a.Max))
		}
	case "bool":
		s.Type = "boolean"
	case "enum":
		s.Type = "string"
		for _, v := range a.Values {
			s.Enum = append(s.Enum, v)
		}
	case "path":
		s.Type = "string"
		s.MinLength, s.MaxLength = ptr(1), ptr(maxPathLen)
		notes = append(notes, "a path on the host, relative to the root the host set for this argument, which it may not leave")
		if a.MustExist {
			notes = append(notes, "must exist")
		}
	default:
		return nil, fmt.Errorf("unknown type %q", a.Type)
	}
	if a.Default != nil {
		d, err := typedValue(a.Type, *a.Default)
		if err != nil {
			return nil, fmt.Errorf("default: %w", err)
		}
		s.Default = d
		notes = append(notes, "default "+string(d))
	}
	if len(notes) > 0 {
		if s.Description != "" {
			s.Description += " "
		}
		s.Description += "(" + strings.Join(notes, "; ") + ")"
	}
	return s, nil
}

// typedValue is the JSON of a catalog value (always a string on the wire)
// in its argument's type.
func typedValue(typ, v string) (json.RawMessage, error) {
	switch typ {
	case "int":
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return nil, err
		}
		return json.RawMessage(v), nil
	case "bool":
		if v != "true" && v != "false" {
			return nil, fmt.Errorf("%q is not a bool", v)
		}
		return json.RawMessage(v), nil
	}
	return json.Marshal(v)
}

// describe is the tool's description: the op's own, then the facts an
// agent needs before it calls.
func describe(hostName string, op bridge.OpInfo, w waits) string {
	var b strings.Builder
	if op.Description != "" {
		// The host's own words, quoted as such (sanitised by
		// bridge.HostText when the catalog was opened).
		fmt.Fprintf(&b, "The host describes it: %q. ", op.Description)
	}
	fmt.Fprintf(&b, "Runs the op %q on the host %q through the synced folder (the answer takes as long as the sync).", op.Name, hostName)
	switch op.Scope {
	case "read":
		b.WriteString(" Scope: read (it changes nothing).")
	case "execute":
		b.WriteString(" Scope: execute (it runs code on the host, which may do anything that code does).")
	default:
		b.WriteString(" Scope: write (it may change things on the host).")
	}
	if op.Approve {
		fmt.Fprintf(&b, " A human on the host must approve each call: the call waits for the approval and the run up to _wait_seconds (%d by default, at most %d); "+
			"if that takes longer it returns status pending with the request_id: then call bridge_wait with it, never the op again. The result says when it was approved.",
			int(w.def/time.Second), int(w.max/time.Second))
	}
	if op.Idempotent {
		b.WriteString(" Idempotent: safe to run again.")
	} else {
		b.WriteString(" Not idempotent: to retry after a lost answer, call again with the same _key, never without.")
	}
	fmt.Fprintf(&b, " Time limit on the host: %s; output kept: %d bytes.", op.Timeout, op.MaxOutput)
	switch stdinMode(op) {
	case bridge.StdinRequired:
		fmt.Fprintf(&b, " Needs standard input%s (_stdin, up to %d bytes).", stdinWhat(op), op.MaxStdin)
	case bridge.StdinOptional:
		fmt.Fprintf(&b, " Takes standard input%s (_stdin, up to %d bytes).", stdinWhat(op), op.MaxStdin)
	}
	if op.Risk != "" {
		fmt.Fprintf(&b, " The host notes its risk: %q.", op.Risk)
	}
	if op.DryRun != "" {
		fmt.Fprintf(&b, " Try it first with the op %q.", op.DryRun)
	}
	if op.Undo != "" {
		fmt.Fprintf(&b, " Undo with the op %q.", op.Undo)
	}
	return b.String()
}

// stdinWhat is the op's stdin hint, as " (unified diff)".
func stdinWhat(op bridge.OpInfo) string {
	if op.StdinHint == "" {
		return ""
	}
	return fmt.Sprintf(" (the host says: %q)", op.StdinHint)
}

// call is a tool call's input, checked and in the request's terms.
type call struct {
	args  map[string]string
	key   string
	wait  *time.Duration
	stdin *string
}

// badArgs is an input the tool's schema refuses: the caller's mistake.
type badArgs struct{ err error }

func (e *badArgs) Error() string { return e.err.Error() }

// parseCall checks raw against the op's arguments as `bridge run` does, so a
// refusal names the argument and the rule ("argument \"run\": starts with
// '-' ..."), then against the tool's schema as a last net, and turns the
// op's arguments into the strings the host's policy reads.
func (t *opTool) parseCall(raw json.RawMessage) (*call, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	// Numbers exactly: a float64 loses the digits of a big int.
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, &badArgs{errors.New("arguments are not a JSON object")}
	}
	c := &call{args: map[string]string{}}
	types := map[string]string{}
	for _, a := range t.op.Args {
		types[a.Name] = a.Type
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		switch k {
		case inKey, inWait:
			continue // the schema's, below
		case inIn:
			if stdinMode(t.op) == bridge.StdinNone && !t.stale {
				return nil, &badArgs{fmt.Errorf("%s: op %q takes no standard input", inIn, t.op.Name)}
			}
			continue
		}
		want := ""
		if t.stale {
			// The host's policy may give it another type (or take an
			// argument this catalog lacks): the value goes as its JSON
			// scalar reads, for the host to check.
			switch v := v.(type) {
			case string:
				c.args[k] = v
			case json.Number:
				c.args[k] = v.String()
			case bool:
				c.args[k] = strconv.FormatBool(v)
			default:
				return nil, &badArgs{fmt.Errorf("op %q: argument %q: want a string, a number or true or false", t.op.Name, k)}
			}
			continue
		}
		switch types[k] {
		case "int":
			n, ok := v.(json.Number)
			if !ok || strings.ContainsAny(n.String(), ".eE") {
				want = "an integer"
				break
			}
			i, err := strconv.ParseInt(n.String(), 10, 64)
			if err != nil {
				want = "a 64-bit integer"
				break
			}
			c.args[k] = strconv.FormatInt(i, 10)
		case "bool":
			b, ok := v.(bool)
			if !ok {
				want = "true or false (a JSON boolean)"
				break
			}
			c.args[k] = strconv.FormatBool(b)
		default:
			// A string, or a name the op does not take: CheckArgs
			// names it, with a "did you mean".
			s, ok := v.(string)
			if !ok && types[k] != "" {
				want = "a string"
				break
			}
			c.args[k] = s // a name the op does not take: CheckArgs refuses it below
		}
		if want != "" {
			return nil, &badArgs{fmt.Errorf("op %q: argument %q: want %s", t.op.Name, k, want)}
		}
	}
	if !t.stale { // else the host decides (SPEC §10a)
		if err := t.op.CheckArgs(c.args); err != nil {
			return nil, &badArgs{err}
		}
		var plain map[string]any
		if err := json.Unmarshal(raw, &plain); err != nil {
			return nil, &badArgs{fmt.Errorf("arguments are not a JSON object: %w", err)}
		}
		if err := t.schema.Validate(plain); err != nil {
			return nil, &badArgs{fmt.Errorf("the input does not fit the tool's schema: %w", err)}
		}
	}
	for k, v := range m {
		switch k {
		case inKey:
			// Checked here too: with a stale catalog the schema is not.
			key, ok := v.(string)
			if !ok {
				return nil, &badArgs{fmt.Errorf("%s: want a string", inKey)}
			}
			c.key = key
		case inIn:
			s, ok := v.(string)
			if !ok {
				return nil, &badArgs{fmt.Errorf("%s: want a string", inIn)}
			}
			c.stdin = &s
		case inWait:
			num, ok := v.(json.Number)
			if !ok {
				return nil, &badArgs{fmt.Errorf("%s: not a number of seconds", inWait)}
			}
			n, err := num.Float64()
			if err != nil || n < 0 || math.IsInf(n, 0) {
				return nil, &badArgs{fmt.Errorf("%s: not a number of seconds", inWait)}
			}
			d := time.Duration(min(n, 1e6) * float64(time.Second))
			c.wait = &d
		}
	}
	return c, nil
}

func ptr[T any](v T) *T { return &v }

// waitSchema is the schema of _wait_seconds: the server's default and cap
// stated (a larger value waits the cap; it is not refused).
func waitSchema(w waits, then string) *jsonschema.Schema {
	w = w.orDefault()
	return &jsonschema.Schema{Type: "integer", Minimum: ptr(0.0), Default: json.RawMessage(strconv.Itoa(int(w.def / time.Second))),
		Description: fmt.Sprintf("Seconds to wait for the result: %d when not given, at most %d (more waits %d). %s",
			int(w.def/time.Second), int(w.max/time.Second), int(w.max/time.Second), then)}
}
