package operator

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/syncbridge/bridge/bridge/trust"
)

// The input of a request that waits for approval (issue 26, item 2): a
// human approves what they were shown, and for an op that reads standard
// input that is the input too. The daemon keeps a private copy of it in
// the home (approvals/AGENT/ID.stdin, 0600) while the request waits, so
// that `bridge pending` can show its first lines and `bridge pending
// --stdin REF` all of it, each checked against the SHA-256 the approval is
// bound to. The copy goes when the request stops waiting; the collection
// removes any a crash left.

// ApprovalsDir holds the kept inputs, in the host's home.
const ApprovalsDir = "approvals"

// ApprovalInputPath is where the input of agent's request id is kept.
func ApprovalInputPath(h *trust.Home, agent, id string) string {
	return h.Path(ApprovalsDir, agent, id+".stdin")
}

// ApprovalInput is what `bridge pending` shows of a waiting request's
// input.
type ApprovalInput struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Kept: the host holds the input, checked against SHA256 (`bridge
	// pending --stdin REF` prints it); false: only its size and hash are
	// known here (Problem says why).
	Kept bool `json:"kept"`
	// Text: the input is UTF-8 text without NUL; Preview is then its
	// first lines (at most previewLines and previewBytes), Cut whether
	// there is more.
	Text    bool   `json:"text"`
	Preview string `json:"preview,omitempty"`
	Cut     bool   `json:"cut,omitempty"`
	Problem string `json:"problem,omitempty"`
}

// The preview's bounds.
const (
	previewLines = 12
	previewBytes = 1024
)

// inputLine is the approval text's line for the input (policy.Invocation's
// Stdin).
var inputLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)^\s*stdin:\s+(\d+) bytes, sha256 ([0-9a-f]{64})$`)
})

// ReadApprovalInput reads what a pending request's approval says of its input
// and the kept copy; nil when the request takes none.
func ReadApprovalInput(h *trust.Home, e Listed) *ApprovalInput {
	in, f := OpenApprovalInput(h, e)
	if f != nil {
		f.Close()
	}
	return in
}

// OpenApprovalInput is ReadApprovalInput, and the kept copy, open at its start,
// when it is the input the approval is bound to (nil otherwise): what was
// checked is what is read.
func OpenApprovalInput(h *trust.Home, e Listed) (*ApprovalInput, *os.File) {
	all := inputLine().FindAllStringSubmatch(e.Reason, -1)
	if all == nil {
		return nil, nil
	}
	m := all[0]
	in := &ApprovalInput{SHA256: m[2]}
	fmt.Sscan(m[1], &in.Bytes)
	if len(all) > 1 {
		// The host writes one; a value shown (quoted, SHA-256 aside) can
		// no longer forge another, and none is guessed at.
		in.Problem = "the approval text holds more than one input line: do not approve on it"
		return in, nil
	}
	f, err := os.Open(ApprovalInputPath(h, e.Agent, e.ID))
	if err != nil {
		in.Problem = "the copy of its input is not in this host's home (removed, or the daemon could not keep it, or a release before it did): do not approve on it unseen"
		return in, nil
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	hash := sha256.New()
	head := make([]byte, previewBytes+1)
	n, _ := io.ReadFull(f, head)
	hash.Write(head[:n])
	total, err := io.Copy(hash, f)
	total += int64(n)
	if err != nil || total != in.Bytes || hex.EncodeToString(hash.Sum(nil)) != in.SHA256 {
		in.Problem = "the kept input is not the one the approval is bound to (changed or damaged in the home): do not approve on it"
		return in, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		in.Problem = "the kept input cannot be read: " + err.Error()
		return in, nil
	}
	ok, in.Kept = true, true
	cut := total > previewBytes
	head = head[:min(n, previewBytes)]
	if !textLike(head, cut) {
		return in, f
	}
	in.Text, in.Cut = true, cut
	lines := strings.SplitAfter(strings.ToValidUTF8(string(head), ""), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > previewLines {
		lines, in.Cut = lines[:previewLines], true
	}
	in.Preview = strings.Join(lines, "")
	return in, f
}

// textLike reports whether b, the start of an input (cut: it goes on),
// reads as text: no NUL, and valid UTF-8 but for a rune the bound cut.
func textLike(b []byte, cut bool) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return false
	}
	for i := 0; cut && i < 3 && len(b) > 0 && !utf8.Valid(b); i++ {
		b = b[:len(b)-1]
	}
	return utf8.Valid(b)
}
