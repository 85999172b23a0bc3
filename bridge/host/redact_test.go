package host

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/policy"
	"github.com/syncbridge/bridge/bridge/runner"
)

func TestRedactDefaults(t *testing.T) {
	t.Parallel()
	r := newRedactor(policy.Redaction{Enabled: true})
	cases := []struct{ in, want string }{
		{"token ghp_" + strings.Repeat("a1B2", 9) + " end", "token [REDACTED] end"},
		{"github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "[REDACTED]"},
		{"key=sk-ant-api03-" + strings.Repeat("x", 30), "key=[REDACTED]"},
		{"OPENAI sk-" + strings.Repeat("Z9", 12), "OPENAI [REDACTED]"},
		{"aws AKIAIOSFODNN7EXAMPLE.", "aws [REDACTED]."},
		{"slack xoxb-123456789012-abcdefghij", "slack [REDACTED]"},
		{"g AIza" + strings.Repeat("b", 35), "g [REDACTED]"},
		{"Authorization: Bearer abc.def.ghi123", "Authorization: Bearer [REDACTED]"},
		{"clone https://user:hunter2@example.com/repo.git", "clone https://user:[REDACTED]@example.com/repo.git"},
		{"a\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----\nb", "a\n[REDACTED]\nb"},
		{"cut -----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl", "cut [REDACTED]"},
		// Not secrets: left alone.
		{"task-" + strings.Repeat("a", 30), "task-" + strings.Repeat("a", 30)},
		{"https://example.com:8443/path", "https://example.com:8443/path"},
		{"ghp_short", "ghp_short"},
		{"", ""},
	}
	for _, c := range cases {
		got, n := r.bytes([]byte(c.in))
		if string(got) != c.want {
			t.Errorf("redact %q = %q, want %q", c.in, got, c.want)
		}
		if (n > 0) != (c.in != c.want) {
			t.Errorf("redact %q counted %d", c.in, n)
		}
	}
}

func TestRedactPolicyPatternsAndOff(t *testing.T) {
	t.Parallel()
	r := newRedactor(policy.Redaction{Enabled: true, Patterns: []*regexp.Regexp{
		regexp.MustCompile(`corp_[a-z0-9]{8}`), regexp.MustCompile(`password=(\S+)`)}})
	got, n := r.bytes([]byte("a corp_abcd1234 b password=xyz c corp_00000000"))
	if string(got) != "a [REDACTED] b password=[REDACTED] c [REDACTED]" || n != 3 {
		t.Errorf("got %q (%d)", got, n)
	}
	if off := newRedactor(policy.Redaction{Enabled: false}); off != nil {
		t.Fatal("disabled redaction built a redactor")
	}
	var off *redactor
	in := "ghp_" + strings.Repeat("a", 36)
	if got, n := off.bytes([]byte(in)); string(got) != in || n != 0 {
		t.Error("a nil redactor changed the output")
	}
	rc := bridge.Receipt{Detail: "timed out"}
	out, errOut, err := r.redactResult(&rc, runner.Output{Data: []byte("corp_abcd1234\n")}, runner.Output{Data: []byte("ok")})
	if err != nil || string(out.Data) != "[REDACTED]\n" || string(errOut.Data) != "ok" || rc.Detail != "timed out; 1 secret(s) redacted by the host" {
		t.Errorf("result: %q %q %q %v", out.Data, errOut.Data, rc.Detail, err)
	}
}

// An output kept in a spool file is redacted like one in memory: a secret
// whose needle straddles a block of the stream scan is found, and an
// output without any needle stays in its file, unread into memory.
func TestRedactSpooledOutput(t *testing.T) {
	t.Parallel()
	r := newRedactor(policy.Redaction{Enabled: true})
	run := func(script string) runner.Output {
		t.Helper()
		o := runner.Run(context.Background(), runner.Spec{Argv: []string{"/bin/sh", "-c", script}, Dir: "/", Env: []string{"PATH=/usr/bin:/bin"}, Spool: t.TempDir()})
		if o.StartErr != nil || o.ExitCode != 0 || !o.Stdout.Spooled() {
			t.Fatalf("run: %+v", o)
		}
		return o.Stdout
	}
	// The needle "ghp_" begins 2 bytes before the first block of the scan
	// (256 KiB and the overlap of 10 bytes) ends.
	token := "ghp_" + strings.Repeat("x", 40)
	secret := run(`head -c 262151 /dev/zero | tr '\0' a; printf '\n` + token + `\n'`)
	rc := bridge.Receipt{}
	out, _, err := r.redactResult(&rc, secret, runner.Output{})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(out.Reader())
	if want := strings.Repeat("a", 262151) + "\n[REDACTED]\n"; string(data) != want || rc.Detail != "1 secret(s) redacted by the host" {
		t.Errorf("straddling secret: %d bytes, ends %q, detail %q", len(data), data[max(0, len(data)-60):], rc.Detail)
	}
	clean := run(`head -c 600000 /dev/zero | tr '\0' a`)
	rc = bridge.Receipt{}
	out, _, err = r.redactResult(&rc, clean, runner.Output{})
	if err != nil || !out.Spooled() || out.Len() != 600000 || rc.Detail != "" {
		t.Errorf("clean output: spooled %v, len %d, detail %q, err %v", out.Spooled(), out.Len(), rc.Detail, err)
	}
	out.Close()
}

// Every match of a default pattern holds one of its needles, so skipping
// the regexp where none occurs never lets a secret through: checked on
// generated text of the characters the patterns are made of, against the
// regexp run alone. A tenth of the texts under the race detector (53 s
// there beside the others); test.sh runs all of them without it.
func TestRedactNeedlesNeverSkipAMatch(t *testing.T) {
	t.Parallel()
	alphabet := "ghpousr_thubaitkAKISzxbB-eEr :/@.=~+-----BEGIN PRIVATE KEY-----\n\tbearer BEARER 0123456789abcdefXYZ"
	rng := rand.New(rand.NewPCG(1, 2))
	texts := 20000
	if testkit.RaceOn {
		texts = 2000
	}
	for i := 0; i < texts; i++ {
		n := 20 + rng.IntN(200)
		var b strings.Builder
		for b.Len() < n {
			if rng.IntN(8) == 0 { // a real secret's shape now and then
				shapes := []string{"ghp_" + strings.Repeat("a", 36), "sk-" + strings.Repeat("b", 20), "AKIA" + strings.Repeat("Q", 16),
					"xoxb-" + strings.Repeat("1", 10), "AIza" + strings.Repeat("c", 35), "bEaReR abcdefgh", "s3://u:p@h", "-----BEGIN X PRIVATE KEY-----"}
				b.WriteString(shapes[rng.IntN(len(shapes))])
				continue
			}
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		text := []byte(b.String())
		for _, sp := range defaultSecrets() {
			if sp.re.Match(text) && !sp.mayMatch(text) {
				t.Fatalf("%s matches %q, and none of its needles %q is in it", sp.re, text, sp.needles)
			}
		}
	}
}

// BenchmarkRedactOutput redacts 4 MiB of build-log text with no secret in
// it, with the needles and (the baseline) with the regexps run alone.
func BenchmarkRedactOutput(b *testing.B) {
	var log strings.Builder
	for i := 0; log.Len() < 4<<20; i++ {
		fmt.Fprintf(&log, "ok  \tgithub.com/example/pkg%d\t0.%03ds\tcoverage: %d.%d%% of statements\n", i, i%1000, i%100, i%10)
	}
	text := []byte(log.String())
	with := newRedactor(policy.Redaction{Enabled: true})
	without := &redactor{}
	for _, sp := range with.res {
		without.res = append(without.res, secretPattern{re: sp.re})
	}
	for _, c := range []struct {
		name string
		r    *redactor
	}{{"needles", with}, {"regexp-only", without}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				c.r.bytes(text)
			}
		})
	}
}

