package bridge

import (
	"math/rand/v2"
	"regexp"
	"testing"
)

// The hand-written name parsers agree with the patterns of SPEC §5, on
// valid names, near misses and random mutations of both.
func TestLayoutNames(t *testing.T) {
	toHost := regexp.MustCompile(`^([0-9a-f]{32})\.(manifest|payload|cancel|ack)$`)
	toAgent := regexp.MustCompile(`^([0-9a-f]{32})\.(result|output|message)$`)
	id := regexp.MustCompile(`^[0-9a-f]{32}$`)
	const good = "0123456789abcdef0123456789abcdef"
	names := []string{"", good, good + ".", good + ".manifest", good + ".payload", good + ".cancel", good + ".ack",
		good + ".result", good + ".output", good + ".message", good + ".manifest\n", good + ".manifestx", "x" + good + ".ack",
		good[:31] + ".ack", good[:31] + "G.ack", good[:31] + "A.ack", good + "0.ack", good + "..ack", good + ".ACK",
		good + ".manifest.tmp", "~$" + good + ".manifest.tmp", good + ".sync-conflict-20240101-000000-ABCDEFG.manifest"}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := "0123456789abcdefABCDEFgz.~-\n\x00/"
	for range 20000 {
		b := []byte(names[r.IntN(len(names))])
		for range r.IntN(3) + 1 {
			switch op := r.IntN(3); {
			case op == 0 && len(b) > 0:
				b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
			case op == 1 && len(b) > 0:
				i := r.IntN(len(b))
				b = append(b[:i], b[i+1:]...)
			default:
				i := r.IntN(len(b) + 1)
				b = append(b[:i], append([]byte{alphabet[r.IntN(len(alphabet))]}, b[i:]...)...)
			}
		}
		names = append(names, string(b))
	}
	for _, n := range names {
		check := func(kind string, re *regexp.Regexp, parse func(string) (string, string, bool)) {
			gid, gext, ok := parse(n)
			m := re.FindStringSubmatch(n)
			if ok != (m != nil) || (ok && (gid != m[1] || gext != m[2])) {
				t.Errorf("%s %q: parsed (%q, %q, %v), pattern says %q", kind, n, gid, gext, ok, m)
			}
		}
		check("to-host", toHost, ParseToHostName)
		check("to-agent", toAgent, ParseToAgentName)
		if ValidID(n) != id.MatchString(n) {
			t.Errorf("ValidID(%q) = %v", n, ValidID(n))
		}
	}
}
