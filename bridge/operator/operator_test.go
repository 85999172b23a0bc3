package operator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/trust"
)

// homes makes a host home and an agent home on one folder, the agent
// trusted by the host as "cloud-1".
func homes(t *testing.T) (host, agent *trust.Home) {
	t.Helper()
	base := t.TempDir()
	folder := filepath.Join(base, "folder")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	host, err := trust.InitHome(filepath.Join(base, "host"), "host", "laptop", folder)
	if err != nil {
		t.Fatal(err)
	}
	agent, err = trust.InitHome(filepath.Join(base, "agent"), "agent", "cloud-1", folder)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.Trust(agent.BundleText(), "cloud-1"); err != nil {
		t.Fatal(err)
	}
	return host, agent
}

// An operator names a request by its id, a unique prefix of 8 digits or
// more, or AGENT/ID with the agent's local name or whole id; an id two
// agents share is resolved by the state the command wants, or refused
// naming both; a prefix of an agent's id never names it.
func TestResolveRef(t *testing.T) {
	t.Parallel()
	h, a := homes(t)
	mine, other := a.Config.ID, strings.Repeat("e", 32)
	shared := strings.Repeat("ab", 16)
	entries := []LedgerEntry{
		{Key: mine + "/" + shared, Agent: mine, ID: shared, State: ledger.StateAwaitingApproval},
		{Key: other + "/" + shared, Agent: other, ID: shared, State: ledger.StateDone},
		{Key: mine + "/" + strings.Repeat("1", 32), Agent: mine, ID: strings.Repeat("1", 32), State: ledger.StateUncertain},
	}
	for _, c := range []struct {
		ref   string
		want  ledger.State
		agent string // "" when refused
		err   string
	}{
		{"11111111", ledger.StateUncertain, mine, ""},
		{"cloud-1/11111111", ledger.StateUncertain, mine, ""},
		{mine + "/" + strings.Repeat("1", 32), ledger.StateUncertain, mine, ""},
		{shared, ledger.StateAwaitingApproval, mine, ""},                          // the one in the wanted state
		{other + "/" + shared, ledger.StateDone, other, ""},                       // an untrusted agent by its whole id
		{shared, ledger.StateUncertain, "", "names 2 requests"},                   // neither in the state: both named
		{mine[:8] + "/" + shared, ledger.StateAwaitingApproval, "", "no request"}, // a prefix of an agent's id names nothing
		{"1111111", ledger.StateUncertain, "", "not a request reference"},         // 7 digits
		{"cloud-1/" + shared, ledger.StateUncertain, "", "is awaiting-approval, not uncertain"},
		{"/11111111", ledger.StateUncertain, "", "not a request reference"},
		{"1111111g", ledger.StateUncertain, "", "not a request reference"},
	} {
		e, err := ResolveRef(h, entries, c.ref, c.want)
		switch {
		case c.agent != "" && (err != nil || e.Agent != c.agent):
			t.Errorf("%s (%s): %+v, %v; want agent %s", c.ref, c.want, e, err, c.agent)
		case c.agent == "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s (%s): %+v, %v; want an error saying %q", c.ref, c.want, e, err, c.err)
		}
		if c.err == "not a request reference" && !errors.Is(err, ErrBadRef) {
			t.Errorf("%s: %v is not ErrBadRef (a usage error)", c.ref, err)
		}
	}
	if got := RefName(AgentNames(h), entries[1]); got != other+"/"+shared {
		t.Errorf("the reference of an untrusted agent's request: %s", got)
	}
	if got := ListedOf(h, entries[0]); got.Ref != "cloud-1/"+shared || got.AgentName != "cloud-1" {
		t.Errorf("listed: %+v", got)
	}
}

