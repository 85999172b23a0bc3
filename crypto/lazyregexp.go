package crypto

import (
	"regexp"
	"sync"
)

// lazyRegexp compiles a package-level pattern on its first use, not at
// package init: every bridge process links this package, and most never
// match most patterns (a CLI start paid for compiling them all).
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
