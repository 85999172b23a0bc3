package crypto

// Hand-written forms of the patterns the wire names (SPEC §2): a CLI process
// checks a few of each and exits, and compiling the regular expressions cost
// it more than all its matching (TestNamesMatchPatterns keeps them equal).

// ValidName reports whether s matches ^[a-z0-9][a-z0-9._-]{0,63}$: a
// party's suggested name in its bundle (SPEC §2), and an op's (SPEC §7).
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')) {
			return false
		}
	}
	return true
}

// ValidKid reports whether s has the form of a key id: ^[0-9a-f]{32}$.
func ValidKid(s string) bool { return LowerHex(s, 32) }

// LowerHex reports whether s is exactly n lower-case hex digits.
func LowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
