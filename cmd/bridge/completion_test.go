package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// TestCompletionBash loads `bridge completion bash` into a real bash and
// asks it what it completes: the command names, a command's subcommands,
// its flags, and nothing a command does not have.
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	var script, errOut strings.Builder
	if code := realMain([]string{"completion", "bash"}, strings.NewReader(""), &script, &errOut); code != 0 {
		t.Fatalf("bridge completion bash: exit %d: %s", code, errOut.String())
	}
	file := filepath.Join(t.TempDir(), "bridge.bash")
	if err := os.WriteFile(file, []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) []string {
		t.Helper()
		// COMP_WORDS as bash fills it, the word under the cursor last.
		args := []string{"--norc", "--noprofile", "-c",
			`source "$0"; COMP_WORDS=("bridge" "$@"); COMP_CWORD=$#; _bridge; printf '%s\n' "${COMPREPLY[@]}"`, file}
		cmd := exec.Command(bash, append(args, words...)...)
		cmd.Dir = t.TempDir() // an empty directory: no file names to fall back on
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	parser, err := kong.New(&CLI{}, kong.Name("bridge"), kong.Vars{"version": "test"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := complete(""), subcommands(parser.Model.Node); !slices.Equal(got, want) {
		t.Errorf("bridge <TAB>: %v, want every command %v", got, want)
	}
	for _, c := range []struct {
		words []string
		want  []string
	}{
		{[]string{"se"}, []string{"serve", "send", "service"}},
		{[]string{"keys", "r"}, []string{"rotate", "revoke", "remove"}},
		{[]string{"--home", "/tmp/h", "keys", "ex"}, []string{"export", "export-secret"}},
		{[]string{"--json", "policy", "ex"}, []string{"explain"}},
		{[]string{"--home", "keys", "re"}, []string{"result", "reconcile"}}, // "keys" is the home's directory here
		{[]string{"keys", "rotate", "--o"}, []string{"--overlap"}},
		{[]string{"serve", "--log"}, []string{"--log-format"}},
		{[]string{"run", "--no"}, []string{"--no-check"}},
		{[]string{"--js"}, []string{"--json"}},
		{[]string{"ls", "--js"}, []string{"--json"}},
		{[]string{"completion", ""}, []string{"bash", "zsh", "fish"}}, // an enum argument's values
		{[]string{"init", ""}, []string{"host", "agent"}},
		{[]string{"help", "se"}, []string{"serve", "send", "service"}}, // help takes a command
		{[]string{"ls", "--he"}, []string{"--help"}},                   // once
		{[]string{"keys", "rotate", "--dr"}, nil},
	} {
		got := complete(c.words...)
		slices.Sort(got)
		want := slices.Clone(c.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("bridge %s<TAB>: %v, want %v", strings.Join(c.words, " "), got, want)
		}
	}
}
