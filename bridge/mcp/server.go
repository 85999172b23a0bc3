package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/trust"
)

// Options tune a Server. Zero values take the defaults.
type Options struct {
	// Poll is how often the hosts' catalogs are read again (default 2s).
	Poll time.Duration
	// Wait is how long a call waits for its result when it does not say
	// (default 50s); MaxWait caps what a call may ask (default 10m).
	Wait, MaxWait time.Duration
	// Version is the server's version, as the client sees it.
	Version string
	// Logger takes the server's own messages (never standard output,
	// which carries the protocol on stdio).
	Logger *slog.Logger
}

// Server is the agent's MCP server: a client of the synced folder that
// shows each op of each paired host's signed catalog as a tool.
type Server struct {
	home *trust.Home
	opts Options
	srv  *sdk.Server

	mu    sync.Mutex
	tools map[string]*opTool // by tool name

	said map[string]bool // warnings given, so a poll does not repeat them (refresh only)
}

const instructions = `This server runs allow-listed operations ("ops") on another machine, the host, through a folder that a file-sync client keeps in sync. Each op tool submits a signed request and returns the host's verified result; nothing runs on this machine. The answer takes as long as the sync takes (seconds to minutes).
Each result's text carries the op's output once, under "--- stdout ---" and "--- stderr ---"; its structured content (the outputSchema) carries the facts without the output: request_id; status (done: the op ran and exit_code says how it ended; failed: it never started, a retry is safe; rejected: the host refused it, see reason and detail; expired; cancelled; uncertain: the host stopped while it ran, do not retry, ask the human; pending: no answer yet); state (while pending: submitted, awaiting-approval, running); reason and detail; exit_code; signal (what ended the op, if a signal did) and timed_out (the host's time limit stopped it); stdout_bytes and stderr_bytes; stdout_truncated and stderr_truncated; earlier_send (the answer of an earlier call with the same _key: it did not run again); approval (when a human approved it); hint (what to do next); host_liveness (while pending: the host's signed word when it is not plainly serving). A tool error has error and hint.
If a call returns status "pending", the op is still queued or running (or waits for a human's approval on the host): call bridge_wait with its request_id, never the op again. To retry after a lost answer, call the op again with the same _key: it returns the first result and does not run twice. bridge_inbox shows the host's messages.`

// New returns a server for the agent home h. It reads the catalogs once
// now; Run keeps them current.
func New(h *trust.Home, o Options) (*Server, error) {
	if h.Config.Role != "agent" {
		return nil, bridge.WithHint(errors.New("this home belongs to a host"), "run `bridge mcp` with an agent's --home")
	}
	if o.Poll <= 0 {
		o.Poll = 2 * time.Second
	}
	if o.Wait <= 0 {
		o.Wait = 50 * time.Second
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 10 * time.Minute
	}
	if o.Wait > o.MaxWait {
		o.Wait = o.MaxWait
	}
	if o.Version == "" {
		o.Version = "devel"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{home: h, opts: o, tools: map[string]*opTool{}}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "bridge", Title: "syncbridge", Version: o.Version}, &sdk.ServerOptions{
		Instructions: instructions,
		Logger:       slog.New(warnOnly{o.Logger.Handler()}),
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
	})
	s.addBridgeTools()
	s.refresh()
	return s, nil
}

// Run serves one session on t (stdio, usually) until it ends or ctx does,
// keeping the tools in step with the catalogs.
func (s *Server) Run(ctx context.Context, t sdk.Transport) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.watch(ctx)
	return s.srv.Run(ctx, t)
}

// ServeHTTP serves the streamable HTTP transport on addr, which must be a
// loopback address: the server acts with the agent's key, so it answers
// only this machine.
func (s *Server) ServeHTTP(ctx context.Context, addr string, ready func(net.Addr)) error {
	if err := CheckLoopback(addr); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.watch(ctx)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, nil)
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	if ready != nil {
		ready(ln.Addr())
	}
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// CheckLoopback refuses an HTTP address that is not on a loopback
// interface.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return bridge.WithHint(fmt.Errorf("--http %q: %w", addr, err), "give a loopback address and port, e.g. 127.0.0.1:8765")
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return bridge.WithHint(fmt.Errorf("--http %q: not a loopback address", addr),
			"the server acts with this agent's key: it listens only on 127.0.0.1, ::1 or localhost")
	}
	return nil
}

