package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// TestDocOneModel: the manual page (bridge help --man), --help and
// CLI.md's synopsis come from the one command model: every command and every
// one of its flags appears in each.
func TestDocOneModel(t *testing.T) {
	parser, err := kong.New(&CLI{}, kong.Name("bridge"), kong.Vars{"version": "test"})
	if err != nil {
		t.Fatal(err)
	}
	var man, out, errOut strings.Builder
	if code := realMain([]string{"help", "--man"}, strings.NewReader(""), &man, &errOut); code != 0 || !strings.HasPrefix(man.String(), ".TH BRIDGE 1 ") {
		t.Fatalf("bridge help --man: exit %d, stderr %q", code, errOut.String())
	}
	doc := readCLIDoc(t)
	syn := doc[strings.Index(doc, "## SYNOPSIS"):]
	syn = syn[strings.Index(syn, "```")+3:]
	syn = syn[:strings.Index(syn, "```")]
	// Synopsis entries: a line starting "bridge", with its continuation
	// lines (indented).
	var entries []string
	for _, l := range strings.Split(syn, "\n") {
		if strings.HasPrefix(l, "bridge") {
			entries = append(entries, l)
		} else if strings.TrimSpace(l) != "" && len(entries) > 0 {
			entries[len(entries)-1] += " " + strings.TrimSpace(l)
		}
	}
	for _, n := range commandNodes(parser.Model.Node) {
		if !isCommand(n) {
			continue
		}
		path := cmdPath(n)
		words := strings.Fields(path)
		// The man page: a section of its own, with each flag.
		sec := man.String()
		i := strings.Index(sec, ".SS \"bridge "+roffText(path)+"\"\n")
		if i < 0 {
			t.Errorf("man page: no section for bridge %s", path)
			continue
		}
		sec = sec[i+4:]
		if j := strings.Index(sec, "\n.S"); j >= 0 {
			sec = sec[:j]
		}
		// --help of the command, as `bridge help PATH` prints it.
		out.Reset()
		errOut.Reset()
		if code := realMain(append(slices.Clone(words), "--help"), strings.NewReader(""), &out, &errOut); code != 0 {
			t.Errorf("bridge %s --help: exit %d: %s", path, code, errOut.String())
		}
		help := out.String()
		var helpCmd strings.Builder
		if code := realMain(append([]string{"help"}, words...), strings.NewReader(""), &helpCmd, &errOut); code != 0 || helpCmd.String() != help {
			t.Errorf("bridge help %s: exit %d, not what bridge %s --help prints", path, code, path)
		}
		// The synopsis: an entry for the command whose words include the
		// subcommand's.
		// A command with two forms (submit, submit --batch) has a line each:
		// their flags together are the command's.
		entry := ""
		for _, e := range entries {
			if strings.HasPrefix(e+" ", "bridge "+words[0]+" ") && containsWords(e, words[1:]) {
				entry += e + " "
			}
		}
		entry = strings.TrimSpace(entry)
		if words[0] == "version" && strings.Contains(syn, "| version\n") {
			entry = "bridge version"
		}
		if entry == "" {
			t.Errorf("docs/CLI.md SYNOPSIS: no line for bridge %s", path)
		}
		for _, f := range n.Flags {
			if f.Hidden {
				continue
			}
			if !strings.Contains(sec, roffText("--"+f.Name)) {
				t.Errorf("man page, bridge %s: no --%s", path, f.Name)
			}
			if !strings.Contains(help, "--"+f.Name) {
				t.Errorf("bridge %s --help: no --%s", path, f.Name)
			}
			short := f.Short != 0 && strings.Contains(entry, "-"+string(f.Short)+"|--"+f.Name)
			nudge := strings.HasPrefix(f.Name, "syncthing-") && strings.Contains(entry, "[--syncthing-*]") && strings.Contains(syn, "--"+f.Name+" ")
			if entry != "" && !strings.Contains(entry, "--"+f.Name) && !short && !nudge {
				t.Errorf("docs/CLI.md SYNOPSIS, bridge %s: no --%s", path, f.Name)
			}
		}
	}
}

// containsWords: every word appears in s as a word (between spaces, |, [ or ]).
func containsWords(s string, words []string) bool {
	fields := strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(" |[]", r) })
	for _, w := range words {
		if !slices.Contains(fields, w) {
			return false
		}
	}
	return true
}
