package host

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/policy"
)

// carryPolicy has ops that print a secret across a progress flush (about
// a second apart), and one that prints plain lines slowly.
const carryPolicy = `
[ops.splittoken]
argv = ["sh", "-c", "printf 'token: ghp_abcdefghijklmnop'; sleep 2.5; printf 'qrstuvwxyz0123456789\n'"]
env = ["PATH"]

[ops.splitpem]
argv = ["sh", "-c", "printf 'key:\n-----BEGIN RSA PRIVATE KEY-----\n'; sleep 2.5; printf 'MIIEsecretbody\n-----END RSA PRIVATE KEY-----\nafter\n'"]
env = ["PATH"]

[ops.longpem]
argv = ["sh", "-c", "echo '-----BEGIN OPENSSH PRIVATE KEY-----'; i=0; while [ $i -lt 400 ]; do echo SECRETBODY0123456789012345678901234567890123456789; i=$((i+1)); done; sleep 2.5; echo SECRETBODYlast; echo '-----END OPENSSH PRIVATE KEY-----'; echo after"]
env = ["PATH"]

[ops.lines]
argv = ["sh", "-c", "for i in 1 2 3 4; do echo line $i; sleep 1.2; done"]
env = ["PATH"]

[agents.cloud-1]
ops = ["splittoken", "splitpem", "longpem", "lines"]
`

// streamed returns what the verified progress chunks of id carried, and
// how many chunks carried output.
func streamed(t *testing.T, cl *agent.Client, id string) (out []byte, withData int) {
	t.Helper()
	chunks, err := cl.Progress(id, 1, "")
	if err != nil {
		t.Fatalf("progress of %s: %v", id, err)
	}
	for _, ch := range chunks {
		if len(ch.Stdout)+len(ch.Stderr) > 0 {
			withData++
		}
		out = append(out, ch.Stdout...)
	}
	return out, withData
}

