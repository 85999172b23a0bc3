package bridge

import (
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
)

// nameCandidates makes strings near the edges of the name patterns: every
// length up to 70 from an alphabet of the allowed classes' ends and a few
// neighbours, plus the fixed parts of the file names.
func nameCandidates(seed uint64) []string {
	const alphabet = "az09._-AZ/:@`{~ \x00\xff"
	parts := []string{"", ".progress-", "rotate-", ".rotation", "0", "1", "9", "00", "999999", "1000000",
		"0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdeF", "18446744073709551615", "9999999999999999999"}
	rng := rand.New(rand.NewPCG(seed, 7))
	var out []string
	for n := 0; n <= 70; n++ {
		for range 200 {
			b := make([]byte, n)
			for i := range b {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
			out = append(out, string(b))
		}
	}
	for range 20000 {
		s := ""
		for range 1 + rng.IntN(4) {
			s += parts[rng.IntN(len(parts))]
		}
		out = append(out, s)
	}
	return out
}

// Each hand-written check equals the pattern SPEC gives it.
func TestNamesMatchPatterns(t *testing.T) {
	op := regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	arg := regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
	sha := regexp.MustCompile(`^[0-9a-f]{64}$`)
	progress := regexp.MustCompile(`^([0-9a-f]{32})\.progress-([1-9][0-9]{0,5})$`)
	rotation := regexp.MustCompile(`^rotate-(0|[1-9][0-9]{0,18})\.rotation$`)
	cands := append(nameCandidates(1),
		"a", "a-", "-a", "a.b_c-d", string(make([]byte, 64)), "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01",
		"abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz012", "x_", "x1", "1x",
		"0123456789abcdef0123456789abcdef.progress-1", "0123456789abcdef0123456789abcdef.progress-999999",
		"0123456789abcdef0123456789abcdef.progress-0", "0123456789abcdef0123456789abcdef.progress-1000000",
		"rotate-0.rotation", "rotate-00.rotation", "rotate-9999999999999999999.rotation", "rotate-10000000000000000000.rotation")
	for i := range 300 {
		cands = append(cands, "0123456789abcdef0123456789abcdef.progress-"+strconv.Itoa(i*3331), "rotate-"+strconv.Itoa(i*7919)+".rotation")
	}
	for _, s := range cands {
		if got, want := validOpName(s), op.MatchString(s); got != want {
			t.Errorf("validOpName(%q) = %v, pattern says %v", s, got, want)
		}
		if got, want := validArgName(s), arg.MatchString(s); got != want {
			t.Errorf("validArgName(%q) = %v, pattern says %v", s, got, want)
		}
		if got, want := validSHA256Hex(s), sha.MatchString(s); got != want {
			t.Errorf("validSHA256Hex(%q) = %v, pattern says %v", s, got, want)
		}
		id, seq, ok := ParseProgressName(s)
		if m := progress.FindStringSubmatch(s); (m != nil) != ok || ok && (m[1] != id || m[2] != strconv.Itoa(seq)) {
			t.Errorf("ParseProgressName(%q) = %q, %d, %v; pattern says %q", s, id, seq, ok, m)
		}
		n, ok := ParseRotationName(s)
		if m := rotation.FindStringSubmatch(s); (m != nil) != ok || ok && m[1] != strconv.FormatUint(n, 10) {
			t.Errorf("ParseRotationName(%q) = %d, %v; pattern says %q", s, n, ok, m)
		}
	}
}
