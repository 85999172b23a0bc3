package host

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/syncbridge/bridge/bridge/trust"
	"github.com/syncbridge/bridge/syncsafe"
)

// writeAudit logs n events to a fresh audit log in a home of its own.
func writeAudit(t *testing.T, n int) *trust.Home {
	t.Helper()
	h := &trust.Home{Dir: t.TempDir(), Config: trust.Config{Role: "host"}}
	a, err := openAudit(h.Path(auditName))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		a.log(AuditEvent{Event: "seen", Agent: "a", ID: strings.Repeat("0", 31) + string(rune('0'+i%10))})
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	return h
}

func verifyAudit(t *testing.T, h *trust.Home) *AuditCheck {
	t.Helper()
	c, err := VerifyAudit(h)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func auditLines(t *testing.T, h *trust.Home) [][]byte {
	data, err := os.ReadFile(h.Path(auditName))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
}

func TestAuditChainVerifies(t *testing.T) {
	t.Parallel()
	h := writeAudit(t, 5)
	// Reopening continues the chain.
	a, err := openAudit(h.Path(auditName))
	if err != nil {
		t.Fatal(err)
	}
	a.log(AuditEvent{Event: "start"})
	a.close()
	if c := verifyAudit(t, h); !c.OK || c.Lines != 6 {
		t.Fatalf("intact log: %+v", c)
	}
	evs, err := ReadAudit(h, 2)
	if err != nil || len(evs) != 2 || evs[1].Seq != 6 || evs[1].Event != "start" {
		t.Fatalf("ReadAudit last 2: %+v %v", evs, err)
	}
}

func TestAuditVerifyDetectsTampering(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		tamper func(lines [][]byte) []byte
		want   string
	}{
		{"edit a middle line", func(l [][]byte) []byte {
			l[2] = bytes.Replace(l[2], []byte(`"agent":"a"`), []byte(`"agent":"b"`), 1)
			return bytes.Join(l, nil)
		}, "line 4: prev does not match"},
		{"edit the last line", func(l [][]byte) []byte {
			l[4] = bytes.Replace(l[4], []byte(`"seen"`), []byte(`"SEEN"`), 1)
			return bytes.Join(l, nil)
		}, "line 5 differs from the tail checkpoint"},
		{"remove a middle line", func(l [][]byte) []byte {
			return bytes.Join(append(l[:1:1], l[2:]...), nil)
		}, "line 2: seq 3, want 2"},
		{"cut the tail", func(l [][]byte) []byte { return bytes.Join(l[:3], nil) }, "its tail was cut"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := writeAudit(t, 5)
			if err := os.WriteFile(h.Path(auditName), c.tamper(auditLines(t, h)), 0o600); err != nil {
				t.Fatal(err)
			}
			got := verifyAudit(t, h)
			if got.OK || !strings.Contains(strings.Join(got.Problems, "\n"), c.want) {
				t.Fatalf("verify = %+v, want a problem %q", got, c.want)
			}
		})
	}
}

// A crash between the append and the checkpoint leaves one line more than
// the checkpoint names; a torn last line is dropped when the log reopens.
func TestAuditCrashLeftovers(t *testing.T) {
	t.Parallel()
	h := writeAudit(t, 3)
	tail, _ := os.ReadFile(h.Path(auditTailName))
	a, _ := openAudit(h.Path(auditName))
	a.log(AuditEvent{Event: "x"})
	a.close()
	os.WriteFile(h.Path(auditTailName), tail, 0o600) // checkpoint one behind
	if c := verifyAudit(t, h); !c.OK {
		t.Fatalf("a line past the checkpoint: %+v", c)
	}
	f, _ := os.OpenFile(h.Path(auditName), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":5,"prev":"ab`)
	f.Close()
	if c := verifyAudit(t, h); c.OK {
		t.Fatal("a torn last line passed verification")
	}
	a, err := openAudit(h.Path(auditName))
	if err != nil {
		t.Fatal(err)
	}
	a.log(AuditEvent{Event: "start"})
	a.close()
	if c := verifyAudit(t, h); !c.OK || c.Lines != 5 {
		t.Fatalf("after reopening a torn log: %+v", c)
	}
}

// Reopening reads the log from its end: lines longer than its first read
// window, and a torn line longer than that, still resume the chain where it
// ends; a log that is all torn line starts over.
func TestAuditResumeLongLines(t *testing.T) {
	t.Parallel()
	h := &trust.Home{Dir: t.TempDir(), Config: trust.Config{Role: "host"}}
	a, err := openAudit(h.Path(auditName))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		a.log(AuditEvent{Event: "refused", Detail: strings.Repeat(string(rune('a'+i)), 100<<10)})
	}
	a.close()
	f, _ := os.OpenFile(h.Path(auditName), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":4,"prev":"` + strings.Repeat("x", 150<<10))
	f.Close()
	if a, err = openAudit(h.Path(auditName)); err != nil {
		t.Fatal(err)
	}
	a.log(AuditEvent{Event: "start"})
	a.close()
	if c := verifyAudit(t, h); !c.OK || c.Lines != 4 {
		t.Fatalf("after reopening a log of long lines with a long torn one: %+v", c)
	}

	h = &trust.Home{Dir: t.TempDir(), Config: trust.Config{Role: "host"}}
	if err := os.WriteFile(h.Path(auditName), []byte(strings.Repeat("y", 200<<10)), 0o600); err != nil {
		t.Fatal(err)
	}
	if a, err = openAudit(h.Path(auditName)); err != nil {
		t.Fatal(err)
	}
	a.log(AuditEvent{Event: "start"})
	a.close()
	if c := verifyAudit(t, h); !c.OK || c.Lines != 1 {
		t.Fatalf("after reopening a log that is one torn line: %+v", c)
	}
}

