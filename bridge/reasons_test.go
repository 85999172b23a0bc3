package bridge

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// SPEC §12 and the code name the same reasons: its list of file codes is
// what Reason gives a refused file (and the receipt reasons that are file
// codes too), and its table's reasons are ReceiptReasons. A reason added
// on either side alone fails here (issue 28: past-expiry was written by
// the host and in no table).
func TestReasonsAreSpecTwelve(t *testing.T) {
	spec, err := os.ReadFile("../docs/SPEC.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(spec), "\n## 12. Reason codes\n")
	if !ok {
		t.Fatal("SPEC.md has no §12")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	list, table, ok := strings.Cut(sec, "| reason | status | meaning |")
	if !ok {
		t.Fatal("§12 has no table")
	}
	list, _, _ = strings.Cut(list, "A receipt's")
	code := regexp.MustCompile("`([a-z-]+)`")
	var files []string
	for _, m := range code.FindAllStringSubmatch(list, -1) {
		files = append(files, m[1])
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|")
	var receipts []ReasonCode
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		if !slices.Contains(receipts, ReasonCode(m[1])) {
			receipts = append(receipts, ReasonCode(m[1]))
		}
	}
	// Reason's table also maps two receipt reasons (not-allowed, revoked,
	// key-expired come from errors as well); the file list is the rest.
	var fromErrors []string
	for _, c := range FileReasons() {
		if !slices.Contains(ReceiptReasons, c) {
			fromErrors = append(fromErrors, string(c))
		}
	}
	slices.Sort(files)
	slices.Sort(fromErrors)
	if !slices.Equal(files, fromErrors) {
		t.Errorf("SPEC §12's file codes %v, Reason gives %v", files, fromErrors)
	}
	if !slices.Equal(receipts, ReceiptReasons) {
		t.Errorf("SPEC §12's table %v, ReceiptReasons %v", receipts, ReceiptReasons)
	}
}

// Every way a request can end other than a plain success has a next step
// in the one hint table the command line and the MCP server share: each
// (status, reason) of SPEC §12's table, said in either's words.
func TestNextStepForEveryReason(t *testing.T) {
	spec, err := os.ReadFile("../docs/SPEC.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(spec), "\n## 12. Reason codes\n")
	sec, _, _ = strings.Cut(sec, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| ([^|]+) \\|")
	status := regexp.MustCompile("`([a-z]+)`")
	words := HintWords{Ops: "OPS", Again: "AGAIN", Retry: "RETRY", Settle: "SETTLE"}
	n := 0
	for _, m := range row.FindAllStringSubmatch(sec, -1) {
		for _, st := range status.FindAllStringSubmatch(m[2], -1) {
			rc := &Receipt{Status: st[1], Reason: ReasonCode(m[1])}
			h := NextStep(rc, words)
			n++
			switch {
			case st[1] == StatusDone:
				// The op ran (a time-out, a reconcile that found the effect):
				// its exit code is the answer, nothing more to do.
			case h == "":
				t.Errorf("%s (%s): no next step", st[1], m[1])
			case strings.Contains(h, "{"):
				t.Errorf("%s (%s): words left unfilled: %q", st[1], m[1], h)
			}
		}
	}
	if n < len(ReceiptReasons) {
		t.Fatalf("read %d (status, reason) pairs of §12, fewer than its reasons", n)
	}
	if h := NextStep(&Receipt{Status: StatusUncertain, Reason: ReasonCrashed}, words); !strings.HasPrefix(h, "do not retry") || !strings.HasSuffix(h, "SETTLE") {
		t.Errorf("uncertain: %q", h)
	}
}

// The notices the host posts are SPEC §10b's list, in its order: the host
// writes them and the agent reads them by these constants only.
func TestNoteEventsAreSpecTenB(t *testing.T) {
	spec, err := os.ReadFile("../docs/SPEC.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(spec), "\n## 10b. ")
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, list, ok := strings.Cut(sec, "Notices the host daemon posts by itself:")
	list, _, ok2 := strings.Cut(list, "The agent verifies")
	if !ok || !ok2 {
		t.Fatal("SPEC §10b no longer lists the notices where this test looks")
	}
	var spec10b []NoteEvent
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(list, -1) {
		if e := NoteEvent(m[1]); !slices.Contains(spec10b, e) && m[1] != "request" && m[1] != "supersedes" && m[1] != "created" {
			spec10b = append(spec10b, e)
		}
	}
	if !slices.Equal(spec10b, NoteEvents) {
		t.Errorf("SPEC §10b's notices %v, NoteEvents %v", spec10b, NoteEvents)
	}
}