// A secret the op prints across a progress flush is hidden in the stream
// as in the result: the host publishes whole lines and holds a private key
// from its BEGIN line to its END line, also past the carry's bound. What
// was streamed is the result's output (no "differs" warning for `run`),
// and plain output still streams in several chunks.
func TestProgressRedactsAcrossChunks(t *testing.T) {
	t.Parallel()
	p := newPair(t, carryPolicy)
	p.start(t, nil)
	ids := map[string]string{}
	for _, op := range []string{"splittoken", "splitpem", "longpem", "lines"} {
		s, err := p.client.Submit(agent.SubmitOptions{Op: op, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ids[op] = s.ID
	}
	secret := map[string]*regexp.Regexp{
		"splittoken": regexp.MustCompile(`ghp_|qrstuvwxyz`),
		"splitpem":   regexp.MustCompile(`MIIE|secretbody`),
		"longpem":    regexp.MustCompile(`SECRETBODY`),
	}
	for op, id := range ids {
		res := p.wait(t, id)
		if res.Receipt.Status != bridge.StatusDone {
			t.Fatalf("%s: %s (%s)", op, res.Receipt.Status, res.Receipt.Detail)
		}
		got, withData := streamed(t, p.client, id)
		if re := secret[op]; re != nil && re.Match(got) {
			t.Errorf("%s: the progress stream shows the secret: %q", op, got)
		}
		// What streamed is the result's output, or, for a key too long to
		// hold (the stream halts there), a prefix of it.
		if !bytes.HasPrefix(res.Stdout, got) || (op != "longpem" && !bytes.Equal(got, res.Stdout)) {
			t.Errorf("%s: streamed %q, the result has %q", op, got, res.Stdout)
		}
		if op == "lines" && withData < 2 {
			t.Errorf("lines: %d chunks carried output; a slow multi-line output streams in several", withData)
		}
	}
}

// Output dropped from the stream (over a chunk's cap) takes the partial
// lines on both sides of the gap with it: the rest of a token whose start
// fell into the gap would match no pattern.
func TestProgressGapDropsCutLines(t *testing.T) {
	t.Parallel()
	red := newRedactor(policy.Redaction{Enabled: true})
	p := &progress{}
	var got bytes.Buffer
	fill := strings.Repeat("x", 99) + "\n"
	for range bridge.MaxProgressData / len(fill) {
		p.write(1, []byte(fill))
	}
	p.write(1, []byte(strings.Repeat("y", bridge.MaxProgressData-p.out.buf.Len()-11)+"\n")) // 10 bytes of room left
	p.write(1, []byte("token: ghp_abcdefghij"))                                             // over the cap: dropped
	pub, _ := p.out.take(red, false)
	got.Write(pub)
	p.write(1, []byte("klmnopqrstuvwxyz0123456789\nnext\n-----BEGIN RSA PRIVATE KEY-----\n"))
	p.write(1, []byte("BODYBODY\n-----END RSA PRIVATE KEY-----\nafter\n"))
	pub, _ = p.out.take(red, true)
	got.Write(pub)
	if strings.Contains(got.String(), "klmnop") || strings.Contains(got.String(), "ghp_") || strings.Contains(got.String(), "BODY") {
		t.Errorf("what came after a gap in the stream shows: %q", got.String()[got.Len()-60:])
	}
	// Nothing after the gap is streamed (the result carries it): what was
	// streamed stays whole lines before it.
	if strings.Contains(got.String(), "next") || !strings.HasSuffix(got.String(), "\n") || p.dropped == 0 {
		t.Errorf("after the gap: %q, %d bytes counted dropped", got.String()[got.Len()-20:], p.dropped)
	}
}

// A policy pattern that can match a line break holds the stream (the line
// carry cannot keep its matches whole); the default patterns cannot, save
// the private key's, which the carry holds on its own.
func TestRedactDefaultsStayOnOneLine(t *testing.T) {
	t.Parallel()
	for _, sp := range defaultSecrets() {
		pem := strings.Contains(sp.re.String(), "PRIVATE KEY")
		if matchesNewline(sp.re) != pem {
			t.Errorf("%s: matches a line break %v", sp.re, !pem)
		}
	}
	for re, want := range map[string]bool{`corp_[a-z0-9]{8}`: false, `password=(\S+)`: false, `secret: .*`: false,
		`key\s*=\s*(\w+)`: true, `pw=([^&]+)`: true, `(?s)a.b`: true, "x\ny": true, `a[[:space:]]b`: true} {
		if got := matchesNewline(regexp.MustCompile(re)); got != want {
			t.Errorf("%s: matches a line break %v, want %v", re, got, want)
		}
	}
	r := newRedactor(policy.Redaction{Enabled: true, Patterns: []*regexp.Regexp{regexp.MustCompile(`key\s*=\s*(\w+)`)}})
	s := &outStream{}
	s.buf.WriteString("key =\n")
	if got, _ := s.take(r, false); len(got) != 0 {
		t.Errorf("a line a policy pattern may continue was published: %q", got)
	}
	s.buf.WriteString("hunter2\n")
	if got, _ := s.take(r, true); string(got) != "key =\n[REDACTED]\n" {
		t.Errorf("at the end: %q", got)
	}
}

// A line longer than the carry's bound is not cut and sent in pieces (each
// half of a token redacted alone would match nothing): the stream halts,
// and the result carries the rest.
func TestProgressLongLineHaltsTheStream(t *testing.T) {
	t.Parallel()
	red := newRedactor(policy.Redaction{Enabled: true})
	p := &progress{}
	p.write(1, []byte("ok\n"+strings.Repeat("x", maxCarry)+" ghp_abcdefghijklmnop"))
	pub, dropped := p.out.take(red, false)
	p.write(1, []byte("qrstuvwxyz0123456789\nnext\n"))
	pub2, _ := p.out.take(red, true)
	got := string(pub) + string(pub2)
	if got != "ok\n" || dropped == 0 || !p.out.halted {
		t.Fatalf("streamed %q (dropped %d, halted %v), want only the line before the long one", got[:min(len(got), 40)], dropped, p.out.halted)
	}
}
