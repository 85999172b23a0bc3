package host

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
)

// Tests for the hardening of issue 13: bounds and bindings the policy sets,
// enforced on the real pipeline (a daemon and an agent sharing a folder).

// Each op bounds the standard input a request may carry (max_stdin): a
// request over its op's bound is refused too-large before its input is
// copied, one over every bound of its agent before its payload is even
// spooled, and the built-in ping takes none. The catalog shows the bounds,
// and the agent holds its input to them before it sends.
func TestStdinBoundedByPolicy(t *testing.T) {
	t.Parallel()
	p := newPair(t, `
[ops.cat]
argv = ["cat"]
env = ["PATH"]
max_stdin = "1KiB"
[ops.big]
argv = ["cat"]
env = ["PATH"]
max_stdin = "64KiB"
[ops.plain]
argv = ["wc", "-c"]
env = ["PATH"]
[agents.cloud-1]
ops = ["cat", "big", "plain"]
`)
	input := func(n int) *bytes.Reader { return bytes.NewReader(bytes.Repeat([]byte("x"), n)) }
	// Sent before the host published its catalog: the agent cannot check,
	// so the host's own checks decide.
	sent := map[string]string{}
	for _, c := range []struct {
		name, op string
		n        int
	}{
		{"cat 1 KiB", "cat", 1024},
		{"cat 1 KiB + 1", "cat", 1025},
		{"big 1 MiB + 128 KiB", "big", 1<<20 + 128<<10},
		{"big 64 KiB", "big", 64 << 10},
		{"plain 1 MiB", "plain", 1 << 20},
		{"plain 1 MiB + 1", "plain", 1<<20 + 1},
		{"ping 1", bridge.PingOp, 1},
		{"ping 0", bridge.PingOp, 0},
	} {
		s, err := p.client.Submit(agent.SubmitOptions{Op: c.op, TTL: time.Hour, Stdin: input(c.n)})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		sent[c.name] = s.ID
	}
	p.start(t, nil)
	tooLarge := func(name, detail string) {
		t.Helper()
		out := p.wait(t, sent[name])
		if rc := out.Receipt; rc.Status != bridge.StatusRejected || rc.Reason != "too-large" || !strings.Contains(rc.Detail, detail) {
			t.Errorf("%s: %s (%s) %q, want rejected too-large naming %q", name, rc.Status, rc.Reason, rc.Detail, detail)
		}
		if len(out.Stdout) != 0 {
			t.Errorf("%s: the op ran: %q", name, out.Stdout)
		}
	}
	done := func(name, stdout string) {
		t.Helper()
		out := p.wait(t, sent[name])
		if out.Receipt.Status != bridge.StatusDone || strings.TrimSpace(string(out.Stdout)) != stdout {
			t.Errorf("%s: %s (%s) %.40q, want done %.40q", name, out.Receipt.Status, out.Receipt.Reason, out.Stdout, stdout)
		}
	}
	done("cat 1 KiB", strings.Repeat("x", 1024))
	// Within what the agent may send at all, over what this op takes: the
	// header tells, and the input is not copied.
	tooLarge("cat 1 KiB + 1", "1025 bytes of standard input, op cat takes at most 1024 (max_stdin)")
	// Over every op of the agent (1 MiB, plain's default, is the most):
	// refused from the manifest's pinned length, before the payload is
	// spooled.
	tooLarge("big 1 MiB + 128 KiB", "this agent may send at most 1114116")
	done("big 64 KiB", strings.Repeat("x", 64<<10))
	// The default is 1 MiB.
	done("plain 1 MiB", "1048576")
	tooLarge("plain 1 MiB + 1", "op plain takes at most 1048576")
	// The no-op takes no input at all.
	tooLarge("ping 1", "op bridge.ping takes at most 0")
	done("ping 0", "pong")

	cat, err := p.client.Ops("")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, op := range cat.Ops {
		got[op.Name] = op.MaxStdin
	}
	if want := map[string]int64{"cat": 1 << 10, "big": 64 << 10, "plain": 1 << 20}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("catalog max_stdin %v, want %v", got, want)
	}
	// With the catalog in place the agent refuses by itself, and publishes
	// nothing.
	before, _ := filepath.Glob(filepath.Join(p.folder, bridge.ToHostDir(p.host.Config.ID, p.agent.Config.ID), "*.payload"))
	for op, n := range map[string]int{"cat": 1025, "big": 64<<10 + 1} {
		_, err := p.client.Submit(agent.SubmitOptions{Op: op, TTL: time.Hour, Stdin: input(n)})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("standard input is larger than the %d bytes op %s takes", n-1, op)) {
			t.Errorf("agent side, %s with %d bytes: %v", op, n, err)
		}
	}
	if after, _ := filepath.Glob(filepath.Join(p.folder, bridge.ToHostDir(p.host.Config.ID, p.agent.Config.ID), "*.payload")); len(after) != len(before) {
		t.Errorf("a refused submit left a payload: %d before, %d after", len(before), len(after))
	}
	if out := p.run(t, agent.SubmitOptions{Op: "cat", TTL: time.Hour, Stdin: input(1024)}); out.Receipt.Status != bridge.StatusDone {
		t.Errorf("1 KiB with the catalog: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	// Once the daemon has stopped, nothing it spooled is left. (Not at an
	// answer: a run's input is removed as its goroutine ends, after the
	// publish the agent saw, and a rescan may be evaluating the id again.)
	p.stop(t)
	if left, _ := filepath.Glob(p.host.Path("spool", "*")); len(left) != 0 {
		t.Errorf("spool files left: %v", left)
	}
}

// The built-in ping counts against the agent's ceilings like any op: an
// agent at its ceiling cannot keep the host verifying, recording and
// answering pings.
func TestPingCountsAgainstCeilings(t *testing.T) {
	t.Parallel()
	p := newPair(t, `
[ops.echo]
argv = ["echo", "hi"]
env = ["PATH"]
[agents.cloud-1]
ops = ["echo"]
max_runs_per_hour = 2
`)
	p.start(t, nil)
	for i := range 2 {
		if out := p.run(t, agent.SubmitOptions{Op: bridge.PingOp, TTL: time.Hour}); out.Receipt.Status != bridge.StatusDone {
			t.Fatalf("ping %d: %s (%s)", i+1, out.Receipt.Status, out.Receipt.Reason)
		}
	}
	for _, op := range []string{bridge.PingOp, "echo"} {
		out := p.run(t, agent.SubmitOptions{Op: op, TTL: time.Hour})
		if rc := out.Receipt; rc.Status != bridge.StatusRejected || rc.Reason != ReasonCeiling || !strings.Contains(rc.Detail, "max_runs_per_hour = 2") {
			t.Errorf("%s after two pings: %s (%s) %q, want rejected at max_runs_per_hour", op, rc.Status, rc.Reason, rc.Detail)
		}
	}
}

// An approval is bound to what the human was shown, not to the request
// id: a path argument is resolved again when the request is approved, and
// if it resolves elsewhere now (a symlink swapped), what runs would not be
// what was approved. It is refused, and nothing runs.
func TestApprovalBoundToWhatWasShown(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for name, text := range map[string]string{"a.txt": "approved file\n", "b.txt": "other file\n"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink("a.txt", link); err != nil {
		t.Fatal(err)
	}
	p := newPair(t, fmt.Sprintf(`
[ops.show]
argv = ["cat", "{file}"]
env = ["PATH"]
approve = true
[ops.show.args.file]
type = "path"
root = %q
must_exist = true
[agents.cloud-1]
ops = ["show"]
`, root))
	p.start(t, nil)
	park := func() string {
		t.Helper()
		s, err := p.client.Submit(agent.SubmitOptions{Op: "show", Args: map[string]string{"file": "link"}, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 5*time.Second, "the request to wait for approval", func() bool {
			return p.entry(t, s.ID).State == ledger.StateAwaitingApproval
		})
		if e := p.entry(t, s.ID); !strings.Contains(e.Reason, filepath.Join(root, "a.txt")) {
			t.Fatalf("pending shows %q, want the resolved a.txt", e.Reason)
		}
		return s.ID
	}
	approve := func(id string) {
		t.Helper()
		var err error
		testkit.WaitFor(t, 5*time.Second, "the approval to be taken", func() bool {
			err = p.daemon.decide(p.agent.Config.ID+"/"+id, true, "")
			return err != errBusy
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// As shown: it runs.
	id := park()
	approve(id)
	if out := p.wait(t, id); out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != "approved file\n" {
		t.Fatalf("approved as shown: %s (%s) %q", out.Receipt.Status, out.Receipt.Reason, out.Stdout)
	}
	// Shown a.txt, then the link is swapped before the approval.
	id = park()
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b.txt", link); err != nil {
		t.Fatal(err)
	}
	approve(id)
	out := p.wait(t, id)
	if rc := out.Receipt; rc.Status != bridge.StatusRejected || rc.Reason != ReasonApprovalMismatch || !strings.Contains(rc.Detail, "differs from what the human approved") {
		t.Errorf("approved after the swap: %s (%s) %q %q, want rejected %s", rc.Status, rc.Reason, rc.Detail, out.Stdout, ReasonApprovalMismatch)
	}
	if bytes.Contains(out.Stdout, []byte("other file")) {
		t.Errorf("ran what nobody approved: %q", out.Stdout)
	}
}

// BRIDGE_TEST_CRASH_AT makes a daemon exit at a durable step; only the
// crash-injection tests may set it (testkit.Serve). A production daemon
// whose environment happens to carry it must ignore it: it has no probe at
// all (only a test binary sets probe.New), and a test binary's daemons
// read the variable only in testkit.Serve.
//
// Not in parallel: it unsets probe.New for every daemon of the process, and
// t.Setenv.
func TestCrashHookNotReadFromEnvironment(t *testing.T) {
	t.Setenv("BRIDGE_TEST_CRASH_AT", "claimed")
	p := newPair(t, testPolicy)
	d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.probe == nil || d.probe.CrashAt != "" {
		t.Fatalf("NewDaemon in the test binary: probe %v, want one that read nothing from the environment", d.probe)
	}
	saved := probe.New
	probe.New = nil // as in a production binary
	defer func() { probe.New = saved }()
	d, err = NewDaemon(p.host, DaemonOptions{AllowRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.probe != nil || d.probe.Crashing("claimed") {
		t.Fatal("a daemon of a binary without probe.New has a probe")
	}
}

// A human approves the input too: for an op that waits for approval the
// approval text (what `bridge pending` shows, and what the approval is
// bound to) names the standard input's size and SHA-256, or "none" (issue
// 26, item 2: a patch or script on stdin was approved unseen).
func TestApprovalShowsTheInput(t *testing.T) {
	t.Parallel()
	p := newPair(t, `
[ops.apply]
argv = ["cat"]
env = ["PATH"]
approve = true
max_stdin = "1MiB"
[agents.cloud-1]
ops = ["apply"]
`)
	p.start(t, nil)
	input := "--- a/x\n+++ b/x\n@@ patch @@\n"
	for _, c := range []struct{ stdin, want string }{
		{input, fmt.Sprintf("%d bytes, sha256 %x", len(input), sha256.Sum256([]byte(input)))},
		{"", "none"},
	} {
		o := agent.SubmitOptions{Op: "apply", TTL: time.Hour}
		if c.stdin != "" {
			o.Stdin = strings.NewReader(c.stdin)
		}
		s, err := p.client.Submit(o)
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 5*time.Second, "the request to wait for approval", func() bool {
			return p.entry(t, s.ID).State == ledger.StateAwaitingApproval
		})
		pending, err := operator.Pending(p.host)
		if err != nil {
			t.Fatal(err)
		}
		shown := ""
		for _, l := range pending {
			if l.ID == s.ID {
				shown = l.Reason
			}
		}
		if !strings.Contains(shown, "stdin:       "+c.want+"\n") {
			t.Fatalf("pending shows:\n%s\nwant a stdin line %q", shown, c.want)
		}
		kept := operator.ApprovalInputPath(p.host, p.agent.Config.ID, s.ID)
		if got, err := os.ReadFile(kept); c.stdin != "" && (err != nil || string(got) != c.stdin) {
			t.Fatalf("the input kept for the human: %q, %v", got, err)
		}
		if c.stdin != "" {
			var buf strings.Builder
			if _, err := operator.PendingInput(p.host, s.ID, &buf); err != nil || buf.String() != c.stdin {
				t.Fatalf("pending --stdin: %q, %v", buf.String(), err)
			}
		}
		var derr error
		testkit.WaitFor(t, 5*time.Second, "the approval to be taken", func() bool {
			derr = p.daemon.decide(p.agent.Config.ID+"/"+s.ID, true, "")
			return derr != errBusy
		})
		if derr != nil {
			t.Fatal(derr)
		}
		if out := p.wait(t, s.ID); out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != c.stdin {
			t.Fatalf("approved: %s (%s) %q", out.Receipt.Status, out.Receipt.Reason, out.Stdout)
		}
		if _, err := os.Stat(kept); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the input is still kept once approved: %v", err)
		}
	}
	// A copy a crash left behind (its request no longer waits) goes at
	// the next collection.
	stale := operator.ApprovalInputPath(p.host, p.agent.Config.ID, bridge.NewRequestID())
	must(t, os.WriteFile(stale, []byte("left"), 0o600))
	p.daemon.gc.run(GCOptions{})
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("a copy younger than a minute (its request may be on its way to waiting) was swept: %v", err)
	}
	old := time.Now().Add(-2 * time.Minute)
	must(t, os.Chtimes(stale, old, old))
	p.daemon.gc.run(GCOptions{})
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a kept input without a waiting request stays: %v", err)
	}
}

// Only test code makes a daemon's probe: no file of a package a production
// binary links assigns probe.New. The one non-test file that does is
// testkit's serve role, which only test files import (TestImportArrows).
func TestOnlyTestsSetTheProbe(t *testing.T) {
	t.Parallel()
	var found []string
	assigns := 0
	err := filepath.WalkDir("../..", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if strings.HasPrefix(e.Name(), ".") && p != "../.." || e.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok {
				return true
			}
			for _, l := range as.Lhs {
				if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == "New" {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "probe" {
						assigns++
						if !strings.HasSuffix(p, "_test.go") && filepath.Dir(p) != filepath.Join("..", "..", "bridge", "host", "internal", "testkit") {
							found = append(found, p)
						}
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if assigns < 3 {
		t.Fatalf("found %d assignments of probe.New: the walk went wrong", assigns)
	}
	for _, p := range found {
		t.Errorf("%s sets probe.New outside test code: a production binary could make a probe (DESIGN §3)", p)
	}
}
