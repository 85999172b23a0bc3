package host

import (
	"os"
	"runtime/debug"
)

// daemonGCPercent is the garbage collector's target for `bridge serve`.
// A daemon keeps its ledger in memory, about 1 KB per request it
// remembers, and most of what it allocates later is short-lived: an idle
// rescan allocates little beside that long-lived heap (it copies no batch,
// finished.go), so letting the heap grow only 25 % over the live data
// between collections instead of Go's 100 % keeps the resident set near
// the live heap for no measurable rescan CPU: at 50,000 finished requests
// 123 MiB at 50 %, 111-114 MiB at 25 %, 103 MiB at 15 % but with a
// rescan 10 % dearer (docs/BENCHMARKS.md).
const daemonGCPercent = 25

// TuneDaemonGC sets the collector's target for a daemon process, unless
// the GOGC environment variable sets it.
func TuneDaemonGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(daemonGCPercent)
	}
}