// watch reads the catalogs again every Poll. A plain read of a few small
// files: it works on any folder, watched or not.
func (s *Server) watch(ctx context.Context) {
	t := time.NewTicker(s.opts.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.refresh()
		}
	}
}

// client opens the agent's client for one call: a Client is not meant
// for concurrent use, and opening one is cheap.
func (s *Server) client() (*agent.Client, error) {
	cl, err := agent.OpenClient(s.home)
	if err != nil {
		return nil, err
	}
	// Outputs are read through bounded buffers (outcomeResult), never
	// whole into memory: the receipt's lengths are the host's word.
	cl.StreamOutput = true
	return cl, nil
}

// refresh derives the op tools from the catalogs and changes the server's
// tools where they differ; the SDK then tells the client the list changed.
// A catalog that cannot be read or verified (one still syncing) leaves that
// host's tools as they were; a host that is no longer trusted loses them.
func (s *Server) refresh() {
	said := s.said
	s.said = map[string]bool{}
	warn := func(msg string, args ...any) {
		key := fmt.Sprint(append([]any{msg}, args...)...)
		if !said[key] {
			s.opts.Logger.Warn(msg, args...)
		}
		s.said[key] = true
	}
	peers, err := s.home.Peers()
	if err != nil {
		warn("bridge mcp: cannot read the trusted hosts", "err", err)
		return
	}
	var hosts []trust.Peer
	for _, p := range peers {
		if p.Role == "host" {
			hosts = append(hosts, p)
		}
	}
	cl, err := s.client()
	if err != nil {
		warn("bridge mcp: cannot open the folder", "err", err)
		return
	}
	defer cl.Close()
	want := map[string]*opTool{}
	s.mu.Lock()
	old := s.tools
	s.mu.Unlock()
	for _, h := range hosts {
		cat, err := cl.Ops(h.ID)
		if err != nil {
			published := filepath.Join(s.home.Config.Folder, filepath.FromSlash(bridge.CatalogPath(h.ID, s.home.Config.ID)))
			if _, serr := os.Lstat(published); errors.Is(serr, fs.ErrNotExist) {
				continue // none published (yet, or any more): no tools
			}
			warn("bridge mcp: a host's catalog does not verify (still syncing?); its tools stay as they were", "host", h.Name, "err", err)
			for name, t := range old {
				if t.host == h.ID {
					want[name] = t // keep what this host offered last
				}
			}
			continue
		}
		if cat.Warning != "" {
			// Its ops are offered, none as safe to run again
			// (agent.Client.Ops); the host checks every call.
			warn("bridge mcp: a host's catalog may be out of date", "host", h.Name, "why", cat.Warning)
		}
		for _, op := range cat.Ops {
			if strings.HasPrefix(op.Name, "bridge.") {
				continue // built in (bridge.ping): not an op to offer
			}
			t, err := newOpTool(h.ID, h.Name, op, len(hosts) > 1, waits{s.opts.Wait, s.opts.MaxWait})
			if err == nil {
				t.stale = cat.Stale
			}
			if err != nil {
				warn("bridge mcp: op not offered", "host", h.Name, "err", err)
				continue
			}
			if _, dup := want[t.tool.Name]; dup || len(t.tool.Name) > 128 {
				warn("bridge mcp: op not offered: its tool name is taken or over 128 characters", "host", h.Name, "op", op.Name)
				continue
			}
			want[t.tool.Name] = t
		}
	}
	var gone []string
	for name := range old {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
		}
	}
	s.mu.Lock()
	s.tools = want
	s.mu.Unlock()
	if len(gone) > 0 {
		s.srv.RemoveTools(gone...)
	}
	for name, t := range want {
		if o, ok := old[name]; ok && bytes.Equal(o.def, t.def) && o.host == t.host {
			continue
		}
		s.srv.AddTool(t.tool, s.opHandler(name))
	}
}

