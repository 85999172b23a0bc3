package mcp

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/syncbridge/bridge/bridge"
)

// A tool result carries at most maxToolOutput of each stream, whatever the
// host sent: the first and last halves, and how much was left out between
// (issue 26's note: the MCP server held an op's whole output in memory).
func TestHeadTailBoundsAnOutput(t *testing.T) {
	for _, c := range []struct{ n, chunk int }{{0, 1}, {10, 3}, {64, 7}, {65, 64}, {1000, 1}, {1000, 33}, {1000, 1000}, {100_000, 4096}} {
		var want bytes.Buffer
		for i := 0; want.Len() < c.n; i++ {
			fmt.Fprintf(&want, "%d,", i)
		}
		data := want.Bytes()[:c.n]
		h := &headTail{most: 64}
		for p := data; len(p) > 0; {
			k := min(c.chunk, len(p))
			h.Write(p[:k])
			p = p[k:]
		}
		if cap(h.tail) > 4*64+c.chunk {
			t.Errorf("n=%d chunk=%d: the tail's array grew to %d", c.n, c.chunk, cap(h.tail))
		}
		got := h.String()
		if c.n <= 64 {
			if got != string(data) || h.left() != 0 {
				t.Errorf("n=%d chunk=%d: %q, left %d", c.n, c.chunk, got, h.left())
			}
			continue
		}
		wantText := fmt.Sprintf("%s\n[… %d bytes left out …]\n%s", data[:32], c.n-64, data[c.n-32:])
		if got != wantText || h.left() != int64(c.n-64) || !strings.HasPrefix(got, string(data[:32])) {
			t.Errorf("n=%d chunk=%d:\n got %q\nwant %q", c.n, c.chunk, got, wantText)
		}
	}
}

// The MCP hint for a request the host cannot read names the host as the
// side behind, as the CLI's does (TestHintForUnknownVersion).
func TestHintForUnknownVersion(t *testing.T) {
	rc := &bridge.Receipt{Status: bridge.StatusRejected, Reason: "unknown-version"}
	if h := hintFor(rc); !strings.Contains(h, "it runs an older bridge than this agent") {
		t.Fatalf("hint: %q", h)
	}
}

// A progress notification carries only the new chunk, at most
// maxProgressMessage of it, and says when it is cut (never inside a
// character) and what the host left out.
func TestProgressMessageIsBounded(t *testing.T) {
	if m := progressMessage([]byte("step 1\n"), nil, 0); m != "step 1\n" {
		t.Errorf("a small chunk: %q", m)
	}
	big := bytes.Repeat([]byte("é"), maxProgressMessage) // 2 bytes each
	m := progressMessage(big, []byte("err\n"), 3)
	head, note, ok := strings.Cut(m, "\n[")
	if !ok || len(head) > maxProgressMessage || !utf8.ValidString(head) ||
		!strings.Contains(note, fmt.Sprintf("%d more bytes of this chunk are not in this notification", 2*maxProgressMessage+4-len(head))) ||
		!strings.HasSuffix(m, "[3 bytes of output were not streamed; the result has them]") {
		t.Fatalf("a big chunk: %d bytes, ends %q", len(m), m[len(m)-200:])
	}
}
