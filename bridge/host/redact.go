package host

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"regexp/syntax"
	"slices"
	"sync"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/policy"
	"github.com/syncbridge/bridge/bridge/runner"
)

// Redacted replaces each secret found in an op's output, in a result's
// detail and in the audit log.
const Redacted = "[REDACTED]"

// secretPattern is one kind of secret. Every match contains one of its
// needles (compared case-insensitively if fold), which a plain byte search
// finds far faster than the regexp engine runs: an output none of them
// occurs in is not run through the regexp at all (a 4 MiB output would
// otherwise cost about a second of CPU per pattern). No needles: always run.
type secretPattern struct {
	re      *regexp.Regexp
	needles []string
	fold    bool
	// lines: a policy pattern that can match a line break, so that the
	// progress stream's line carry cannot keep its matches whole. The
	// defaults cannot, save the private key's, which the carry handles
	// on its own (see progress).
	lines bool
	// perLine: no match can hold a line break or needs the text's start or
	// end (\A, \z, ^ and $ without (?m)), so the regexp runs only over the
	// lines that hold a needle, not over the whole output: a build log of
	// megabytes with one URL in it (the needle "://") cost a second of CPU
	// per 3 MB, and 16 s under the race detector.
	perLine bool
}

// defaultSecrets are the secrets the host redacts unless the policy says
// [redact] enabled = false. A pattern with a capture group replaces only the
// group (the password of a URL, the token after "Bearer"); the text around
// it stays, so the output still reads.
//
// None of them can match a line break but the private key's: the tokens'
// classes hold no whitespace, the gap after "Bearer" is [ \t]+ and a URL's
// user and password exclude \s. The progress stream relies on it: it
// publishes whole lines only, so a match is never cut by a chunk, and it
// holds a key block from its BEGIN line to its END line
// (TestRedactDefaultsStayOnOneLine).
//
// They are compiled on first use: every bridge process links this package,
// and only a daemon redacts.
var defaultSecrets = sync.OnceValue(func() []secretPattern {
	return []secretPattern{
		{regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{36,}`), []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_"}, false, false, false},                                  // GitHub tokens
		{regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{22,}`), []string{"github_pat_"}, false, false, false},                                                         // GitHub fine-grained tokens
		{regexp.MustCompile(`\bsk-(?:ant-)?[A-Za-z0-9_-]{20,}`), []string{"sk-"}, false, false, false},                                                               // OpenAI, Anthropic
		{regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`), []string{"AKIA", "ASIA"}, false, false, false},                                                         // AWS access key ids
		{regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`), []string{"xox"}, false, false, false},                                                                // Slack
		{regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}`), []string{"AIza"}, false, false, false},                                                                       // Google API keys
		{regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)`), []string{"-----BEGIN "}, false, false, false}, // PEM keys, also cut ones
		{regexp.MustCompile(`(?i)\bBearer[ \t]+([A-Za-z0-9._~+/=-]{8,})`), []string{"bearer"}, true, false, false},                                                   // HTTP bearer tokens
		{regexp.MustCompile(`\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:([^/\s@]+)@`), []string{"://"}, false, false, false},                                              // passwords in URLs
	}
})

// redactor replaces secrets. A nil redactor (redaction disabled) changes
// nothing.
type redactor struct {
	res []secretPattern
}

// newRedactor builds the redactor a policy asks for: the defaults plus the
// policy's patterns, or nil when the policy turns redaction off. A policy
// pattern whose every match begins with the same text has that text as
// its needle.
func newRedactor(r policy.Redaction) *redactor {
	if !r.Enabled {
		return nil
	}
	res := append([]secretPattern{}, defaultSecrets()...)
	for _, re := range r.Patterns {
		sp := secretPattern{re: re, lines: matchesNewline(re)}
		if prefix, _ := re.LiteralPrefix(); prefix != "" {
			sp.needles = []string{prefix}
		}
		res = append(res, sp)
	}
	for i := range res {
		res[i].perLine = len(res[i].needles) > 0 && !matchesNewline(res[i].re) && !anchoredToText(res[i].re)
	}
	return &redactor{res: res}
}

