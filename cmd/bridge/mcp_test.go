package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCP is the acceptance test of `bridge mcp` (docs/MCP.md): the SDK's
// own client drives the real binary over stdio, against a real `serve` on a
// local folder. It lists the tools and checks their schemas against the
// catalog, runs an op, follows a long op's progress, gets tool errors for
// bad arguments, a denied op and a refused one, and sees the tool list change
// when the host serves a new policy.
func TestMCP(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("bridge") // this test binary, as TestMain put it on PATH
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	folder, hostHome, agentHome := filepath.Join(work, "folder"), filepath.Join(work, "host"), filepath.Join(work, "agent")
	files := filepath.Join(work, "files")
	for _, d := range []string{folder, files} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(files, "note.txt"), []byte("a note\n"), 0o644)
	env := append(os.Environ(), "HOME="+work, "BRIDGE_ALLOW_ROOT=1", "GORACE=atexit_sleep_ms=0", "BRIDGE_HOME=")
	bridgeCmd := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bridge %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	bridgeCmd("", "--home", hostHome, "init", "host", "--name", "laptop", "--folder", folder)
	bridgeCmd("", "--home", agentHome, "init", "agent", "--name", "cloud-1", "--folder", folder)
	hostLine := bridgeCmd("", "--home", hostHome, "keys", "export")
	agentLine := bridgeCmd("", "--home", agentHome, "keys", "export")
	bridgeCmd(agentLine, "--home", hostHome, "keys", "trust", "-")
	bridgeCmd(hostLine, "--home", agentHome, "keys", "trust", "-")

	policy := func(agentOps ...string) string {
		return fmt.Sprintf(mcpPolicy, files, `"`+strings.Join(agentOps, `", "`)+`"`)
	}
	writePolicy := func(p string) {
		if err := os.WriteFile(filepath.Join(hostHome, "policy.toml"), []byte(p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var serve *exec.Cmd
	startServe := func() {
		serve = exec.Command(bin, "--home", hostHome, "serve", "--rescan", "300ms")
		serve.Env = env
		serve.Stderr = &lockedBuffer{}
		if err := serve.Start(); err != nil {
			t.Fatal(err)
		}
	}
	stopServe := func() {
		serve.Process.Signal(syscall.SIGINT)
		if err := serve.Wait(); err != nil {
			t.Errorf("serve: %v\n%s", err, serve.Stderr)
		}
		serve = nil
	}
	t.Cleanup(func() {
		if serve != nil {
			serve.Process.Kill()
			serve.Wait()
		}
	})
	writePolicy(policy("echo", "count", "slow", "cat", "gate", "show"))
	startServe()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	listChanged := make(chan struct{}, 100)
	var progMu sync.Mutex
	var progress []string
	client := sdk.NewClient(&sdk.Implementation{Name: "bridge-test", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { listChanged <- struct{}{} },
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			progMu.Lock()
			progress = append(progress, r.Params.Message)
			progMu.Unlock()
		},
	})
	mcpCmd := exec.Command(bin, "--home", agentHome, "mcp", "--poll", "200ms")
	mcpCmd.Env = env
	mcpStderr := &lockedBuffer{}
	mcpCmd.Stderr = mcpStderr
	sess, err := client.Connect(ctx, &sdk.CommandTransport{Command: mcpCmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// The session's end is the process's: a race report (exit 66 under
		// the race detector) or any other failure of it fails the test.
		if err := sess.Close(); err != nil {
			t.Errorf("bridge mcp at the session's end: %v", err)
		}
		if strings.Contains(mcpStderr.String(), "DATA RACE") {
			t.Error("bridge mcp reported a data race")
		}
		if t.Failed() {
			t.Logf("bridge mcp stderr:\n%s", mcpStderr)
			if serve != nil {
				t.Logf("bridge serve stderr:\n%s", serve.Stderr)
			}
		}
	}()

	// waitTools lists the tools until the op tools are exactly want (the
	// catalog arrives when serve publishes it and the server's poll sees it).
	waitTools := func(want ...string) map[string]*sdk.Tool {
		t.Helper()
		slices.Sort(want)
		deadline := time.Now().Add(60 * time.Second)
		for {
			res, err := sess.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			tools := map[string]*sdk.Tool{}
			var ops []string
			for _, tl := range res.Tools {
				tools[tl.Name] = tl
				if !strings.HasPrefix(tl.Name, "bridge_") {
					ops = append(ops, tl.Name)
				}
			}
			slices.Sort(ops)
			if slices.Equal(ops, want) {
				return tools
			}
			if time.Now().After(deadline) {
				t.Fatalf("op tools are %v, want %v", ops, want)
			}
			select {
			case <-listChanged:
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	tools := waitTools("cat", "count", "echo", "gate", "show", "slow")
	for _, name := range []string{"bridge_status", "bridge_wait", "bridge_result", "bridge_cancel", "bridge_logs", "bridge_inbox"} {
		if tools[name] == nil {
			t.Errorf("no tool %s", name)
		}
	}

	// Every op of the signed catalog is a tool, its schema from the typed
	// arguments.
	var cat struct {
		Ops []struct {
			Name string `json:"name"`
		} `json:"ops"`
	}
	if err := json.Unmarshal([]byte(bridgeCmd("", "--home", agentHome, "--json", "ops")), &cat); err != nil {
		t.Fatal(err)
	}
	for _, op := range cat.Ops {
		if tools[op.Name] == nil {
			t.Errorf("op %s of the catalog is not a tool", op.Name)
		}
	}
	schema := func(name string) map[string]any {
		var m map[string]any
		data, _ := json.Marshal(tools[name].InputSchema)
		json.Unmarshal(data, &m)
		return m
	}
	prop := func(name, arg string) map[string]any {
		p, _ := schema(name)["properties"].(map[string]any)[arg].(map[string]any)
		if p == nil {
			t.Fatalf("tool %s has no input %s: %v", name, arg, schema(name))
		}
		return p
	}
	checkField := func(name, arg, field string, want any) {
		t.Helper()
		if got := prop(name, arg)[field]; !reflect.DeepEqual(got, want) {
			t.Errorf("%s.%s %s = %#v, want %#v", name, arg, field, got, want)
		}
	}
	checkField("echo", "msg", "type", "string")
	checkField("echo", "msg", "pattern", "^(?:[a-z ]{1,20})$")
	checkField("echo", "msg", "maxLength", 20.0)
	checkField("count", "n", "type", "integer")
	checkField("count", "n", "minimum", 1.0)
	checkField("count", "n", "maximum", 5.0)
	checkField("count", "n", "default", 2.0)
	checkField("count", "mode", "enum", []any{"fast", "slow"})
	checkField("count", "loud", "type", "boolean")
	checkField("count", "loud", "default", false)
	checkField("show", "file", "type", "string")
	checkField("cat", "_stdin", "type", "string")
	checkField("echo", "_key", "type", "string")
	if got := schema("count")["required"]; !reflect.DeepEqual(got, []any{"mode"}) {
		t.Errorf("count required = %v, want [mode]", got)
	}
	if _, ok := schema("echo")["properties"].(map[string]any)["_stdin"]; ok {
		t.Error("echo takes no standard input, but its tool has _stdin")
	}
	if !strings.Contains(tools["echo"].Description, "Say something back.") || !strings.Contains(tools["gate"].Description, "approve") {
		t.Errorf("descriptions: echo %q, gate %q", tools["echo"].Description, tools["gate"].Description)
	}
	// An approval-gated op says what the call does; every op tool, and
	// bridge_wait and bridge_result, declare their structured answer; the
	// wait's default and cap are in the schema.
	if d := tools["gate"].Description; !strings.Contains(d, "waits for the approval and the run up to _wait_seconds (50 by default, at most 600)") || !strings.Contains(d, "never the op again") {
		t.Errorf("gate's description: %q", d)
	}
	for _, name := range []string{"echo", "gate", "bridge_wait", "bridge_result"} {
		var os map[string]any
		data, _ := json.Marshal(tools[name].OutputSchema)
		json.Unmarshal(data, &os)
		props, _ := os["properties"].(map[string]any)
		if props["status"] == nil || props["exit_code"] == nil || props["hint"] == nil || props["stdout_bytes"] == nil || props["stdout"] != nil {
			t.Errorf("%s's output schema: %s", name, data)
		}
	}
	// The other bridge_* tools declare what they do answer with.
	for name, field := range map[string]string{"bridge_status": "state", "bridge_logs": "next_from", "bridge_cancel": "cancel"} {
		data, _ := json.Marshal(tools[name].OutputSchema)
		if !strings.Contains(string(data), `"`+field+`"`) || strings.Contains(string(data), "stdout_bytes") {
			t.Errorf("%s's output schema: %s", name, data)
		}
	}
	checkField("echo", "_wait_seconds", "default", 50.0)
	if d, _ := prop("echo", "_wait_seconds")["description"].(string); !strings.Contains(d, "50 when not given, at most 600") {
		t.Errorf("_wait_seconds description: %q", d)
	}

	call := func(name string, args map[string]any, token any) *sdk.CallToolResult {
		t.Helper()
		p := &sdk.CallToolParams{Name: name, Arguments: args}
		if token != nil {
			p.SetProgressToken(token)
		}
		res, err := sess.CallTool(ctx, p)
		if err != nil {
			t.Fatalf("call %s: %v", name, err)
		}
		return res
	}
	text := func(res *sdk.CallToolResult) string {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	structured := func(res *sdk.CallToolResult) map[string]any {
		var m map[string]any
		data, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(data, &m)
		return m
	}
	// stdout is the op's standard output as the result carries it: in
	// the text, once, and nowhere in the structured content (which says
	// its size).
	stdout := func(res *sdk.CallToolResult) string {
		t.Helper()
		s := structured(res)
		if _, ok := s["stdout"]; ok {
			t.Errorf("the structured content carries the output: %v", s)
		}
		txt := text(res)
		_, after, found := strings.Cut(txt, "--- stdout ---\n")
		if !found {
			return ""
		}
		out, _, _ := strings.Cut(after, "--- stderr ---\n")
		if strings.Count(txt, "--- stdout") != 1 {
			t.Errorf("the output is in the text more than once: %q", txt)
		}
		if n, _ := s["stdout_bytes"].(float64); int(n) != len(out) {
			t.Errorf("stdout_bytes %v, the text carries %d bytes", s["stdout_bytes"], len(out))
		}
		return out
	}

	// An op runs on the host and its verified output comes back.
	res := call("echo", map[string]any{"msg": "hi there"}, nil)
	if s := structured(res); res.IsError || s["status"] != "done" || s["exit_code"] != 0.0 || stdout(res) != "hi there\n" {
		t.Fatalf("echo: error %v, %v\n%s", res.IsError, s, text(res))
	}
	res = call("count", map[string]any{"mode": "slow", "n": 4, "loud": true}, nil)
	if out := stdout(res); out != "n=4 mode=slow loud=true\n" {
		t.Errorf("count: %q", out)
	}
	res = call("cat", map[string]any{"_stdin": "from stdin\n"}, nil)
	if out := stdout(res); out != "from stdin\n" {
		t.Errorf("cat: %q", out)
	}

	// Bad arguments: a tool error that names the problem; nothing is sent.
	sentBefore := countFiles(t, filepath.Join(agentHome, "requests"))
	for _, bad := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"echo", map[string]any{"msg": "NOT LOWER"}, "msg"},
		{"count", map[string]any{"mode": "medium"}, "mode"},
		{"count", map[string]any{"mode": "fast", "n": 9}, "n"},
		{"count", map[string]any{}, "mode"},
		{"echo", map[string]any{"msg": "hi", "bogus": "x"}, "bogus"},
		// Said as `bridge run` says it: the argument and the rule.
		{"echo", map[string]any{"msg": "-x"}, `argument "msg": starts with '-'`},
	} {
		res := call(bad.tool, bad.args, nil)
		if !res.IsError || !strings.Contains(text(res), "bad arguments") || !strings.Contains(text(res), bad.want) {
			t.Errorf("%s %v: error %v, %q; want a tool error about %s", bad.tool, bad.args, res.IsError, text(res), bad.want)
		}
	}
	if after := countFiles(t, filepath.Join(agentHome, "requests")); after != sentBefore {
		t.Errorf("bad arguments sent requests: %d files, were %d", after, sentBefore)
	}
	// One the schema cannot tell: a path out of its root, which only the
	// host (it knows the root) refuses.
	res = call("show", map[string]any{"file": "../../etc/passwd"}, nil)
	if !res.IsError || !strings.Contains(text(res), "escapes the op's path root") || !strings.Contains(text(res), "rejected (bad-argument)") {
		t.Errorf("show out of root: error %v, %q", res.IsError, text(res))
	}
	res = call("show", map[string]any{"file": "note.txt"}, nil)
	if out := stdout(res); out != "a note\n" {
		t.Errorf("show: %q %s", out, text(res))
	}

	// A long op: its output arrives as progress notifications, then the
	// result.
	res = call("slow", nil, "slow-1")
	if out := stdout(res); res.IsError || out != "step 1\nstep 2\nstep 3\nend\n" {
		t.Fatalf("slow: %q %s", out, text(res))
	}
	progMu.Lock()
	streamed := strings.Join(progress, "")
	progMu.Unlock()
	if !strings.Contains(streamed, "step 1\n") {
		t.Errorf("progress notifications %q do not carry the op's output", streamed)
	}

	// A pending answer carries what the op streamed so far.
	res = call("slow", map[string]any{"_wait_seconds": 2}, nil)
	if s := structured(res); s["status"] != "pending" || !strings.Contains(text(res), "--- stdout so far ---\nstep 1\n") || s["stdout_bytes"] == 0.0 {
		t.Errorf("slow, pending: %v %q", s, text(res))
	} else {
		id, _ := s["request_id"].(string)
		if out := stdout(call("bridge_wait", map[string]any{"request_id": id, "_wait_seconds": 60}, nil)); out != "step 1\nstep 2\nstep 3\nend\n" {
			t.Errorf("slow, waited for: %q", out)
		}
	}

	// An approval-gated op a human approves: the result says when and as
	// whom, and the notices about it are old news once it is answered.
	res = call("gate", map[string]any{"_wait_seconds": 1}, nil)
	s := structured(res)
	gid, _ := s["request_id"].(string)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if st := structured(call("bridge_status", map[string]any{"request_id": gid}, nil)); st["state"] == "awaiting-approval" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate never awaited approval")
		}
	}
	bridgeCmd("", "--home", hostHome, "approve", "cloud-1/"+gid)
	res = call("bridge_wait", map[string]any{"request_id": gid, "_wait_seconds": 120}, nil)
	if s := structured(res); res.IsError || stdout(res) != "gated\n" || !strings.Contains(fmt.Sprint(s["approval"]), "was approved on the host at") ||
		!strings.Contains(text(res), "approval: request "+gid+" (gate) was approved on the host at ") {
		t.Errorf("approved gate: %v %q", s, text(res))
	}
	var inbox []map[string]any
	json.Unmarshal([]byte(bridgeCmd("", "--home", agentHome, "--json", "inbox", "--all", "--no-ack")), &inbox)
	for _, it := range inbox {
		note, _ := it["note"].(map[string]any)
		if note["request"] == gid && (it["new"] == true || it["answered"] != true) {
			t.Errorf("a notice about an answered request is news: %v", it)
		}
	}

	// An op that waits for a human: the call returns the request id, the
	// human denies it, and bridge_wait returns a tool error that says so.
	res = call("gate", map[string]any{"_wait_seconds": 1}, nil)
	s = structured(res)
	id, _ := s["request_id"].(string)
	if res.IsError || s["status"] != "pending" || len(id) != 32 {
		t.Fatalf("gate: %v %s", s, text(res))
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st := structured(call("bridge_status", map[string]any{"request_id": id}, nil))
		if st["state"] == "awaiting-approval" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate never awaited approval: %v", st)
		}
	}
	bridgeCmd("", "--home", hostHome, "deny", "cloud-1/"+id, "--reason", "not today")
	res = call("bridge_wait", map[string]any{"request_id": id, "_wait_seconds": 120}, nil)
	if !res.IsError || !strings.Contains(text(res), "denied") || !strings.Contains(text(res), "not today") || !strings.Contains(text(res), "do not send it again") {
		t.Errorf("denied gate: error %v, %q", res.IsError, text(res))
	}
	if res := call("bridge_inbox", map[string]any{"all": true}, nil); !strings.Contains(text(res), "approval-pending") {
		t.Errorf("inbox: %s", text(res))
	}

	// The host's policy changes: echo is no longer allowed, later is new. A
	// call made before the new catalog arrives is refused by the host with
	// the reason; then the tool list changes.
	stopServe()
	writePolicy(policy("count", "slow", "cat", "gate", "show", "later"))
	before := manifests(folder)
	refused := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, err := sess.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"msg": "too late", "_wait_seconds": 120}})
		if err != nil {
			res = &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: err.Error()}}}
		}
		refused <- res
	}()
	waitNewManifest(t, folder, before)
	for len(listChanged) > 0 {
		<-listChanged
	}
	startServe()
	res = <-refused
	if !res.IsError || !strings.Contains(text(res), "rejected (not-allowed)") || !strings.Contains(text(res), "hint:") {
		t.Errorf("echo after the policy change: error %v, %q", res.IsError, text(res))
	}
	select {
	case <-listChanged:
	case <-time.After(60 * time.Second):
		t.Fatal("no notifications/tools/list_changed after the new catalog")
	}
	tools = waitTools("cat", "count", "gate", "later", "show", "slow")
	if res := call("later", nil, nil); stdout(res) != "later\n" {
		t.Errorf("later: %s", text(res))
	}
	stopServe()
}

