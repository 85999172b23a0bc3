package bridge

import (
	"fmt"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const modulePath = "github.com/syncbridge/bridge"

// importRules are the one-way arrows of DESIGN §3 (further rules): for each package of the
// module, the packages of the module it may import. crypto and syncsafe are
// leaves, and so are opspec (an op's description and its arguments' rules,
// which the agent shares with the policy) and safepath (the walk that says
// whether another user could change what a path names); the bridge wire
// package may import opspec, never the policy compiler, the host or the
// agent side (so the agent links none of the host's code); trust (each
// side's home: keys, peers, the trust store) stands on the wire and
// safepath, and everything above it may use it; the
// Syncthing client and the doctor stand on the wire and the home, beside
// the sides; host and agent are separate rooms: each imports the wire, and
// neither the other. The operator's commands on a host's home (approve,
// deny, pending, the ledger's listing and references, the orders they leave
// the daemon, policy check and explain) stand beside the daemon, which
// reads their orders: host imports operator, never the reverse. Below host,
// its probe (what a test sees of a daemon and makes it do) is a leaf that
// only host and its tests import, testkit (what the host's unit tests and
// its system suites share) is imported by test files alone, and the system
// suites (bridge/host/systest) are tests with no code of their own. cmd reaches
// everything through them. A new package
// must be added here on purpose, or the test fails.
var importRules = map[string][]string{
	"crypto":                       {},
	"syncsafe":                     {},
	"bridge/internal/opspec":       {},
	"bridge/internal/safepath":     {},
	"bridge/ledger":                {"crypto", "syncsafe"},
	"bridge/policy":                {"crypto", "syncsafe", "bridge/internal/opspec", "bridge/internal/safepath"},
	"bridge/runner":                {"crypto", "syncsafe"},
	"bridge":                       {"crypto", "syncsafe", "bridge/internal/opspec"},
	"bridge/trust":                 {"bridge", "bridge/internal/safepath", "crypto", "syncsafe"},
	"bridge/syncthing":             {"bridge", "bridge/trust", "syncsafe"},
	"bridge/doctor":                {"bridge", "bridge/trust", "bridge/syncthing", "syncsafe"},
	"bridge/operator":              {"bridge", "bridge/trust", "crypto", "syncsafe", "bridge/ledger", "bridge/policy"},
	"bridge/host":                  {"bridge", "bridge/trust", "bridge/doctor", "crypto", "syncsafe", "bridge/ledger", "bridge/policy", "bridge/runner", "bridge/operator", "bridge/host/internal/probe"},
	"bridge/host/internal/probe":   {"bridge/ledger"},
	"bridge/host/internal/testkit": {"bridge", "bridge/trust", "bridge/agent", "bridge/ledger", "bridge/operator", "syncsafe", "bridge/host/internal/probe"},
	"bridge/host/systest":          {},
	"bridge/agent":                 {"bridge", "bridge/trust", "crypto", "syncsafe"},
	"bridge/mcp":                   {"bridge", "bridge/trust", "bridge/agent"},
	"cmd/bridge":                   {"bridge", "bridge/trust", "bridge/host", "bridge/operator", "bridge/agent", "bridge/mcp", "bridge/doctor", "bridge/syncthing", "crypto"},
	"cmd/bridge-bench":             {"bridge", "bridge/trust", "bridge/host", "bridge/agent", "bridge/doctor", "crypto", "syncsafe"},
}

// testImportRules are what a package's test files may import beyond its
// own rules. The host's tests drive the daemon end to end with the real
// agent client (no mock of the other side); the agent's tests never need
// the daemon.
var testImportRules = map[string][]string{
	"bridge":      {"bridge/policy"},                                                    // catalogs and vectors built from a real policy
	"bridge/host": {"bridge/agent", "bridge/syncthing", "bridge/host/internal/testkit"}, // and what the system suites share with them
	// The system suites drive the host as a whole, with real sync clients,
	// the real agent, the doctor and the operator's commands.
	"bridge/host/systest": {"bridge", "bridge/trust", "bridge/agent", "bridge/host", "bridge/host/internal/probe",
		"bridge/host/internal/testkit", "bridge/doctor", "bridge/ledger", "bridge/operator", "bridge/syncthing", "crypto", "syncsafe"},
}

// checkArrows walks the module rooted at root and returns every import that
// breaks rules. Test files are included: a test of a leaf that needs bridge
// belongs in bridge.
func checkArrows(root string, rules, testRules map[string][]string) (problems []string, checked int, err error) {
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "fixtures") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(p, 0)
		if _, ok := err.(*build.NoGoError); ok {
			return nil
		} else if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		allowed, known := rules[rel]
		if !known {
			problems = append(problems, fmt.Sprintf("package %s has no import rule", rel))
			return nil
		}
		checked++
		for i, imports := range [][]string{pkg.Imports, slices.Concat(pkg.TestImports, pkg.XTestImports)} {
			may := allowed
			if i == 1 {
				may = slices.Concat(allowed, testRules[rel])
			}
			for _, imp := range imports {
				ours, ok := strings.CutPrefix(imp, modulePath+"/")
				if !ok || ours == rel {
					continue
				}
				switch {
				case ours == "cmd" || strings.HasPrefix(ours, "cmd/"):
					problems = append(problems, fmt.Sprintf("%s imports %s: nothing may import cmd", rel, ours))
				case !slices.Contains(may, ours):
					problems = append(problems, fmt.Sprintf("%s imports %s: allowed are %v", rel, ours, may))
				}
			}
		}
		return nil
	})
	return problems, checked, err
}

// TestImportArrows enforces the arrows on this module.
func TestImportArrows(t *testing.T) {
	problems, checked, err := checkArrows("..", importRules, testImportRules)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if checked < 3 {
		t.Fatalf("only %d packages checked: the walk is broken", checked)
	}
}

// TestImportArrowsCatchViolations proves the checker fails on a tree that
// breaks each rule.
func TestImportArrowsCatchViolations(t *testing.T) {
	root := t.TempDir()
	write := func(dir, src string, name ...string) {
		file := "x.go"
		if len(name) > 0 {
			file = name[0]
		}
		os.MkdirAll(filepath.Join(root, dir), 0o755)
		if err := os.WriteFile(filepath.Join(root, dir, file), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("crypto", "package crypto\nimport _ \""+modulePath+"/syncsafe\"\n")
	write("syncsafe", "package syncsafe\n")
	write("bridge/ledger", "package ledger\nimport _ \""+modulePath+"/bridge/policy\"\n")
	write("bridge/policy", "package policy\nimport _ \""+modulePath+"/bridge\"\n")
	write("bridge", "package bridge\nimport _ \""+modulePath+"/cmd/bridge\"\n")
	write("cmd/bridge", "package main\nimport _ \""+modulePath+"/bridge/runner\"\n")
	write("bridge/host", "package host\nimport _ \""+modulePath+"/bridge/agent\"\n")
	write("bridge/agent", "package agent\n")
	write("bridge/agent", "package agent\nimport _ \""+modulePath+"/bridge/host\"\n", "x_test.go")
	write("newpkg", "package newpkg\n")
	problems, _, err := checkArrows(root, importRules, testImportRules)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"crypto imports syncsafe", "bridge/ledger imports bridge/policy", "bridge/policy imports bridge",
		"bridge imports cmd/bridge", "cmd/bridge imports bridge/runner", "package newpkg has no import rule",
		"bridge/host imports bridge/agent", "bridge/agent imports bridge/host"}
	for _, w := range want {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, w) }) {
			t.Errorf("checker missed %q; found %q", w, problems)
		}
	}
}
