package host

import (
	"runtime/debug"
	"testing"
)

// TuneDaemonGC sets the daemon's collector target, unless GOGC says
// otherwise.
func TestTuneDaemonGC(t *testing.T) {
	current := func() int { p := debug.SetGCPercent(100); debug.SetGCPercent(p); return p }
	defer debug.SetGCPercent(current())
	debug.SetGCPercent(100)
	t.Setenv("GOGC", "")
	TuneDaemonGC()
	if got := current(); got != daemonGCPercent {
		t.Fatalf("without GOGC: GC percent %d, want %d", got, daemonGCPercent)
	}
	debug.SetGCPercent(100)
	t.Setenv("GOGC", "100")
	TuneDaemonGC()
	if got := current(); got != 100 {
		t.Fatalf("with GOGC=100: GC percent %d, want it left alone", got)
	}
}
