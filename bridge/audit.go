package bridge

import (
	"encoding/json"
	"os"
	"sync"
	"time"
)

// auditLog appends one JSON line per event to audit.log in the host's home,
// outside the synced folder. Each line is written with one write(2) on an
// O_APPEND file, so lines never interleave.
type auditLog struct {
	mu sync.Mutex
	f  *os.File
}

// AuditEvent is one line of the audit log.
type AuditEvent struct {
	Time   time.Time `json:"time"`
	Event  string    `json:"event"`
	Agent  string    `json:"agent,omitempty"`
	ID     string    `json:"id,omitempty"`
	Op     string    `json:"op,omitempty"`
	Status string    `json:"status,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Detail string    `json:"detail,omitempty"`
	File   string    `json:"file,omitempty"`
	Exit   *int      `json:"exit,omitempty"`
}

func openAudit(path string) (*auditLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &auditLog{f: f}, nil
}

func (a *auditLog) log(e AuditEvent) {
	if a == nil {
		return // read-only uses (a dry-run gc beside a running daemon)
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	line, _ := json.Marshal(e)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.f.Write(append(line, '\n'))
}

func (a *auditLog) close() error { return a.f.Close() }