// spansLines reports whether one of r's policy patterns can match a line
// break.
func (r *redactor) spansLines() bool {
	for _, sp := range r.res {
		if sp.lines {
			return true
		}
	}
	return false
}

// matchesNewline reports whether some match of re can hold a '\n': a
// literal one, a class that takes it (`\s`, `[^x]`), or `.` under (?s).
// A pattern that does not parse again is counted as one that can.
func matchesNewline(re *regexp.Regexp) bool {
	t, err := syntax.Parse(re.String(), syntax.Perl) // as regexp.Compile parses
	if err != nil {
		return true
	}
	var walk func(*syntax.Regexp) bool
	walk = func(t *syntax.Regexp) bool {
		switch t.Op {
		case syntax.OpAnyChar:
			return true
		case syntax.OpLiteral:
			return slices.Contains(t.Rune, '\n')
		case syntax.OpCharClass:
			for i := 0; i+1 < len(t.Rune); i += 2 {
				if t.Rune[i] <= '\n' && '\n' <= t.Rune[i+1] {
					return true
				}
			}
			return false
		}
		return slices.ContainsFunc(t.Sub, walk)
	}
	return walk(t)
}

// mayMatch reports whether b holds one of the pattern's needles.
func (sp *secretPattern) mayMatch(b []byte) bool {
	if len(sp.needles) == 0 {
		return true
	}
	for _, n := range sp.needles {
		if indexNeedle(b, n, sp.fold) >= 0 {
			return true
		}
	}
	return false
}

// anchoredToText reports whether re matches at the text's start or end
// (\A, \z, and ^ or $ without (?m)), which a line of the text is not: run
// over one line, such a pattern would match where it does not in the whole.
// A pattern that does not parse again counts as anchored.
func anchoredToText(re *regexp.Regexp) bool {
	t, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return true
	}
	var walk func(*syntax.Regexp) bool
	walk = func(t *syntax.Regexp) bool {
		if t.Op == syntax.OpBeginText || t.Op == syntax.OpEndText {
			return true
		}
		return slices.ContainsFunc(t.Sub, walk)
	}
	return walk(t)
}

// indexNeedle is bytes.Index, case-insensitive for a lower-case ASCII
// needle if fold.
func indexNeedle(b []byte, needle string, fold bool) int {
	if !fold {
		return bytes.Index(b, []byte(needle))
	}
	first, upper := needle[0], needle[0]-'a'+'A'
	for i := 0; i+len(needle) <= len(b); i++ {
		if c := b[i]; c != first && c != upper {
			continue
		}
		if bytes.EqualFold(b[i:i+len(needle)], []byte(needle)) {
			return i
		}
	}
	return -1
}

// find returns the matches of sp in b, as regexp's FindAllSubmatchIndex
// does over the whole of b.
func (sp *secretPattern) find(b []byte) [][]int {
	if !sp.perLine {
		if !sp.mayMatch(b) {
			return nil
		}
		return sp.re.FindAllSubmatchIndex(b, -1)
	}
	// No match crosses a line break, and each holds a needle: the lines
	// that hold none have none, and a run of whole lines has the matches
	// the whole text has there (\b and (?m)^ see the same non-word byte, a
	// line break or none, at its ends). The lines with a needle are taken
	// in one pass, keeping nothing per line, and those less than spanGap
	// apart are merged into one span, so that an output dense with needles
	// costs a few regexp runs, not one per line; lines farther apart are
	// run alone, so that a needle on every 50th line of a log does not
	// make a run over nearly all of it.
	const spanGap = 256
	var locs [][]int
	flush := func(start, end int) {
		for _, l := range sp.re.FindAllSubmatchIndex(b[start:end], -1) {
			for k := range l {
				if l[k] >= 0 {
					l[k] += start
				}
			}
			locs = append(locs, l)
		}
	}
	next := make([]int, len(sp.needles)) // each needle's next occurrence at or after pos; len(b) for none
	for k := range next {
		next[k] = -1
	}
	spanStart, spanEnd := -1, -1
	for pos := 0; pos < len(b); {
		i := len(b)
		for k, n := range sp.needles {
			if next[k] < pos {
				next[k] = len(b)
				if j := indexNeedle(b[pos:], n, sp.fold); j >= 0 {
					next[k] = pos + j
				}
			}
			i = min(i, next[k])
		}
		if i == len(b) {
			break
		}
		start := bytes.LastIndexByte(b[pos:i], '\n') + 1 + pos
		end := len(b)
		if j := bytes.IndexByte(b[i:], '\n'); j >= 0 {
			end = i + j
		}
		switch {
		case spanStart < 0:
			spanStart, spanEnd = start, end
		case start-spanEnd <= spanGap:
			spanEnd = end
		default:
			flush(spanStart, spanEnd)
			spanStart, spanEnd = start, end
		}
		pos = end + 1
	}
	if spanStart >= 0 {
		flush(spanStart, spanEnd)
	}
	return locs
}