// Running a pattern over the lines that hold its needles finds what running
// it over the whole text finds (random texts of the needles' and secrets'
// bytes, line breaks among them, with policy patterns anchored to the
// text's start or spanning lines, which must not be run per line); and
// every default but the private key's runs per line.
func TestRedactPerLineFindsWhatTheWholeTextDoes(t *testing.T) {
	t.Parallel()
	r := newRedactor(policy.Redaction{Enabled: true, Patterns: []*regexp.Regexp{
		regexp.MustCompile(`^ghp_x`), regexp.MustCompile(`token=([a-z]{4,})`), regexp.MustCompile(`(?m)sk-line$`),
		regexp.MustCompile(`(?s)secret:.*?;`),
	}})
	for _, sp := range r.res {
		want := !strings.Contains(sp.re.String(), "PRIVATE KEY") && sp.re.String() != `^ghp_x` && sp.re.String() != `(?s)secret:.*?;`
		if sp.perLine != want {
			t.Errorf("%s: per line %v, want %v", sp.re, sp.perLine, want)
		}
	}
	alphabet := "ghpousr_thubaitkAKISzxbB-eEr :/@.=~+-\n\n\tbearer BEARER token=abcd 0123456789abcdefXYZ"
	shapes := []string{"ghp_" + strings.Repeat("a", 36), "sk-" + strings.Repeat("b", 20), "AKIA" + strings.Repeat("Q", 16),
		"xoxb-" + strings.Repeat("1", 10), "AIza" + strings.Repeat("c", 35), "bEaReR abcdefgh", "s3://u:p@h", "token=wxyz", "sk-line", "ghp_x", "secret:", ";",
		"-----BEGIN X PRIVATE KEY-----\nabc\n-----END X PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----\nMIIE"}
	rng := rand.New(rand.NewPCG(3, 4))
	// Long texts now and then (lines of filler between the random ones, so
	// that the spans merge and split), where the whole text's scan takes
	// regexp's other engine than a short line's.
	filler := strings.Repeat("ok  \tgithub.com/example/pkg\t0.012s\n", 200)
	texts, long := 20000, 100
	if testkit.RaceOn {
		// The race detector makes regexp some ten times slower, and this
		// test ran 90 s beside the others there; test.sh runs all of them
		// without it.
		texts, long = 600, 200
	}
	for i := 0; i < texts; i++ {
		n := 20 + rng.IntN(400)
		var b strings.Builder
		if i%long == 0 {
			for range 3 + rng.IntN(5) {
				b.WriteString(filler)
				for range 50 {
					if rng.IntN(6) == 0 {
						b.WriteString(shapes[rng.IntN(len(shapes))])
					} else {
						b.WriteByte(alphabet[rng.IntN(len(alphabet))])
					}
				}
			}
		}
		for b.Len() < n {
			if rng.IntN(6) == 0 {
				b.WriteString(shapes[rng.IntN(len(shapes))])
				continue
			}
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		text := []byte(b.String())
		for _, sp := range r.res {
			got := sp.find(text)
			want := sp.re.FindAllSubmatchIndex(text, -1)
			if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("%s over %q: per line %v, whole text %v", sp.re, text, got, want)
			}
		}
	}
}

