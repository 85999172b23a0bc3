package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/syncbridge/bridge/bridge/trust"
	"github.com/syncbridge/bridge/syncsafe"
)

// Operator actions in the audit log: pair, keys trust, keys remove, keys
// revoke and keys rotate change whom the host trusts, so the audit log
// records them beside what the daemon did. (approve, deny and reconcile
// are recorded by the daemon when it applies them; policy reloads when it
// notices them.)
//
// The log is a hash chain with one writer, the holder of serve.lock. A
// command that acts while the daemon runs cannot append itself: it leaves
// an order in the control directory, as approve does, and the daemon logs
// it at its next tick (within a second). With no daemon running the
// command takes serve.lock, appends, and releases it. An order left by a
// command that raced a stopping daemon waits for the next holder of the
// lock: the next start, or the next command that appends, which logs the
// waiting orders first, oldest first. Each line keeps the time the
// operator acted, whoever writes it.

// auditOrderPrefix begins the control file name of an audit order.
const auditOrderPrefix = "audit-"

// AuditAction records an operator's action in a host's audit log; on an
// agent's home it does nothing (an agent home keeps no audit log). It
// reports whether the line was left for the running daemon.
func AuditAction(h *trust.Home, e AuditEvent) (queued bool, err error) {
	if h.Config.Role != "host" {
		return false, nil
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	lock, err := syncsafe.Lock(h.Path("serve.lock"))
	if errors.Is(err, syncsafe.ErrLocked) {
		return true, writeAuditOrder(h, e)
	} else if err != nil {
		return false, fmt.Errorf("audit %s: %w", e.Event, err)
	}
	defer lock.Unlock()
	a, err := openAudit(h.Path(auditName))
	if err != nil {
		return false, fmt.Errorf("audit %s: %w", e.Event, err)
	}
	defer a.close()
	logAuditOrders(h, a)
	a.log(e)
	return false, nil
}

// auditOrder is an operator.Order that carries a line of the audit log.
type auditOrder struct {
	Audit *AuditEvent `json:"audit"`
}

func writeAuditOrder(h *trust.Home, e AuditEvent) error {
	data, _ := json.Marshal(auditOrder{Audit: &e})
	if err := os.MkdirAll(h.Path("control"), 0o700); err != nil {
		return err
	}
	// Names sort by time, so the orders are logged in the order given.
	name := fmt.Sprintf("%s%020d-%d.json", auditOrderPrefix, e.Time.UnixNano(), os.Getpid())
	return syncsafe.WriteFileAtomic(h.Path("control", name), data)
}

// logAuditOrders appends the audit orders waiting in the control
// directory, oldest first, and removes them. The caller holds serve.lock.
func logAuditOrders(h *trust.Home, a *auditLog) {
	files, _ := filepath.Glob(h.Path("control", auditOrderPrefix+"*.json"))
	for _, f := range files {
		if e, ok := readAuditOrder(f); ok {
			a.log(e)
		}
		os.Remove(f)
	}
}

// operatorEvents are the only events an audit order may carry: the CLI's
// trust actions. Anything else in the control directory (a line claiming
// the daemon ran or approved something) is not the CLI's, and is dropped.
var operatorEvents = map[string]bool{"pair": true, "trust": true, "remove": true, "revoke": true, "rotate": true}

// readAuditOrder reads one audit order file: a regular file (never a FIFO
// to block on) holding an operator event, with none of the fields only the
// daemon's lines carry (a request, an op, a status, an exit code).
func readAuditOrder(f string) (AuditEvent, bool) {
	if fi, err := os.Lstat(f); err != nil || !fi.Mode().IsRegular() || fi.Size() > 64<<10 {
		return AuditEvent{}, false
	}
	data, err := os.ReadFile(f)
	var o auditOrder
	if err != nil || json.Unmarshal(data, &o) != nil || o.Audit == nil || !operatorEvents[o.Audit.Event] {
		return AuditEvent{}, false
	}
	e := *o.Audit
	e.Seq, e.Prev, e.Status, e.Exit, e.File, e.ID, e.Op = 0, "", "", nil, "", "", ""
	return e, true
}
