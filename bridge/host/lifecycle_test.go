package host

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
)

// Every row of the lifecycle table is a step the ledger's own state machine
// allows: an entry created by the event is one Admit may create, and every
// other from → to is a ledger transition. An answer that the ledger could
// not record is therefore refused before anything is published.
func TestLifecycleTableMatchesLedger(t *testing.T) {
	t.Parallel()
	for ev, tr := range lifecycle {
		if len(tr.from) == 0 || len(tr.to) == 0 {
			t.Errorf("%s: empty row", ev)
		}
		if ev == evAdopt {
			// Whatever was sealed is recorded where the ledger can go, and
			// as uncertain (the ledger is behind) where it cannot.
			for _, from := range tr.from {
				if from == stateNone {
					// Created in the sealed result's state where Admit
					// can, else uncertain (record-lost, then catch-up).
					if !ledger.CanAdmit(ledger.StateUncertain) {
						t.Error("adopt: Admit refuses uncertain for a new entry whose sealed result it cannot create")
					}
					continue
				}
				if !ledger.CanTransition(from, ledger.StateUncertain) {
					t.Errorf("adopt: no way from %s to uncertain for a sealed result the ledger cannot reach", from)
				}
			}
			continue
		}
		for _, from := range tr.from {
			for _, to := range tr.to {
				switch {
				case from == stateNone && !ledger.CanAdmit(to):
					t.Errorf("%s: creates an entry in %s, which Admit refuses", ev, to)
				case from != stateNone && !ledger.CanTransition(from, to):
					t.Errorf("%s: %s → %s, which the ledger refuses", ev, from, to)
				}
			}
		}
		// An op that started ends done, failed (its process never
		// started), cancelled or uncertain: never rejected or expired.
		if slices.Contains(tr.from, ledger.StateRunning) {
			for _, to := range tr.to {
				if to == ledger.StateRejected || to == ledger.StateExpired {
					t.Errorf("%s: an op that started may end %s", ev, to)
				}
			}
		}
		// Only an answer may enter a state that is answered.
		if !tr.answer {
			for _, to := range tr.to {
				if to.Answered() {
					t.Errorf("%s enters %s without an answer", ev, to)
				}
			}
		}
	}
}

// DESIGN.md §6 holds the same table as the code: one row per event, with
// the same states, and a test named for each row.
func TestDesignLifecycleTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[event]bool{}
	for _, row := range testkit.LifecycleRows(doc) {
		ev := event(row[0])
		tr, ok := lifecycle[ev]
		if !ok {
			t.Errorf("DESIGN.md has a lifecycle row %q that the code does not", ev)
			continue
		}
		rows[ev] = true
		if got, want := states(row[1]), names(tr.from); !slices.Equal(got, want) {
			t.Errorf("DESIGN.md row %s: from %v, the code says %v", ev, got, want)
		}
		if ev == evAdopt {
			if !strings.Contains(row[2], "sealed") {
				t.Errorf("DESIGN.md row adopt: to %q, want the sealed result's state", row[2])
			}
		} else if got, want := states(row[2]), names(tr.to); !slices.Equal(got, want) {
			t.Errorf("DESIGN.md row %s: to %v, the code says %v", ev, got, want)
		}
		if !strings.Contains(row[4], "`Test") && !strings.Contains(row[4], "`cmd/bridge/testdata/") {
			t.Errorf("DESIGN.md row %s names no test", ev)
		}
	}
	for ev := range lifecycle {
		if !rows[ev] {
			t.Errorf("event %s has no row in DESIGN.md §6", ev)
		}
	}
}

// states reads a table cell like "seen, pending" or "—" (no entry).
func states(cell string) []string {
	var out []string
	for _, s := range strings.Split(cell, ",") {
		s = strings.Trim(strings.TrimSpace(s), "`")
		if s == "—" {
			s = ""
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func names(ss []ledger.State) []string {
	var out []string
	for _, s := range ss {
		out = append(out, string(s))
	}
	slices.Sort(out)
	return out
}

// evaluate's steps check what SPEC §8 lists: every item of it is named by a
// step, no step names an item it does not have, and the steps are in §8's
// order but for those that say why not.
func TestEvaluationStepsFollowSpec(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/SPEC.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "\n## 8. ")
	end := strings.Index(text[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("SPEC.md has no §8")
	}
	items := regexp.MustCompile(`(?m)^(\d+)\. `).FindAllStringSubmatch(text[start:start+1+end], -1)
	if len(items) == 0 {
		t.Fatal("SPEC §8 lists no checks")
	}
	named := map[string]bool{}
	last := 0
	for i, st := range evaluationSteps {
		for _, n := range strings.Split(st.spec, ", ") {
			named[n] = true
			k, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("step %d names %q, not an item of §8", i, n)
			}
			if st.outOfOrder == "" {
				if k < last {
					t.Errorf("step %d checks §8.%d after §8.%d, and does not say why", i, k, last)
				}
				last = k
			}
		}
	}
	have := map[string]bool{}
	for _, m := range items {
		have[m[1]] = true
		if !named[m[1]] {
			t.Errorf("SPEC §8.%s is checked by no step of evaluate", m[1])
		}
	}
	for n := range named {
		if !have[n] {
			t.Errorf("a step of evaluate names SPEC §8.%s, which SPEC §8 does not have", n)
		}
	}
}
