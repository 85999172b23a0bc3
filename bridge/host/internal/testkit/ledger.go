package testkit

import (
	"errors"
	"io/fs"
	"os"
	"regexp"
	"testing"

	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/trust"
)

// LedgerFiles are the files of a host's ledger directory that a backup
// holds.
var LedgerFiles = []string{"ledger.db", "ledger.archive"}

// FinishedCache is the name of the daemon's cache of finished requests in
// its home (host's finishedName, which a host test holds it to): a SIGKILL
// can leave it behind the ledger.
const FinishedCache = "finished"

// BackupLedger copies the ledger's files (the daemon stopped).
func BackupLedger(t testing.TB, h *trust.Home) map[string][]byte {
	t.Helper()
	b := map[string][]byte{}
	for _, name := range LedgerFiles {
		data, err := os.ReadFile(h.Path("ledger", name))
		if err == nil {
			b[name] = data
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	if b["ledger.db"] == nil {
		t.Fatal("no ledger to back up")
	}
	return b
}

// RestoreLedger puts a backup of the ledger's files back: a file the
// backup lacks is removed, and so is the record of checked bytes.
func RestoreLedger(t testing.TB, h *trust.Home, b map[string][]byte) {
	t.Helper()
	for _, name := range LedgerFiles {
		p := h.Path("ledger", name)
		if data, ok := b[name]; ok {
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	os.Remove(h.Path("ledger", "ledger.db.checked"))
}

// Entry is request id's ledger entry as `bridge ledger` reads it beside a
// running daemon (its zero value if there is none).
func Entry(t testing.TB, h *trust.Home, id string) ledger.Entry {
	t.Helper()
	entries, err := operator.LedgerEntries(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.ID == id {
			return e
		}
	}
	return ledger.Entry{}
}

// LifecycleRows are the rows of DESIGN.md §6's lifecycle table in doc:
// the event, from, to, what the agent is told, and the tests that cover it.
func LifecycleRows(doc []byte) [][]string {
	var rows [][]string
	for _, m := range lifecycleRow.FindAllStringSubmatch(string(doc), -1) {
		rows = append(rows, m[1:])
	}
	return rows
}

var lifecycleRow = regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| ([^|]+) \\| ([^|]+) \\| ([^|]+) \\| (.+) \\|$")
