package operator

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	"github.com/syncbridge/bridge/syncsafe"
)

// Order is a control file the CLI leaves for a running daemon in the
// home's control directory: a decision on a request (Key, As), a garbage
// collection (GC), or a line of the audit log (Audit, written by the host
// package). The daemon reads them (host's applyOrders); this package and
// the host's own commands write them.
type Order struct {
	Audit     json.RawMessage `json:"audit,omitempty"`
	Key       string          `json:"key,omitempty"` // the ledger key, agent/id
	As        string          `json:"as,omitempty"`  // done|failed|rerun (reconcile), approve|deny
	Why       string          `json:"why,omitempty"`
	GC        bool            `json:"gc,omitempty"`
	Grace     time.Duration   `json:"grace,omitempty"`
	Retention time.Duration   `json:"retention,omitempty"`
	At        time.Time       `json:"at,omitzero"` // when a collection was ordered: it takes only what finished before
}

// IsAudit reports whether the order carries an audit line (host's own
// format; `"audit": null` carries none).
func (o Order) IsAudit() bool {
	return len(o.Audit) > 0 && string(o.Audit) != "null"
}

// WriteOrder leaves an order in the home's control directory.
func WriteOrder(h *trust.Home, o Order) error {
	data, _ := json.Marshal(o)
	if err := os.MkdirAll(h.Path("control"), 0o700); err != nil {
		return err
	}
	name := strings.ReplaceAll(o.Key, "/", "-")
	if o.GC {
		// One file per order, named by its time (carried out in that
		// order): a second `bridge gc` before the daemon looked must not
		// replace the first, whose list its operator saw.
		at := o.At
		if at.IsZero() {
			at = time.Now()
		}
		name = fmt.Sprintf("gc-%019d", at.UnixNano())
	}
	return syncsafe.WriteFileAtomic(h.Path("control", name+".json"), data)
}

// ErrQueued: the daemon is running; the order was handed to it.
var ErrQueued = errors.New("queued for the running daemon")

// DaemonRunning reports whether `bridge serve` runs on h, by the pid it
// wrote into its lock file; a stale file after a crash names a dead process
// (or, rarely, a reused pid).
func DaemonRunning(h *trust.Home) (int, bool) {
	data, _ := os.ReadFile(h.Path("serve.lock"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid, err == nil && pid > 0 && processAlive(pid)
}

// HostOnly refuses a command that acts on a host's requests in another
// home.
func HostOnly(h *trust.Home, what string) error {
	if h.Config.Role != "host" {
		return bridge.WithHint(fmt.Errorf("%s: this home belongs to an agent; it is a command of the host", what),
			"run it with the host's --home")
	}
	return nil
}
