package host

import (
	"sync"
	"sync/atomic"
)

// outbox is what the daemon writes into the folder for the agents, and the
// private copies it keeps of it: sealed results (results.go), liveness
// stamps (liveness.go), op catalogs (catalog.go), inbox notes
// (inbox_host.go) and progress (progress_host.go). It decides nothing about
// a request: the Daemon's lifecycle decides, and the outbox publishes what it
// is given, never two results for one id.
type outbox struct {
	*base
	// stampMu orders the liveness stamps' rounds: once the daemon is
	// closing none says serving again, and after a second signal none but
	// stopped (red team of 1a2e763: a control-loop round under way wrote
	// serving over draining).
	stampMu    sync.Mutex
	livenessAt atomic.Int64 // host clock (Unix ns) of the last liveness stamps

	catMu    sync.Mutex                   // guards catalogs
	catalogs map[string]*publishedCatalog // per agent: the catalog last published
}
