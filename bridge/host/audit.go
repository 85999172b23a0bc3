package host

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/trust"
)

// auditLog appends one JSON line per event to audit.log in the host's home,
// outside the synced folder. Each line is written with one write(2) on an
// O_APPEND file, so lines never interleave; one daemon writes (serve.lock).
//
// The lines form a hash chain: each carries its sequence number and the
// SHA-256 of the previous line's bytes, so an edited, removed or inserted
// line breaks the chain at the next line. The last line has no successor,
// so after each append the sidecar audit.log.tail records its seq and hash:
// an edited last line or a cut tail shows there. This is tamper-evidence
// against edits by hand and accidents, not against someone who can rewrite
// the whole home (they can recompute every hash).
type auditLog struct {
	mu     sync.Mutex
	f      *os.File
	tail   *os.File
	seq    uint64
	prev   string
	redact func(string) string // nil: none
}

// AuditEvent is one line of the audit log.
type AuditEvent struct {
	Seq    uint64    `json:"seq"`
	Prev   string    `json:"prev"` // hex SHA-256 of the previous line, "" on the first
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

const (
	auditName     = "audit.log"
	auditTailName = "audit.log.tail"
)

func lineHash(line []byte) string {
	s := sha256.Sum256(line)
	return hex.EncodeToString(s[:])
}

func openAudit(path string) (*auditLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	a := &auditLog{f: f}
	if err := a.resume(); err != nil {
		f.Close()
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	if a.tail, err = os.OpenFile(path+".tail", os.O_CREATE|os.O_RDWR, 0o600); err != nil {
		f.Close()
		return nil, err
	}
	return a, nil
}

// resume finds where the chain ends. A last line without its newline is a
// write a crash cut short: it was never complete, and is dropped. It reads
// the file from its end, as little as holds the last line: a host's audit
// log grows by every request, and a start must not read all of it.
func (a *auditLog) resume() error {
	fi, err := a.f.Stat()
	if err != nil {
		return err
	}
	last, end, err := lastLine(a.f, fi.Size())
	if err != nil {
		return err
	}
	if end < fi.Size() {
		if err := a.f.Truncate(end); err != nil {
			return err
		}
	}
	if end == 0 {
		return nil
	}
	var e AuditEvent
	_ = json.Unmarshal(last, &e)
	a.seq = e.Seq
	if a.seq == 0 { // a log from before the chain: go on counting lines
		data := make([]byte, end)
		if _, err := a.f.ReadAt(data, 0); err != nil {
			return err
		}
		a.seq = uint64(bytes.Count(data, []byte("\n")))
	}
	a.prev = lineHash(last)
	return nil
}

// lastLine returns the last newline-terminated line of the first size
// bytes of f (without its newline) and the offset just past that newline:
// 0 and no line if there is no newline. It reads backwards in growing
// windows until one holds the whole line.
func lastLine(f *os.File, size int64) (line []byte, end int64, err error) {
	for win := int64(64 << 10); ; win *= 2 {
		off := max(0, size-win)
		buf := make([]byte, size-off)
		if _, err := f.ReadAt(buf, off); err != nil {
			return nil, 0, err
		}
		k := bytes.LastIndexByte(buf, '\n')
		if k < 0 {
			if off == 0 {
				return nil, 0, nil
			}
			continue
		}
		j := bytes.LastIndexByte(buf[:k], '\n')
		if j < 0 && off > 0 {
			continue
		}
		return buf[j+1 : k], off + int64(k) + 1, nil
	}
}

func (a *auditLog) log(e AuditEvent) {
	if a == nil {
		return // read-only uses (a dry-run gc beside a running daemon)
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if a.redact != nil {
		e.Detail = a.redact(e.Detail)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	e.Seq, e.Prev = a.seq+1, a.prev
	line, _ := json.Marshal(e)
	if _, err := a.f.Write(append(line, '\n')); err != nil {
		return
	}
	a.seq, a.prev = e.Seq, lineHash(line)
	// Fixed width, so an overwrite in place never leaves old bytes behind.
	a.tail.WriteAt(fmt.Appendf(nil, "%020d %s\n", a.seq, a.prev), 0)
}

func (a *auditLog) close() error {
	a.tail.Close()
	return a.f.Close()
}

// ReadAudit returns the events of a host's audit log, oldest first; n > 0
// keeps only the last n.
func ReadAudit(h *trust.Home, n int) ([]AuditEvent, error) {
	if err := operator.HostOnly(h, "audit"); err != nil {
		return nil, err
	}
	f, err := os.Open(h.Path(auditName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("audit log line %d: %w", len(out)+1, err)
		}
		out = append(out, e)
		if n > 0 && len(out) > 2*n {
			out = append(out[:0], out[len(out)-n:]...)
		}
	}
	if n > 0 && len(out) > n {
		out = out[len(out)-n:]
	}
	return out, sc.Err()
}

// AuditCheck is the outcome of VerifyAudit.
type AuditCheck struct {
	OK       bool     `json:"ok"`
	Lines    int      `json:"lines"`
	Problems []string `json:"problems,omitempty"`
}

// VerifyAudit checks the audit log's hash chain and its tail checkpoint:
// an edited, inserted or removed line, and a cut tail, are each reported
// with the line where the chain breaks.
func VerifyAudit(h *trust.Home) (*AuditCheck, error) {
	if err := operator.HostOnly(h, "audit verify"); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(h.Path(auditName))
	if errors.Is(err, fs.ErrNotExist) {
		data = nil
	} else if err != nil {
		return nil, err
	}
	c := &AuditCheck{}
	problem := func(format string, args ...any) { c.Problems = append(c.Problems, fmt.Sprintf(format, args...)) }
	var hashes []string
	if len(data) > 0 {
		if data[len(data)-1] != '\n' {
			problem("the last line is incomplete (a write was cut short)")
		}
		prev := ""
		for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
			n := i + 1
			var e AuditEvent
			switch err := json.Unmarshal(line, &e); {
			case err != nil:
				problem("line %d: not a JSON event: %v", n, err)
			case e.Seq != uint64(n):
				problem("line %d: seq %d, want %d: lines were removed or inserted before it", n, e.Seq, n)
			case e.Prev != prev:
				problem("line %d: prev does not match the hash of line %d: line %d was edited, or lines were removed or inserted", n, n-1, n-1)
			}
			prev = lineHash(line)
			hashes = append(hashes, prev)
			if len(c.Problems) >= 20 {
				break
			}
		}
	}
	c.Lines = len(hashes)
	tail, err := os.ReadFile(h.Path(auditTailName))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if c.Lines > 0 {
			problem("the tail checkpoint %s is missing: a cut tail cannot be ruled out", auditTailName)
		}
	case err != nil:
		return nil, err
	default:
		seqText, hash, _ := strings.Cut(strings.TrimSpace(string(tail)), " ")
		seq, perr := strconv.ParseUint(seqText, 10, 64)
		switch {
		case perr != nil || len(hash) != 64:
			problem("the tail checkpoint %s is damaged", auditTailName)
		case seq > uint64(c.Lines):
			problem("the log ends at line %d, but %d lines were written: its tail was cut", c.Lines, seq)
		case seq > 0 && hashes[seq-1] != hash:
			problem("line %d differs from the tail checkpoint: it was edited", seq)
		}
		// Lines after the checkpoint are an append a crash interrupted
		// before the checkpoint was updated: not a problem.
	}
	c.OK = len(c.Problems) == 0
	return c, nil
}

// ErrAuditBroken is returned by `bridge audit verify` when the chain or the
// tail checkpoint does not hold.
var ErrAuditBroken = errors.New("audit log verification failed")
