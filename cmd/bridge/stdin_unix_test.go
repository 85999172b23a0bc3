//go:build unix

package main

import (
	"os"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge"
)

// The look at a piped standard input an op with optional input will not
// get (only a warning hangs on it) goes on beside the request, not before
// it: implicitStdin returns at once, and bytes that reach the pipe after it
// returned, before the command ends, are still warned of.
func TestOptionalPipeLookedAtBesideTheRequest(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var errb strings.Builder
	g := &Globals{stdin: r, stderr: &errb}
	in, given := g.implicitStdin("hello", bridge.StdinOptional)
	if in != nil || given.Given {
		t.Fatalf("optional input sent: %v, %+v", in, given)
	}
	if g.pipeNote == nil {
		t.Fatal("no look at the pipe left for later")
	}
	if _, err := w.Write([]byte("late bytes\n")); err != nil {
		t.Fatal(err)
	}
	g.pipeNote()
	g.pipeNote() // said once
	if got := strings.Count(errb.String(), "warning: standard input (a pipe) was not sent"); got != 1 {
		t.Fatalf("stderr %q: want the warning once", errb.String())
	}
}
