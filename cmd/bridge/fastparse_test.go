package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
)

// Each fast-path CLI holds the globals and exactly one command of CLI,
// declared as CLI declares it: what parses there parses the same in the
// whole CLI.
func TestFastCommandsMatchCLI(t *testing.T) {
	full := reflect.TypeFor[CLI]()
	for _, word := range []string{"run", "submit", "status", "wait", "result", "cancel", "version"} {
		model, g := fastModel([]string{word})
		if model == nil || g == nil {
			t.Fatalf("%s: no fast path", word)
		}
		ft := reflect.TypeOf(model).Elem()
		if ft.NumField() != 2 || ft.Field(0).Type != reflect.TypeFor[Globals]() || !ft.Field(0).Anonymous {
			t.Fatalf("%s: %s is not Globals and one command", word, ft)
		}
		cmd := ft.Field(1)
		want, ok := full.FieldByName(cmd.Name)
		if !ok || want.Type != cmd.Type || want.Tag != cmd.Tag {
			t.Fatalf("%s: field %s %s `%s`; CLI has %s `%s`", word, cmd.Name, cmd.Type, cmd.Tag, want.Type, want.Tag)
		}
		if strings.ToLower(cmd.Name) != word {
			t.Fatalf("%s: field %s", word, cmd.Name)
		}
	}
}

// What the fast path parses, and what it leaves to the whole CLI: help,
// the version flag, short flags, a line that does not parse, other
// commands.
func TestFastParseOnlyWhatParses(t *testing.T) {
	id := strings.Repeat("ab", 16)
	for _, args := range [][]string{
		{"--home", "h", "status", id},
		{"--json", "run", "echo", "msg=hi"},
		{"--home=h", "run", "--key", "k", "echo", "msg=hi"},
		{"version"},
		{"status"}, // without an id: each host's liveness and what is outstanding
	} {
		if kctx, _ := fastParse(args, nil, io.Discard, io.Discard); kctx == nil {
			t.Errorf("%q: not parsed by the fast path", args)
		}
	}
	for _, args := range [][]string{
		{"run", "--help"}, {"--help"}, {"run", "-h"}, {"--version"}, {"run"}, {"status", "a", "b"},
		{"run", "--bogus", "echo"}, {"ls"}, {"help", "run"}, {"--home", "run", "ops"},
	} {
		if kctx, _ := fastParse(args, nil, io.Discard, io.Discard); kctx != nil {
			t.Errorf("%q: parsed by the fast path (%s)", args, kctx.Command())
		}
	}
}