// The commands of a host refuse an agent's home, with a hint; orders land
// in the control directory under names the daemon reads.
func TestOrdersAndHostOnly(t *testing.T) {
	t.Parallel()
	h, a := homes(t)
	var he *bridge.HintError
	if err := HostOnly(a, "approve"); err == nil || !errors.As(err, &he) || !strings.Contains(he.Hint, "--home") {
		t.Errorf("an agent's home: %v", err)
	}
	if _, err := Approve(a, "11111111"); err == nil || !strings.Contains(err.Error(), "a command of the host") {
		t.Errorf("approve in an agent's home: %v", err)
	}
	if err := HostOnly(h, "approve"); err != nil {
		t.Error(err)
	}
	at := time.Now().UTC().Round(0) // as it reads back
	for name, o := range map[string]Order{
		"agent-id.json": {Key: "agent/id", As: "approve"},
		// Two collections ordered before the daemon looked: both stay.
		fmt.Sprintf("gc-%019d.json", at.UnixNano()):                  {GC: true, Grace: 5, At: at},
		fmt.Sprintf("gc-%019d.json", at.Add(time.Second).UnixNano()): {GC: true, Retention: 7, At: at.Add(time.Second)},
	} {
		if err := WriteOrder(h, o); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(h.Path("control", name))
		if err != nil {
			t.Fatal(err)
		}
		var got Order
		if err := json.Unmarshal(data, &got); err != nil || fmt.Sprint(got) != fmt.Sprint(o) {
			t.Errorf("%s holds %s (%v), want %+v", name, data, err, o)
		}
	}
	// An audit line is an order of host's own format; "audit": null is
	// none (the order is what its other fields say).
	for text, want := range map[string]bool{`{"audit":{"event":"pair"}}`: true, `{"audit":null,"gc":true}`: false, `{"gc":true}`: false} {
		var o Order
		if err := json.Unmarshal([]byte(text), &o); err != nil || o.IsAudit() != want {
			t.Errorf("%s: IsAudit %v (%v), want %v", text, o.IsAudit(), err, want)
		}
	}
	if _, ok := DaemonRunning(h); ok {
		t.Error("no daemon runs, yet DaemonRunning says one does")
	}
	if err := os.WriteFile(h.Path("serve.lock"), []byte(fmt.Sprint(os.Getpid())), 0o600); err != nil {
		t.Fatal(err)
	}
	if pid, ok := DaemonRunning(h); !ok || pid != os.Getpid() {
		t.Errorf("a live pid in serve.lock: %d, %v", pid, ok)
	}
}

// What `bridge pending` shows of a waiting request's input is checked
// against the hash its approval is bound to: a missing copy, a changed one
// and an approval text with two input lines each say why not to approve.
func TestApprovalInputChecked(t *testing.T) {
	t.Parallel()
	h, a := homes(t)
	input := []byte("line one\nline two\n")
	sum := sha256.Sum256(input)
	line := fmt.Sprintf("  stdin: %d bytes, sha256 %s", len(input), hex.EncodeToString(sum[:]))
	e := Listed{LedgerEntry: LedgerEntry{Agent: a.Config.ID, ID: strings.Repeat("2", 32), State: ledger.StateAwaitingApproval, Reason: "argv: cat\n" + line}}
	if in := ReadApprovalInput(h, e); in == nil || in.Kept || !strings.Contains(in.Problem, "not in this host's home") {
		t.Errorf("no kept copy: %+v", in)
	}
	p := ApprovalInputPath(h, e.Agent, e.ID)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("line one\nline 2!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if in := ReadApprovalInput(h, e); in == nil || in.Kept || !strings.Contains(in.Problem, "not the one the approval is bound to") {
		t.Errorf("a changed copy: %+v", in)
	}
	if err := os.WriteFile(p, input, 0o600); err != nil {
		t.Fatal(err)
	}
	if in := ReadApprovalInput(h, e); in == nil || !in.Kept || !in.Text || in.Preview != string(input) || in.Problem != "" {
		t.Errorf("the kept copy: %+v", in)
	}
	twice := e
	twice.Reason += "\n" + line
	if in := ReadApprovalInput(h, twice); in == nil || in.Kept || !strings.Contains(in.Problem, "more than one input line") {
		t.Errorf("two input lines: %+v", in)
	}
	none := e
	none.Reason = "argv: true"
	if in := ReadApprovalInput(h, none); in != nil {
		t.Errorf("an op that reads no input: %+v", in)
	}
}
