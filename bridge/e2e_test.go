package bridge

import (
	"testing"
)

func TestEndToEndEcho(t *testing.T) {
	p := newPair(t, testPolicy)
	p.start(t, nil)
	out := p.run(t, SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	if out.Receipt.Status != StatusDone || string(out.Stdout) != "hi\n" || out.Receipt.ExitCode != 0 {
		t.Fatalf("status %s reason %s stdout %q exit %d detail %s", out.Receipt.Status, out.Receipt.Reason, out.Stdout, out.Receipt.ExitCode, out.Receipt.Detail)
	}
	out = p.run(t, SubmitOptions{Op: "secret"})
	if out.Receipt.Status != StatusRejected || out.Receipt.Reason != "not-allowed" {
		t.Fatalf("disallowed op: status %s reason %s", out.Receipt.Status, out.Receipt.Reason)
	}
}
