package host

import (
	"os"
	"runtime/debug"
)

// daemonGCPercent is the garbage collector's target for `bridge serve`.
// A daemon keeps its ledger in memory, about 1 KB per request it
// remembers, and most of what it allocates later is short-lived: letting
// the heap grow 50 % over the live data between collections instead of
// Go's 100 % keeps the resident set about a quarter smaller beside 100,000
// finished requests (300 → 240 MiB) for no measurable rescan CPU
// (docs/BENCHMARKS.md).
const daemonGCPercent = 50

// TuneDaemonGC sets the collector's target for a daemon process, unless
// the GOGC environment variable sets it.
func TuneDaemonGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(daemonGCPercent)
	}
}