// An operator's action is appended under serve.lock when no daemon runs;
// while the lock is held (a daemon, or one stopping) it is left as an order,
// and the next holder of the lock logs it first: the lines keep the order
// of the actions and the chain verifies.
func TestAuditActionOrders(t *testing.T) {
	t.Parallel()
	h := &trust.Home{Dir: t.TempDir(), Config: trust.Config{Role: "host"}}
	if q, err := AuditAction(h, AuditEvent{Event: "trust", Detail: "one"}); err != nil || q {
		t.Fatalf("unlocked: queued %v, %v", q, err)
	}
	lock, err := syncsafe.Lock(h.Path("serve.lock"))
	if err != nil {
		t.Fatal(err)
	}
	if q, err := AuditAction(h, AuditEvent{Event: "revoke", Detail: "two"}); err != nil || !q {
		t.Fatalf("locked: queued %v, %v", q, err)
	}
	evs, _ := ReadAudit(h, 0)
	if len(evs) != 1 {
		t.Fatalf("a held lock let the command write: %d lines", len(evs))
	}
	lock.Unlock()
	if q, err := AuditAction(h, AuditEvent{Event: "remove", Detail: "three"}); err != nil || q {
		t.Fatalf("unlocked again: queued %v, %v", q, err)
	}
	evs, _ = ReadAudit(h, 0)
	var got []string
	for _, e := range evs {
		got = append(got, e.Event+" "+e.Detail)
	}
	if want := []string{"trust one", "revoke two", "remove three"}; !slices.Equal(got, want) {
		t.Errorf("lines %q, want %q", got, want)
	}
	if c, err := VerifyAudit(h); err != nil || !c.OK {
		t.Errorf("verify: %+v %v", c, err)
	}
	if left, _ := filepath.Glob(h.Path("control", "audit-*")); len(left) != 0 {
		t.Errorf("orders left: %v", left)
	}
	agent := &trust.Home{Dir: t.TempDir(), Config: trust.Config{Role: "agent"}}
	if q, err := AuditAction(agent, AuditEvent{Event: "trust"}); err != nil || q {
		t.Errorf("agent home: %v %v", q, err)
	}
	if _, err := os.Stat(agent.Path(auditName)); err == nil {
		t.Error("an agent home got an audit log")
	}
}

// A file in the control directory cannot write a line that looks like the
// daemon's: only the CLI's trust actions pass, stripped of a request, an
// op, a status and an exit code; a FIFO there is skipped, never waited on.
func TestAuditOrdersCannotForgeTheDaemon(t *testing.T) {
	t.Parallel()
	h := &trust.Home{Dir: t.TempDir(), Config: trust.Config{Role: "host"}}
	if err := os.MkdirAll(h.Path("control"), 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(h.Path("control", name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("audit-1.json", `{"audit":{"time":"2020-01-01T00:00:00Z","event":"approved","agent":"a","id":"FAKE","op":"rm-rf","status":"done","exit":0}}`)
	write("audit-2.json", `{"audit":{"time":"2020-01-01T00:00:00Z","event":"trust","agent":"a","id":"FAKE","op":"rm-rf","status":"done","exit":0,"detail":"x"}}`)
	if err := syscall.Mkfifo(h.Path("control", "audit-3.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := AuditAction(h, AuditEvent{Event: "revoke", Detail: "mine"}); err != nil {
		t.Fatal(err)
	}
	evs, _ := ReadAudit(h, 0)
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s id=%q op=%q status=%q exit=%v %s", e.Event, e.ID, e.Op, e.Status, e.Exit, e.Detail))
	}
	if want := []string{`trust id="" op="" status="" exit=<nil> x`, `revoke id="" op="" status="" exit=<nil> mine`}; !slices.Equal(got, want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
}
