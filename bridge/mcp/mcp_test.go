package mcp

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/trust"
)

func ptrTo[T any](v T) *T { return &v }

// TestArgSchema: each argument type of the catalog gives the schema
// docs/MCP.md lists.
func TestArgSchema(t *testing.T) {
	tests := []struct {
		name string
		arg  bridge.ArgInfo
		want map[string]any
	}{
		{"string", bridge.ArgInfo{Type: "string", Pattern: "[a-z]+", MaxLen: 10, AllowDash: true},
			map[string]any{"type": "string", "pattern": "^(?:[a-z]+)$", "maxLength": 10.0,
				"description": "(one line: no line break or other control character (for text of several lines, an op that takes standard input); at most 10 bytes; must not start with '@'; must not start with '+')"}},
		{"int", bridge.ArgInfo{Type: "int", Min: ptrTo(int64(-3)), Max: ptrTo(int64(9)), Default: ptrTo("4")},
			map[string]any{"type": "integer", "minimum": -3.0, "maximum": 9.0, "default": 4.0, "description": "(default 4)"}},
		{"bool", bridge.ArgInfo{Type: "bool", Default: ptrTo("true"), Description: "Loud."},
			map[string]any{"type": "boolean", "default": true, "description": "Loud. (default true)"}},
		{"enum", bridge.ArgInfo{Type: "enum", Values: []string{"a", "b"}},
			map[string]any{"type": "string", "enum": []any{"a", "b"}}},
		{"path", bridge.ArgInfo{Type: "path", MustExist: true, Default: ptrTo("src")},
			map[string]any{"type": "string", "minLength": 1.0, "maxLength": 4096.0, "default": "src",
				"description": "(a path on the host, relative to the root the host set for this argument, which it may not leave; must exist; default \"src\")"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := argSchema(tt.arg)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			data, _ := json.Marshal(s)
			json.Unmarshal(data, &got)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v\nwant %v", got, tt.want)
			}
		})
	}
	// A pattern ECMA-262 does not read as RE2 does is left out of the
	// schema and said in the description; the call-time check holds it.
	s, err := argSchema(bridge.ArgInfo{Type: "string", Pattern: "(?i)[a-z]+", AllowDash: true, AllowAt: true, AllowPlus: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Pattern != "" || !strings.Contains(s.Description, "must match the Go (RE2) regular expression (?i)[a-z]+") {
		t.Errorf("pattern %q, description %q", s.Pattern, s.Description)
	}
	tool, err := newOpTool("hostid", "laptop", bridge.OpInfo{Name: "op", Args: []bridge.ArgInfo{
		{Name: "s", Type: "string", Pattern: "(?i)[a-z]+", Required: true}}}, false, waits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tool.parseCall(json.RawMessage(`{"s": "AbC"}`)); err != nil {
		t.Errorf("AbC: %v", err)
	}
	if _, err := tool.parseCall(json.RawMessage(`{"s": "a1"}`)); err == nil || !strings.Contains(err.Error(), `argument "s": does not match pattern`) {
		t.Errorf("a1: %v", err)
	}
	if _, err := argSchema(bridge.ArgInfo{Type: "float"}); err == nil {
		t.Error("an unknown type gave a schema")
	}
}

// TestParseCall: a call's input becomes the strings the host reads, and
// what the schema refuses never becomes a request.
func TestParseCall(t *testing.T) {
	op := bridge.OpInfo{Name: "op", MaxStdin: 10, Args: []bridge.ArgInfo{
		{Name: "n", Type: "int", Min: ptrTo(int64(0))},
		{Name: "on", Type: "bool"},
		{Name: "s", Type: "string", Pattern: "[a-z]+", MaxLen: 5, Required: true},
	}}
	tool, err := newOpTool("hostid", "laptop", op, false, waits{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tool.parseCall(json.RawMessage(`{"n": 9007199254740993, "on": false, "s": "abc", "_key": "k", "_stdin": "in", "_wait_seconds": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"n": "9007199254740993", "on": "false", "s": "abc"}
	if !reflect.DeepEqual(c.args, want) || c.key != "k" || *c.stdin != "in" || c.wait.Seconds() != 2 {
		t.Errorf("got %+v, args %v", c, c.args)
	}
	for _, bad := range []string{`{"s": "ABC"}`, `{"s": "abcdef"}`, `{}`, `{"s": "a", "n": -1}`, `{"s": "a", "n": 1.5}`,
		`{"s": "a", "x": 1}`, `{"s": "a", "on": "yes"}`, `[1]`, `{"s": "a", "_key": ""}`} {
		if _, err := tool.parseCall(json.RawMessage(bad)); err == nil {
			t.Errorf("%s was accepted", bad)
		}
	}
	// Refusals say what `bridge run` says: which argument, which rule.
	for _, c := range []struct{ in, want string }{
		{`{"s": "-x"}`, `argument "s": starts with '-' and could be read as an option`},
		{`{"s": "ABC"}`, `argument "s": does not match pattern "[a-z]+"`},
		{`{"s": "abcdef"}`, `argument "s": longer than 5 bytes`},
		{`{}`, `argument "s": missing required argument`},
		{`{"s": "a", "n": -1}`, `argument "n": below the minimum 0`},
		{`{"s": "a", "n": 1.5}`, `argument "n": want an integer`},
		{`{"s": "a", "on": "yes"}`, `argument "on": want true or false`},
		{`{"s": "a", "nn": 1}`, `argument "nn": unknown argument; did you mean "n"?`},
	} {
		_, err := tool.parseCall(json.RawMessage(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "validating") {
			t.Errorf("%s: err = %v, want %q", c.in, err, c.want)
		}
	}
	noStdin, _ := newOpTool("hostid", "laptop", bridge.OpInfo{Name: "quiet"}, false, waits{})
	if _, err := noStdin.parseCall(json.RawMessage(`{"_stdin": "x"}`)); err == nil {
		t.Error("_stdin was accepted by an op that takes no standard input")
	}
}

// TestECMASafe: the patterns put into a schema are those ECMA-262 (JSON
// Schema's dialect, unicode mode too) reads as RE2 does.
func TestECMASafe(t *testing.T) {
	for _, p := range []string{`[a-z]+`, `^[A-Za-z0-9_/]{1,64}$`, `(?:v[0-9]+\.){2}[0-9]+`, `a|b|`, `[\w.-]+`,
		`\d{3,}x*?`, `[^\s]+`, `\x41\.\/`, `(ab)+\bc`, `[a\]\-]`, `.*`} {
		if !ecmaSafe(p) {
			t.Errorf("%s: refused", p)
		}
	}
	for _, p := range []string{`(?i)[a-z]+`, `(?s).`, `\Aabc\z`, `[[:alpha:]]+`, `\pL+`, `\p{Greek}`, `\Qa.b\E`,
		`(?P<n>a)`, `(?<n>a)`, `\x{41}`, `[]a]`, `a{,3}`, `a{`, `x}`, `é`, `\C`, `\-`, `\_`, `^*`, `\b+`,
		`a**`, `(`, `[a-`, `\1`, `[\b]`} {
		if ecmaSafe(p) {
			t.Errorf("%s: accepted", p)
		}
	}
}

func TestToolName(t *testing.T) {
	for _, tt := range []struct {
		op      string
		several bool
		want    string
	}{
		{"test", false, "test"},
		{"test", true, "laptop__test"},
		{"bridge_status", false, "laptop__bridge_status"},
	} {
		if got := toolName("laptop", tt.op, tt.several); got != tt.want {
			t.Errorf("toolName(%q, %v) = %q, want %q", tt.op, tt.several, got, tt.want)
		}
	}
}

func TestCheckLoopback(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:8765", "[::1]:0", "localhost:9000", "127.0.0.2:1"} {
		if err := CheckLoopback(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:8765", ":8765", "192.168.1.2:80", "example.com:80", "127.0.0.1"} {
		if err := CheckLoopback(bad); err == nil {
			t.Errorf("%s was accepted", bad)
		}
	}
}

// TestSeveralHosts: with two trusted hosts every op tool is named
// HOST__OP; a catalog that stops verifying keeps its host's tools; a new
// catalog replaces them.
func TestSeveralHosts(t *testing.T) {
	f := newFixture(t)
	laptop, ci, ag, publish := f.laptop, f.ci, f.agent, f.publish
	publish(laptop, "test", "build")
	ciPath := publish(ci, "test", "bridge.ping")
	s, err := New(ag, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ci__test", "laptop__build", "laptop__test"}
	if got := s.toolNames(); !slices.Equal(got, want) {
		t.Fatalf("tools %v, want %v", got, want)
	}
	if d := s.tools["ci__test"].tool.Description; !strings.Contains(d, `host "ci"`) {
		t.Errorf("description %q does not name the host", d)
	}
	// A catalog caught mid-sync (cut short) does not verify: the host's
	// tools stay as they were.
	data, _ := os.ReadFile(ciPath)
	os.WriteFile(ciPath, data[:len(data)/2], 0o644)
	s.refresh()
	if got := s.toolNames(); !slices.Equal(got, want) {
		t.Fatalf("after a torn catalog: tools %v, want %v", got, want)
	}
	publish(ci, "lint")
	s.refresh()
	want = []string{"ci__lint", "laptop__build", "laptop__test"}
	if got := s.toolNames(); !slices.Equal(got, want) {
		t.Fatalf("after a new catalog: tools %v, want %v", got, want)
	}
	// A catalog removed: its host offers nothing.
	os.Remove(ciPath)
	s.refresh()
	want = []string{"laptop__build", "laptop__test"}
	if got := s.toolNames(); !slices.Equal(got, want) {
		t.Fatalf("after the catalog went: tools %v, want %v", got, want)
	}
	// A host's home is refused.
	if _, err := New(laptop, Options{}); err == nil {
		t.Error("New accepted a host's home")
	}
}

// fixture is an agent that trusts two hosts, laptop and ci, in one
// folder, with no daemon: catalogs are published by hand.
type fixture struct {
	laptop, ci, agent *trust.Home
	publish           func(h *trust.Home, ops ...string) string
}

func newFixture(t *testing.T) *fixture {
	base := t.TempDir()
	folder := filepath.Join(base, "folder")
	os.Mkdir(folder, 0o755)
	mk := func(role, name string) *trust.Home {
		h, err := trust.InitHome(filepath.Join(base, name), role, name, folder)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	laptop, ci := mk("host", "laptop"), mk("host", "ci")
	ag := mk("agent", "cloud-1")
	for _, h := range []*trust.Home{laptop, ci} {
		if _, err := h.Trust(ag.BundleText(), "cloud-1"); err != nil {
			t.Fatal(err)
		}
		if _, err := ag.Trust(h.BundleText(), h.Config.Name); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(h *trust.Home, ops ...string) string {
		cat := bridge.Catalog{Host: h.Config.ID, Agent: ag.Config.ID, Issued: time.Now().UnixMilli()}
		for _, op := range ops {
			cat.Ops = append(cat.Ops, bridge.OpInfo{Name: op, Scope: "read", Timeout: "1m", Args: []bridge.ArgInfo{}})
		}
		data, err := bridge.SignCatalog(cat, h.Identity())
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(folder, filepath.FromSlash(bridge.CatalogPath(h.Config.ID, ag.Config.ID)))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return &fixture{laptop: laptop, ci: ci, agent: ag, publish: publish}
}

// TestServeHTTP: the streamable HTTP transport answers on a loopback
// address, and a Host header that is not loopback is refused.
func TestServeHTTP(t *testing.T) {
	f := newFixture(t)
	f.publish(f.laptop, "test")
	s, err := New(f.agent, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- s.ServeHTTP(ctx, "127.0.0.1:0", func(a net.Addr) { addr <- a.String() }) }()
	url := "http://" + <-addr + "/"
	client := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Contains(names, "laptop__test") || !slices.Contains(names, "bridge_wait") {
		t.Errorf("tools over HTTP: %v", names)
	}
	sess.Close()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Host = "evil.example:80"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a request for Host evil.example got %d, want 403", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeHTTP: %v", err)
	}
	if err := s.ServeHTTP(context.Background(), "0.0.0.0:0", nil); err == nil {
		t.Error("ServeHTTP listened on every interface")
	}
}

// A pending answer says why it may wait long when the host's stamp says
// so (stopped, silent, refusing this agent), as `bridge run` does: an MCP
// agent would otherwise call bridge_wait for ever.
func TestPendingSaysTheHostStopped(t *testing.T) {
	f := newFixture(t)
	cl, err := agent.OpenClient(f.agent)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s, err := cl.Submit(agent.SubmitOptions{Host: "laptop", Op: bridge.PingOp})
	if err != nil {
		t.Fatal(err)
	}
	res := pendingResult(cl, s.ID, time.Second)
	if o := res.StructuredContent.(Outcome); o.HostLiveness != nil {
		t.Fatalf("no stamp yet, but host_liveness: %+v", o.HostLiveness)
	}
	stamp, err := bridge.SignLiveness(bridge.LivenessStamp{Host: f.laptop.Config.ID, Agent: f.agent.Config.ID, State: bridge.LivenessStopped,
		Time: time.Now().Unix() - 60, Interval: 300, Accepts: []string{f.agent.Identity().SignKid()}, Trusted: true, Policy: strings.Repeat("ab", 32)}, f.laptop.Identity())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(f.laptop.Config.Folder, filepath.FromSlash(bridge.LivenessPath(f.laptop.Config.ID, f.agent.Config.ID)))
	if err := os.WriteFile(p, stamp, 0o644); err != nil {
		t.Fatal(err)
	}
	res = pendingResult(cl, s.ID, time.Second)
	o := res.StructuredContent.(Outcome)
	text := res.Content[0].(*sdk.TextContent).Text
	if o.HostLiveness == nil || o.HostLiveness.Verdict != agent.LivenessStopped || !strings.Contains(text, `host "laptop" stopped`) ||
		!strings.Contains(o.Hint, "not serving") {
		t.Fatalf("pending with the host stopped: %q, %+v", text, o)
	}
}

// A tool from a stale catalog (one that may describe another policy than
// the host's) does not check a call against it: the host decides (SPEC
// §10a; the red team of 5da3cff). The server's own inputs are still
// checked, without a panic.
func TestParseCallOnAStaleCatalog(t *testing.T) {
	op := bridge.OpInfo{Name: "op", MaxStdin: 0, Args: []bridge.ArgInfo{{Name: "env", Type: "enum", Values: []string{"staging"}, Required: true}}}
	tool, err := newOpTool("hostid", "laptop", op, false, waits{})
	if err != nil {
		t.Fatal(err)
	}
	tool.stale = true
	c, err := tool.parseCall(json.RawMessage(`{"env": "production", "_stdin": "x", "newarg": 5, "flag": true}`))
	if err != nil || c.args["env"] != "production" || c.args["newarg"] != "5" || c.args["flag"] != "true" {
		t.Fatalf("values the stale catalog does not know: %+v, %v", c, err)
	}
	for _, bad := range []string{`{"_key": 1}`, `{"_stdin": true}`, `{"_wait_seconds": "x"}`} {
		if _, err := tool.parseCall(json.RawMessage(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
