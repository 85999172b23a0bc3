//go:build unix

package main

import (
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A signal ends a batch at once while it waits for its next line (an idle
// producer), not when that line comes.
func TestSignalStopsWaitingBatch(t *testing.T) {
	agentHome, _ := pairedCLIHomes(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- realMain([]string{"--home", agentHome, "submit", "--batch", "--no-check"}, pr, &out, &errOut)
	}()
	if _, err := pw.Write([]byte(`{"op": "echo", "args": {"msg": "a"}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	// Its id printed: the batch is past its first line, its signal
	// handler set, and waiting for the second.
	for deadline := time.Now().Add(30 * time.Second); !strings.HasPrefix(out.String(), "1\t"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("line 1 not sent: %q %q", out.String(), errOut.String())
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitInterrupt || !strings.Contains(errOut.String(), "interrupted at line 2: it was not sent") {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the batch still waits for its next line after SIGINT")
	}
}
