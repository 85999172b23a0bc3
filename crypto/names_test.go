package crypto

import (
	"math/rand/v2"
	"regexp"
	"testing"
)

// Each hand-written check equals the pattern SPEC gives it.
func TestNamesMatchPatterns(t *testing.T) {
	name := regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	kid := regexp.MustCompile(`^[0-9a-f]{32}$`)
	const alphabet = "az09af._-AZFG/`{ \x00"
	rng := rand.New(rand.NewPCG(3, 4))
	cands := []string{"0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdeF", "a", "-", "a-"}
	for n := 0; n <= 70; n++ {
		for range 300 {
			b := make([]byte, n)
			for i := range b {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
			cands = append(cands, string(b))
		}
	}
	for _, s := range cands {
		if got, want := ValidName(s), name.MatchString(s); got != want {
			t.Errorf("ValidName(%q) = %v, pattern says %v", s, got, want)
		}
		if got, want := ValidKid(s), kid.MatchString(s); got != want {
			t.Errorf("ValidKid(%q) = %v, pattern says %v", s, got, want)
		}
	}
}
