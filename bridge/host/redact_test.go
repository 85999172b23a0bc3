package host

import (
	"regexp"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge"

	"github.com/syncbridge/bridge/bridge/policy"
)

func TestRedactDefaults(t *testing.T) {
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
	out, errOut := r.redactResult(&rc, []byte("corp_abcd1234\n"), []byte("ok"))
	if string(out) != "[REDACTED]\n" || string(errOut) != "ok" || rc.Detail != "timed out; 1 secret(s) redacted by the host" {
		t.Errorf("result: %q %q %q", out, errOut, rc.Detail)
	}
}
