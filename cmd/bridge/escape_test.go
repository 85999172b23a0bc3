package main

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge"
)

// hostile is what a folder writer can put in a file name: a window title
// change ended by BEL, a screen clear, an 8-bit CSI and a bidi override.
const hostile = "~$\x1b]0;pwned\x07\x1b[2J\u009b31m\u202e"

// terminalActive reports a byte or rune a terminal would act on.
func terminalActive(s string) bool {
	return strings.ContainsAny(s, "\x1b\x07\u009b\u202e")
}

// Everything bridge itself prints for a person escapes what a terminal
// would act on, whatever path the text took: the error and hint lines of
// report (text and JSON), note and printf, the parser's errors through
// realMain, and the daemon's text log. Ordinary text, line breaks and tabs are left alone.
func TestMessagesEscapeControls(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := bridge.WithHint(fmt.Errorf("read hosts/x/%s: %w", hostile, errors.New("not a bridge file")), "delete %s", hostile)
	report(&stderr, err, false, &stdout)
	report(&stderr, err, true, &stdout)
	g := &Globals{stdout: &stdout, stderr: &stderr}
	g.note("ignored %s: %v", hostile, err)
	g.printf("%s\t%v %s\n", hostile, []string{hostile}, "plain — ünïcode\nnext line")
	// The daemon's text log (slog quotes any value or message with such
	// runes; this keeps it so).
	bridge.NewLogger(&stderr, "text", bridge.LogInfo).Warn("refused "+hostile, "file", "hosts/x/"+hostile, "err", err)
	home := filepath.Join(t.TempDir(), "home")
	realMain([]string{hostile}, nil, &stdout, &stderr)
	realMain([]string{"--home", home, "status", hostile}, nil, &stdout, &stderr)
	for name, out := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
		if terminalActive(out) {
			t.Errorf("%s carries raw terminal controls:\n%q", name, out)
		}
	}
	if want := `read hosts/x/~$\x1b]0;pwned\a\x1b[2J\u009b31m\u202e: not a bridge file`; !strings.Contains(stderr.String(), "bridge: error: "+want+"\n") {
		t.Errorf("stderr lacks the escaped error line %q:\n%s", want, stderr.String())
	}
	if !strings.Contains(stdout.String(), `\u202e`+"\t[") || !strings.Contains(stdout.String(), "] plain — ünïcode\nnext line\n") {
		t.Errorf("ordinary text changed:\n%q", stdout.String())
	}
	if got := escapeControls("bad \xff byte"); got != `bad \xff byte` {
		t.Errorf("invalid UTF-8 shown as %q", got)
	}
}

// escapeWriter escapes as it streams, whatever the chunks: a character
// split between two writes is whole on the other side, and the result is
// escapeControls of the whole (`bridge pending --stdin` to a terminal).
func TestEscapeWriterAcrossChunks(t *testing.T) {
	in := "é\x1b[2J→\u202eline\n\xff\xfeend"
	for chunk := 1; chunk <= len(in); chunk++ {
		var out strings.Builder
		w := &escapeWriter{w: &out}
		for p := in; len(p) > 0; {
			k := min(chunk, len(p))
			if _, err := w.Write([]byte(p[:k])); err != nil {
				t.Fatal(err)
			}
			p = p[k:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if want := escapeControls(in) + "\n"; out.String() != want {
			t.Errorf("chunks of %d: %q, want %q", chunk, out.String(), want)
		}
	}
}

// escapeControls: an invisible printable is escaped, and once anything is,
// so is a backslash of the text (the red team of e587665).
func TestEscapeControlsInvisibleAndBackslash(t *testing.T) {
	if got := escapeControls("main\u034f"); got != `main\u034f` {
		t.Errorf("invisible printable: %q", got)
	}
	if typed, real := escapeControls(`x\x1b`+"\x07"), escapeControls("x\x1b\x07"); typed == real {
		t.Errorf("a typed escape passes for a real one: %q", typed)
	}
	if got := escapeControls(`C:\dir`); got != `C:\dir` {
		t.Errorf("a backslash alone: %q", got)
	}
}