// bytes returns b with every secret replaced by [REDACTED], and how many
// were. b itself is not modified.
func (r *redactor) bytes(b []byte) ([]byte, int) {
	if r == nil || len(b) == 0 {
		return b, 0
	}
	total := 0
	for i := range r.res {
		sp := &r.res[i]
		locs := sp.find(b)
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
// it reads is not all the op printed. An output kept in a spool file is
// first scanned for the patterns' needles as a stream; only one in which a
// needle occurs is read into memory to be redacted (the regexps need it
// whole: a private key's match spans lines).
func (r *redactor) redactResult(rc *bridge.Receipt, stdout, stderr runner.Output) (runner.Output, runner.Output, error) {
	if r == nil {
		return stdout, stderr, nil
	}
	stdout, n1, err := r.output(stdout)
	if err != nil {
		return stdout, stderr, err
	}
	stderr, n2, err := r.output(stderr)
	if err != nil {
		return stdout, stderr, err
	}
	detail, n3 := r.bytes([]byte(rc.Detail))
	rc.Detail = string(detail)
	// The argv may carry a secret the policy author wrote into it (a
	// token): the agent sees the receipt, and the catalog hides argv.
	n4 := 0
	if len(rc.Argv) > 0 {
		argv := make([]string, len(rc.Argv))
		for i, a := range rc.Argv {
			b, n := r.bytes([]byte(a))
			argv[i], n4 = string(b), n4+n
		}
		rc.Argv = argv
	}
	if n := n1 + n2 + n3 + n4; n > 0 {
		note := fmt.Sprintf("%d secret(s) redacted by the host", n)
		if rc.Detail != "" {
			note = rc.Detail + "; " + note
		}
		rc.Detail = note
	}
	return stdout, stderr, nil
}

// output redacts one captured stream.
func (r *redactor) output(o runner.Output) (runner.Output, int, error) {
	if o.Spooled() {
		may, err := r.mayMatchStream(o.Reader())
		if err != nil || !may {
			return o, 0, err
		}
		// The spool stays open: its owner closes it, and an answer tried
		// again reads it again.
		data, err := io.ReadAll(o.Reader())
		if err != nil {
			return o, 0, err
		}
		o = runner.Output{Data: data, Total: o.Total, Truncated: o.Truncated}
	}
	var n int
	o.Data, n = r.bytes(o.Data)
	return o, n, nil
}

// mayMatchStream reports whether any pattern may match in what src
// yields, reading it once in blocks: a needle cut by a block boundary is
// found in the overlap kept from the block before.
func (r *redactor) mayMatchStream(src io.Reader) (bool, error) {
	overlap := 0
	for _, sp := range r.res {
		if len(sp.needles) == 0 {
			return true, nil // a pattern without needles runs on everything
		}
		for _, n := range sp.needles {
			overlap = max(overlap, len(n)-1)
		}
	}
	buf := make([]byte, overlap+256<<10)
	kept := 0
	for {
		n, err := io.ReadFull(src, buf[kept:])
		block := buf[:kept+n]
		for i := range r.res {
			if r.res[i].mayMatch(block) {
				return true, nil
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return false, nil
		} else if err != nil {
			return false, err
		}
		kept = min(overlap, len(block))
		copy(buf, block[len(block)-kept:])
	}
}