// opHandler runs the op tool name as it is when called (the catalog may
// have changed since the client listed it).
func (s *Server) opHandler(name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		s.mu.Lock()
		t := s.tools[name]
		s.mu.Unlock()
		if t == nil {
			return toolError(fmt.Sprintf("the tool %s is gone: the host no longer offers it", name),
				"list the tools again; the host's catalog changed"), nil
		}
		c, err := t.parseCall(req.Params.Arguments)
		if err != nil {
			return toolError(fmt.Sprintf("bad arguments for %s: %v", name, err),
				"nothing was sent; the tool's input schema gives each argument's type, pattern, range and allowed values"), nil
		}
		cl, err := s.client()
		if err != nil {
			return errorResult(err, ""), nil
		}
		defer cl.Close()
		// The whole check the CLI makes (standard input's mode and size
		// too), against the catalog as it is now.
		in := bridge.CallInput{}
		if c.stdin != nil {
			in = bridge.CallInput{Given: true, Len: int64(len(*c.stdin))}
		}
		if _, err := cl.CheckCall(t.host, t.op.Name, c.args, in); err != nil {
			var ce *bridge.CallError
			if errors.As(err, &ce) {
				return toolError(ce.Error(), fmt.Sprintf("the host would refuse it (%s); the tool's input schema and description say what it takes", ce.Reason)), nil
			}
			return errorResult(err, "nothing was sent"), nil
		}
		o := agent.SubmitOptions{Host: t.host, Op: t.op.Name, Args: c.args, Key: c.key}
		if c.stdin != nil {
			o.Stdin = strings.NewReader(*c.stdin)
		}
		sent, err := cl.Submit(o)
		if err != nil {
			return errorResult(err, "nothing was run"), nil
		}
		return s.await(ctx, req, cl, sent.ID, c.wait), nil
	}
}