// An output dense with needles (one on every short line) costs the
// redaction little memory, not some per line: the lines with needles
// are merged into spans, each run once (a red team's 48 MiB of "sk-" lines
// took 985 MB of allocations when each line was a window of its own).
//
// Not in parallel: the memory counted is the whole process's. Under the
// race detector (regexp about ten times slower) an eighth of the lines: a
// cost per line is the same share of the text at 32,768 lines as at
// 262,144; test.sh's simulator step runs all of them.
func TestRedactDenseNeedlesStayCheap(t *testing.T) {
	r := newRedactor(policy.Redaction{Enabled: true})
	lines := 1 << 18
	if testkit.RaceOn {
		lines = 1 << 15
	}
	for _, line := range []string{"sk-\n", "://\n", "ghp_\n", "bearer\n", "sk-\n" + strings.Repeat("x", 300) + "\n"} {
		text := []byte(strings.Repeat(line, lines))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, _ := r.bytes(text)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > uint64(len(text)) {
			t.Errorf("%q × %d: %d bytes allocated by a redaction of %d, want far less", line, lines, n, len(text))
		}
		if !bytes.Equal(out, text) {
			t.Errorf("%q × %d: changed by the redaction", line, lines)
		}
	}
}

// BenchmarkRedactOutputWithNeedle redacts 4 MiB of build-log text that holds
// a URL on every 50th line: the URL pattern's needle is in it, so before the
// per-line runs its regexp ran over the whole output.
func BenchmarkRedactOutputWithNeedle(b *testing.B) {
	var log strings.Builder
	for i := 0; log.Len() < 4<<20; i++ {
		if i%50 == 0 {
			fmt.Fprintf(&log, "downloading https://proxy.golang.org/example/pkg%d/@v/list\n", i)
		}
		fmt.Fprintf(&log, "ok  \tgithub.com/example/pkg%d\t0.%03ds\tcoverage: %d.%d%% of statements\n", i, i%1000, i%100, i%10)
	}
	text := []byte(log.String())
	r := newRedactor(policy.Redaction{Enabled: true})
	whole := &redactor{}
	for _, sp := range r.res {
		sp.perLine = false
		whole.res = append(whole.res, sp)
	}
	for _, c := range []struct {
		name string
		r    *redactor
	}{{"whole-output", whole}, {"per-line", r}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				c.r.bytes(text)
			}
		})
	}
}
