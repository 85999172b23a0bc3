package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestReadmeQuickStart runs README.md's quick start line by line, as a
// testscript: each `host$` and `agent$` line is run with that side's home,
// the shared folder in place of ~/Sync/bridge and the fingerprints each
// init printed in place of HOST-FINGERPRINT and AGENT-FINGERPRINT. So the
// README cannot drift from the CLI. The MCP client's line is checked to
// name a real bridge command; TestMCP drives that server.
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## Quick start\n.*?```sh\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no quick start block")
	}
	var script strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&script, format+"\n", args...) }
	w("mkdir $WORK/folder")
	serving, lines := false, 0
	for _, line := range strings.Split(strings.TrimSpace(string(m[1])), "\n") {
		side, cmd, ok := strings.Cut(line, "$")
		if !ok || (side != "host" && side != "agent") {
			t.Fatalf("quick start line %q: want host$ or agent$ first", line)
		}
		if i := strings.Index(cmd, " # "); i >= 0 {
			cmd = cmd[:i]
		}
		cmd = strings.TrimSpace(cmd)
		cmd = strings.ReplaceAll(cmd, "~/Sync/bridge", "$WORK/folder")
		cmd = strings.ReplaceAll(cmd, "HOST-FINGERPRINT", "$HOSTFP")
		cmd = strings.ReplaceAll(cmd, "AGENT-FINGERPRINT", "$AGENTFP")
		w("env BRIDGE_HOME=$WORK/%s", side)
		lines++
		switch {
		case strings.HasPrefix(cmd, "claude mcp add "):
			_, server, ok := strings.Cut(cmd, " -- ")
			if !ok || !strings.HasPrefix(server, "bridge ") {
				t.Fatalf("the MCP line %q does not run a bridge command", cmd)
			}
			w("exec %s --help", server)
			w("stdout 'MCP'")
		case cmd == "bridge serve":
			w("exec bridge serve --rescan 1s &serve&")
			serving = true
		case strings.HasPrefix(cmd, "bridge init "):
			w("exec %s", cmd)
			w("capture %sFP stdout 'fingerprint +([a-z0-9-]+)'", strings.ToUpper(side))
		default:
			w("exec %s", cmd)
		}
		if cmd == "bridge run hello" {
			w("stdout '^hello from the host$'")
		}
	}
	if !serving || lines < 8 {
		t.Fatalf("the quick start lost its serve line or its steps:\n%s", script.String())
	}
	w("kill -INT serve")
	w("wait serve")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "readme.txt"), []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{Dir: dir, RequireExplicitExec: true, Setup: scriptSetup, Cmds: scriptCmds()})
}