// manifests lists the request manifests in the folder.
func manifests(folder string) []string {
	m, _ := filepath.Glob(filepath.Join(folder, "hosts", "*", "to-host", "*", "*.manifest"))
	return m
}

// waitNewManifest waits until a request manifest not in before is in the
// folder: the request is sent.
func waitNewManifest(t *testing.T, folder string, before []string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, p := range manifests(folder) {
			if !slices.Contains(before, p) {
				return
			}
		}
	}
	t.Fatal("no new request manifest appeared in the folder")
}

func countFiles(t *testing.T, dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return len(entries)
}

const mcpPolicy = `
[ops.echo]
description = "Say something back."
argv = ["echo", "{msg}"]
scope = "read"
max_stdin = 0
[ops.echo.args.msg]
type = "string"
pattern = "[a-z ]{1,20}"
max_len = 20

[ops.count]
argv = ["echo", "n={n}", "mode={mode}", "loud={loud}"]
[ops.count.args.n]
type = "int"
min = 1
max = 5
default = 2
[ops.count.args.mode]
type = "enum"
values = ["fast", "slow"]
required = true
[ops.count.args.loud]
type = "bool"
default = false

[ops.slow]
argv = ["sh", "-c", "for i in 1 2 3; do echo step $i; sleep 1.2; done; echo end"]
env = ["PATH"]

[ops.cat]
argv = ["cat"]
max_stdin = "1KiB"

[ops.gate]
argv = ["echo", "gated"]
approve = true

[ops.show]
argv = ["cat", "{file}"]
[ops.show.args.file]
type = "path"
root = %q
must_exist = true

[ops.later]
argv = ["echo", "later"]

[agents.cloud-1]
ops = [%s]
`
