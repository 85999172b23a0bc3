package bridge

import (
	"strconv"
	"strings"

	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// Hand-written forms of the wire's name patterns (SPEC §3, §5, §7): a CLI
// process checks a few names and exits, and compiling the regular
// expressions cost it more than all its matching. TestNamesMatchPatterns
// keeps each equal to the pattern SPEC gives.

// validOpName reports whether s matches ^[a-z0-9][a-z0-9._-]{0,63}$, the
// rule of a bundle's name.
func validOpName(s string) bool { return bcrypto.ValidName(s) }

// validArgName reports whether s matches ^[a-z][a-z0-9_]{0,31}$.
func validArgName(s string) bool {
	if len(s) == 0 || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '_')) {
			return false
		}
	}
	return true
}

// validSHA256Hex reports whether s matches ^[0-9a-f]{64}$.
func validSHA256Hex(s string) bool { return bcrypto.LowerHex(s, 64) }

// decimal returns the value of s when it matches ^[1-9][0-9]{0,max-1}$ (or
// also "0" when zero is allowed), as ParseUint reads it.
func decimal(s string, max int, zero bool) (uint64, bool) {
	if len(s) == 0 || len(s) > max || s[0] == '0' && !(zero && s == "0") {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// ParseProgressName splits a chunk's file name: ID.progress-SEQ, with SEQ in
// 1…999999 without leading zeros.
func ParseProgressName(name string) (id string, seq int, ok bool) {
	const mid = ".progress-"
	if len(name) < 32+len(mid)+1 || !ValidID(name[:32]) || name[32:32+len(mid)] != mid {
		return "", 0, false
	}
	n, ok := decimal(name[32+len(mid):], 6, false)
	if !ok {
		return "", 0, false
	}
	return name[:32], int(n), true
}

// ParseRotationName returns the sequence number of a rotation file name:
// rotate-SEQ.rotation, SEQ a decimal of at most 19 digits without leading
// zeros that fits in 64 bits.
func ParseRotationName(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, "rotate-")
	if !ok {
		return 0, false
	}
	if rest, ok = strings.CutSuffix(rest, ".rotation"); !ok {
		return 0, false
	}
	return decimal(rest, 19, true)
}

// ValidPeerName reports whether name can be a peer's local name (and so an
// agent's name in a policy).
func ValidPeerName(name string) bool { return syncsafe.ValidName(name) && !looksLikeID(name) }

func looksLikeID(name string) bool {
	return len(name) >= 8 && strings.Trim(name, "0123456789abcdef") == ""
}
