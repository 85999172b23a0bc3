package host

import (
	"fmt"
	"regexp"

	"github.com/syncbridge/bridge/bridge"

	"github.com/syncbridge/bridge/bridge/policy"
)

// Redacted replaces each secret found in an op's output, in a result's
// detail and in the audit log.
const Redacted = "[REDACTED]"

// defaultSecrets are the secrets the host redacts unless the policy says
// [redact] enabled = false. A pattern with a capture group replaces only the
// group (the password of a URL, the token after "Bearer"); the text around
// it stays, so the output still reads.
var defaultSecrets = []*regexp.Regexp{
	regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{36,}`),                                                           // GitHub tokens
	regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{22,}`),                                                         // GitHub fine-grained tokens
	regexp.MustCompile(`\bsk-(?:ant-)?[A-Za-z0-9_-]{20,}`),                                                       // OpenAI, Anthropic
	regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`),                                                          // AWS access key ids
	regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`),                                                        // Slack
	regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}`),                                                                // Google API keys
	regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)`), // PEM keys, also cut ones
	regexp.MustCompile(`(?i)\bBearer[ \t]+([A-Za-z0-9._~+/=-]{8,})`),                                             // HTTP bearer tokens
	regexp.MustCompile(`\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:([^/\s@]+)@`),                                      // passwords in URLs
}

// redactor replaces secrets. A nil redactor (redaction disabled) changes
// nothing.
type redactor struct {
	res []*regexp.Regexp
}

// newRedactor builds the redactor a policy asks for: the defaults plus the
// policy's patterns, or nil when the policy turns redaction off.
func newRedactor(r policy.Redaction) *redactor {
	if !r.Enabled {
		return nil
	}
	return &redactor{res: append(append([]*regexp.Regexp{}, defaultSecrets...), r.Patterns...)}
}

// bytes returns b with every secret replaced by [REDACTED], and how many
// were. b itself is not modified.
func (r *redactor) bytes(b []byte) ([]byte, int) {
	if r == nil || len(b) == 0 {
		return b, 0
	}
	total := 0
	for _, re := range r.res {
		locs := re.FindAllSubmatchIndex(b, -1)
		if len(locs) == 0 {
			continue
		}
		out := make([]byte, 0, len(b))
		last := 0
		for _, l := range locs {
			start, end := l[0], l[1]
			if len(l) >= 4 && l[2] >= 0 {
				start, end = l[2], l[3] // the secret is the first group
			}
			out = append(out, b[last:start]...)
			out = append(out, Redacted...)
			last = end
			total++
		}
		b = append(out, b[last:]...)
	}
	return b, total
}

// string is bytes for text.
func (r *redactor) string(s string) string {
	if r == nil {
		return s
	}
	b, n := r.bytes([]byte(s))
	if n == 0 {
		return s
	}
	return string(b)
}

// redactResult redacts a result before it is sealed: the output streams and
// the detail. The count is said in the detail, so the agent knows that what
// it reads is not all the op printed.
func (r *redactor) redactResult(rc *bridge.Receipt, stdout, stderr []byte) ([]byte, []byte) {
	if r == nil {
		return stdout, stderr
	}
	stdout, n1 := r.bytes(stdout)
	stderr, n2 := r.bytes(stderr)
	detail, n3 := r.bytes([]byte(rc.Detail))
	rc.Detail = string(detail)
	if n := n1 + n2 + n3; n > 0 {
		note := fmt.Sprintf("%d secret(s) redacted by the host", n)
		if rc.Detail != "" {
			note = rc.Detail + "; " + note
		}
		rc.Detail = note
	}
	return stdout, stderr
}