// await waits up to the call's wait for the result of id, sending the
// op's output as progress notifications when the client asked for them.
func (s *Server) await(ctx context.Context, req *sdk.CallToolRequest, cl *agent.Client, id string, wait *time.Duration) *sdk.CallToolResult {
	d := s.opts.Wait
	if wait != nil {
		d = min(*wait, s.opts.MaxWait)
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var stream sync.WaitGroup
	if token := req.Params.GetProgressToken(); token != nil {
		stream.Go(func() { s.streamProgress(wctx, req.Session, token, id) })
	}
	out, err := cl.Wait(wctx, id, nil)
	cancel()
	stream.Wait()
	if err == nil {
		if cl.Ack(out) != nil {
			s.opts.Logger.Warn("could not ack", "id", id)
		}
		return outcomeResult(cl, out, s.needsApproval(out))
	}
	if ctx.Err() != nil {
		// The client gave up on the call; the request stays queued.
		return toolError(fmt.Sprintf("stopped waiting for %s", id), "the request stays queued: bridge_wait or bridge_status with its request_id")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return pendingResult(cl, id, d)
	}
	return errorResult(err, "")
}

// streamProgress sends the verified progress chunks of id as they arrive,
// until ctx ends.
func (s *Server) streamProgress(ctx context.Context, ss *sdk.ServerSession, token any, id string) {
	cl, err := s.client()
	if err != nil {
		return
	}
	defer cl.Close()
	next, prev := 1, ""
	told, lastLook := false, time.Now()
	for {
		if next == 1 && !told && time.Since(lastLook) >= 2*time.Second {
			// Nothing streamed yet: say so if it waits for a human.
			lastLook = time.Now()
			if st, err := cl.Status(id); err == nil && st.State == bridge.StateAwaitingApproval {
				told = true
				ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: 0,
					Message: "waiting for a human on the host to approve " + id})
			}
		}
		chunks, err := cl.Progress(id, next, prev)
		for _, ch := range chunks {
			msg := progressMessage(ch.Stdout, ch.Stderr, ch.Dropped)
			ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: float64(ch.Seq), Message: msg})
			next, prev = ch.Seq+1, ch.ChunkHash()
		}
		if err != nil {
			return // a broken chain: the result is what counts
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// maxProgressMessage bounds one progress notification: it carries only
// the new chunk of output, and at most this much of it.
const maxProgressMessage = 8 << 10

// progressMessage is one progress notification's text: the chunk's new
// output, cut at maxProgressMessage with a line that says so, and what
// the host left out of the stream.
func progressMessage(stdout, stderr []byte, dropped int64) string {
	msg := string(stdout) + string(stderr)
	if len(msg) > maxProgressMessage {
		cut := maxProgressMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + fmt.Sprintf("\n[%d more bytes of this chunk are not in this notification; the result has them]", len(msg)-cut)
	}
	if dropped > 0 {
		msg += fmt.Sprintf("\n[%d bytes of output were not streamed; the result has them]", dropped)
	}
	return msg
}

// Outcome is a tool's structured answer about one request. The op's
// output is not in it: it is in the result's text, once (a client that
// shows the model both the text and the structured content showed it
// twice); stdout_bytes and stderr_bytes say how much there is.
type Outcome struct {
	RequestID       string `json:"request_id"`
	Host            string `json:"host"`
	Op              string `json:"op"`
	Status          string `json:"status"` // the result's status, or pending
	State           string `json:"state,omitempty"`
	Reason          string `json:"reason,omitempty"`
	Detail          string `json:"detail,omitempty"`
	ExitCode        *int   `json:"exit_code,omitempty"`
	Signal          string `json:"signal,omitempty"`
	TimedOut        bool   `json:"timed_out,omitempty"`
	StdoutBytes     int64  `json:"stdout_bytes"`
	StderrBytes     int64  `json:"stderr_bytes"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	EarlierSend     bool   `json:"earlier_send,omitempty"`
	// Approval: the host's notice that a human approved the request
	// (when, and as whom), for an op that needs approval.
	Approval string `json:"approval,omitempty"`
	Hint     string `json:"hint,omitempty"`
	// HostLiveness: on a pending answer, what the host's stamp says when
	// it is not plainly serving (stopped, silent, refusing this agent).
	HostLiveness *agent.Liveness `json:"host_liveness,omitempty"`

	stdout, stderr string // in the text only
}

// outcomeSchema is the output schema of the tools that answer with an
// Outcome (every op tool, bridge_wait, bridge_result): what the server
// instructions describe. A tool error has error and hint instead.
var outcomeSchema = func() *jsonschema.Schema {
	// Types only: the server instructions describe the fields once (a
	// trial found tools/list at 67 KB with them repeated per tool).
	t := func(typ string) *jsonschema.Schema { return &jsonschema.Schema{Type: typ} }
	status := t("string")
	status.Enum = []any{"done", "failed", "rejected", "expired", "cancelled", "uncertain", "pending"}
	return &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{
		"request_id": t("string"), "host": t("string"), "op": t("string"), "status": status, "state": t("string"),
		"reason": t("string"), "detail": t("string"), "exit_code": t("integer"), "signal": t("string"), "timed_out": t("boolean"),
		"stdout_bytes": t("integer"), "stderr_bytes": t("integer"), "stdout_truncated": t("boolean"), "stderr_truncated": t("boolean"),
		"earlier_send": t("boolean"), "approval": t("string"), "hint": t("string"), "host_liveness": t("object"), "error": t("string"),
	}}
}()

// outcomeResult is a verified result as a tool result: an answer when the
// op ran (whatever its exit code), a tool error when the host refused it
// or did not finish it.
func outcomeResult(cl *agent.Client, out *agent.Outcome, approve bool) *sdk.CallToolResult {
	defer out.Close()
	rc := out.Receipt
	stdout, stderr := &headTail{most: maxToolOutput}, &headTail{most: maxToolOutput}
	if err := out.WriteOutput(stdout, stderr); err != nil {
		return errorResult(err, "the result did not open; `bridge result "+rc.ID+"` on this machine says why")
	}
	o := Outcome{RequestID: rc.ID, Host: out.Sent.HostName, Op: rc.Op, Status: rc.Status, Reason: string(rc.Reason), Detail: rc.Detail,
		Signal: rc.Signal, TimedOut: rc.TimedOut, stdout: stdout.String(), stderr: stderr.String(), StdoutBytes: stdout.total, StderrBytes: stderr.total,
		StdoutTruncated: rc.StdoutTruncated || stdout.left() > 0, StderrTruncated: rc.StderrTruncated || stderr.left() > 0, EarlierSend: out.Earlier}
	if approve {
		// Only for an op that needs approval: the inbox is read whole.
		o.Approval = cl.Approval(out.Sent.Host, rc.ID)
	}
	var b strings.Builder
	if rc.Status == bridge.StatusDone {
		code := rc.ExitCode
		o.ExitCode = &code
		switch {
		case rc.TimedOut:
			fmt.Fprintf(&b, "%s (request %s) timed out on the host: %s\n", rc.Op, rc.ID, rc.Detail)
			o.Hint = "the policy's time limit stopped it; it may have had part of its effect"
		case rc.Signal != "":
			fmt.Fprintf(&b, "%s (request %s) was killed by %s\n", rc.Op, rc.ID, rc.Signal)
		default:
			fmt.Fprintf(&b, "%s (request %s) exited with code %d\n", rc.Op, rc.ID, rc.ExitCode)
		}
	} else {
		fmt.Fprintf(&b, "request %s %s", rc.ID, rc.Status)
		if rc.Reason != "" && string(rc.Reason) != rc.Status {
			fmt.Fprintf(&b, " (%s)", rc.Reason)
		}
		if rc.Detail != "" {
			fmt.Fprintf(&b, ": %s", rc.Detail)
		}
		b.WriteString("\n")
		o.Hint = hintFor(rc)
	}
	if o.Approval != "" {
		fmt.Fprintf(&b, "approval: %s\n", o.Approval)
	}
	if out.Earlier {
		b.WriteString("note: this is the answer to an earlier send of the same call with this _key; it did not run again\n")
	}
	if o.Hint != "" {
		fmt.Fprintf(&b, "hint: %s\n", o.Hint)
	}
	writeStreams(&b, "", o.stdout, o.stderr)
	if rc.StdoutTruncated || rc.StderrTruncated {
		b.WriteString("warning: the output was over the op's cap; the middle was dropped\n")
	}
	if stdout.left() > 0 || stderr.left() > 0 {
		fmt.Fprintf(&b, "warning: a stream was over the %d bytes a tool result carries: the middle (%d bytes) is left out here; `bridge result %s` on the agent's machine prints all of it\n",
			maxToolOutput, stdout.left()+stderr.left(), rc.ID)
	}
	return &sdk.CallToolResult{
		Content:           []sdk.Content{&sdk.TextContent{Text: b.String()}},
		StructuredContent: o,
		IsError:           rc.Status != bridge.StatusDone,
	}
}

// pendingResult: no result within the wait. Not an error: the request
// goes on, and its id is the way back to it.
func pendingResult(cl *agent.Client, id string, waited time.Duration) *sdk.CallToolResult {
	o := Outcome{RequestID: id, Status: "pending", State: bridge.StateSubmitted}
	if st, err := cl.Status(id); err == nil {
		o.Host, o.Op, o.State, o.Reason = st.Host, st.Op, st.State, st.Reason
	}
	text := fmt.Sprintf("request %s is still pending after %s (state: %s).", id, waited.Round(time.Second), o.State)
	switch {
	case o.State == bridge.StateAwaitingApproval:
		o.Hint = "a human on the host must approve it; call bridge_wait with this request_id later"
	case o.Reason == string(bridge.ReasonPastExpiry):
		o.Hint = "it is past its expiry and will not run; call the op again if it is still needed"
	default:
		o.Hint = "call bridge_wait with this request_id to keep waiting (bridge_logs shows its output so far)"
	}
	// Why it may wait long: the host's own word (its liveness stamp), as
	// `bridge run` says it.
	if lv, err := cl.HostLiveness(o.Host); err == nil && lv.Verdict != agent.LivenessOK && lv.Verdict != agent.LivenessNoStamp {
		o.HostLiveness = lv
		text += " " + lv.Message + "."
		switch lv.Verdict {
		case agent.LivenessNotAccepted:
			o.Hint = "the host does not accept this agent's key: this request will not run; ask the human to pair this agent again on the host (docs/KEYS.md)"
		case agent.LivenessStopped, agent.LivenessStale:
			o.Hint = "tell the human the host is not serving; the request waits in the folder, and bridge_wait returns its answer once the host runs again"
		case agent.LivenessDraining:
			o.Hint = "the host's daemon is stopping: an op it already runs may still finish; a new request waits in the folder, and bridge_wait returns its answer once the host runs again"
		}
	}
	// What it has streamed so far (verified chunks), as the result would
	// carry it: a long op's pending answer is not empty-handed.
	var b strings.Builder
	b.WriteString(text + "\nhint: " + o.Hint + "\n")
	if chunks, _ := cl.Progress(id, 1, ""); len(chunks) > 0 {
		stdout, stderr := &headTail{most: maxToolOutput}, &headTail{most: maxToolOutput}
		for _, ch := range chunks {
			stdout.Write(ch.Stdout)
			stderr.Write(ch.Stderr)
		}
		o.StdoutBytes, o.StderrBytes = stdout.total, stderr.total
		o.StdoutTruncated, o.StderrTruncated = stdout.left() > 0, stderr.left() > 0
		writeStreams(&b, " so far", stdout.String(), stderr.String())
	}
	return &sdk.CallToolResult{
		Content:           []sdk.Content{&sdk.TextContent{Text: b.String()}},
		StructuredContent: o,
	}
}

// writeStreams writes the op's output into a result's text: each stream
// under its own line (--- stdout ---), ending in a line break.
func writeStreams(b *strings.Builder, suffix, stdout, stderr string) {
	for _, st := range []struct{ name, text string }{{"stdout", stdout}, {"stderr", stderr}} {
		if st.text == "" {
			continue
		}
		fmt.Fprintf(b, "--- %s%s ---\n%s", st.name, suffix, st.text)
		if !strings.HasSuffix(st.text, "\n") {
			b.WriteString("\n")
		}
	}
}

// hintFor says what an agent does next about a result that is not done;
// the CLI's hints (cmd/bridge) in the tools' terms.
func hintFor(rc *bridge.Receipt) string {
	return bridge.NextStep(rc, bridge.HintWords{Ops: "list the tools again", Again: "call it again", Retry: "call again with the same _key",
		Settle: "Ask the human on the host to check and settle it (`bridge reconcile`); bridge_status then shows the new answer, and bridge_wait waits for a rerun's"})
}

// errorResult is an error of ours or of the folder as a tool error, with
// its hint.
func errorResult(err error, note string) *sdk.CallToolResult {
	hint := ""
	var he *bridge.HintError
	if errors.As(err, &he) {
		hint = he.Hint
	}
	if note != "" {
		hint = strings.TrimPrefix(hint+"; "+note, "; ")
	}
	return toolError(err.Error(), hint)
}

func toolError(msg, hint string) *sdk.CallToolResult {
	text := "error: " + msg + "\n"
	if hint != "" {
		text += "hint: " + hint + "\n"
	}
	return &sdk.CallToolResult{
		Content:           []sdk.Content{&sdk.TextContent{Text: text}},
		StructuredContent: map[string]string{"error": msg, "hint": hint},
		IsError:           true,
	}
}

// jsonResult is a plain answer: v as structured content and as text.
func jsonResult(v any) *sdk.CallToolResult {
	data, _ := json.MarshalIndent(v, "", "  ")
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(data)}}, StructuredContent: v}
}

// toolNames lists the op tools now offered, sorted (tests, logs).
func (s *Server) toolNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.tools {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// warnOnly passes on the SDK's warnings and errors, not its chatter about
// each session.
type warnOnly struct{ slog.Handler }

func (w warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}

func (w warnOnly) WithAttrs(a []slog.Attr) slog.Handler { return warnOnly{w.Handler.WithAttrs(a)} }
func (w warnOnly) WithGroup(g string) slog.Handler      { return warnOnly{w.Handler.WithGroup(g)} }

// maxToolOutput is the most of each output stream a tool result carries:
// its first and last halves, the middle left out (as the host cuts an
// output over the op's cap), whatever the host sends.
const maxToolOutput = 1 << 20

// headTail keeps the first and last most/2 bytes written to it.
type headTail struct {
	most       int
	head, tail []byte
	total      int64
}

func (h *headTail) Write(p []byte) (int, error) {
	n, half := len(p), h.most/2
	h.total += int64(n)
	if room := half - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	keep := h.most - half
	if len(p) >= keep {
		h.tail = append(h.tail[:0], p[len(p)-keep:]...)
		return n, nil
	}
	h.tail = append(h.tail, p...)
	if len(h.tail) > 2*keep {
		// Compacted once it doubles: amortised, and the array bounded.
		h.tail = append(h.tail[:0], h.tail[len(h.tail)-keep:]...)
	}
	return n, nil
}

// kept is the tail's last bytes that are kept.
func (h *headTail) kept() []byte { return h.tail[max(0, len(h.tail)-(h.most-h.most/2)):] }

// left is how many bytes were left out between the head and the tail.
func (h *headTail) left() int64 { return h.total - int64(len(h.head)) - int64(len(h.kept())) }

// String is what was kept, with a marker where the middle was left out.
func (h *headTail) String() string {
	if h.left() == 0 {
		return string(h.head) + string(h.kept())
	}
	return fmt.Sprintf("%s\n[… %d bytes left out …]\n%s", h.head, h.left(), h.kept())
}

// needsApproval reports whether the op of out's request needs a human's
// approval, by the tools served now.
func (s *Server) needsApproval(out *agent.Outcome) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tools {
		if t.host == out.Sent.Host && t.op.Name == out.Receipt.Op {
			return t.op.Approve
		}
	}
	return false
}
