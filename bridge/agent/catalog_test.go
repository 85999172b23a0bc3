package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// signedCatalog is a catalog as the host signs it: one op, deploy, whose
// idempotence says which catalog it is, and an op named extra when given.
func (h *homes) signedCatalog(t *testing.T, issued int64, policy string, idempotent bool, extra string) []byte {
	t.Helper()
	ops := []bridge.OpInfo{{Name: "deploy", Scope: "write", Idempotent: idempotent, Timeout: "1m0s", Args: []bridge.ArgInfo{}}}
	if extra != "" {
		ops = append(ops, bridge.OpInfo{Name: extra, Scope: "write", Timeout: "1m0s", Args: []bridge.ArgInfo{}})
	}
	data, err := bridge.SignCatalog(bridge.Catalog{Host: h.host.Config.ID, Agent: h.agent.Config.ID, Policy: policy,
		Issued: issued, Ops: ops}, h.host.Identity())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// putCatalog puts data where the host publishes the agent's catalog, as a
// sync client (or a folder writer) would.
func (h *homes) putCatalog(t *testing.T, data []byte) {
	t.Helper()
	p := filepath.Join(h.folder, filepath.FromSlash(bridge.CatalogPath(h.host.Config.ID, h.agent.Config.ID)))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A folder writer who kept a catalog the host signed before (deploy
// idempotent, and an op since removed) puts it back over the current one:
// the agent keeps the newest it has seen and says so (issue 26, item 1).
func TestCatalogRollbackKeepsTheNewest(t *testing.T) {
	h := newHomes(t)
	pol := strings.Repeat("ab", 32)
	now := time.Now().UnixMilli()
	h.stamp(t, bridge.LivenessStamp{Time: time.Now().Unix(), Accepts: []string{h.agent.Identity().SignKid()}, Policy: pol}, h.host.Identity())
	old := h.signedCatalog(t, now-60_000, pol, true, "drop-db")
	h.putCatalog(t, old)
	if cat, err := h.client.Ops(""); err != nil || len(cat.Ops) != 2 || cat.Warning != "" {
		t.Fatalf("the first catalog: %+v, %v", cat, err)
	}
	h.putCatalog(t, h.signedCatalog(t, now, pol, false, ""))
	cat, err := h.client.Ops("")
	if err != nil || len(cat.Ops) != 1 || cat.Ops[0].Idempotent || cat.Warning != "" {
		t.Fatalf("the newer catalog: %+v, %v", cat, err)
	}
	h.putCatalog(t, old) // rolled back
	for _, cl := range []*Client{h.client, h.reopen(t)} {
		cat, err = cl.Ops("")
		if err != nil {
			t.Fatal(err)
		}
		if len(cat.Ops) != 1 || cat.Ops[0].Name != "deploy" || cat.Ops[0].Idempotent {
			t.Fatalf("the rolled-back catalog is believed: %+v", cat.Ops)
		}
		if !strings.Contains(cat.Warning, "older catalog") {
			t.Fatalf("no warning of the older catalog: %q", cat.Warning)
		}
		// The removed op is not offered; a check against the catalog
		// refuses it before anything is sent.
		if checked, err := cl.CheckCall("", "drop-db", nil, bridge.CallInput{}); !checked || err == nil {
			t.Fatalf("drop-db passes the check: checked %v, %v", checked, err)
		}
	}
}

// An agent that never saw the newer catalog (a new home, or one restored)
// still learns from the host's liveness stamp, rewritten every interval,
// that the folder's catalog predates the policy the host runs: nothing is
// offered as safe to run again, and calls go unchecked for the host to
// decide.
func TestCatalogOlderThanTheStampIsNotBelieved(t *testing.T) {
	h := newHomes(t)
	issued := time.Now().Add(-time.Hour).UnixMilli()
	h.putCatalog(t, h.signedCatalog(t, issued, strings.Repeat("ab", 32), true, "drop-db"))
	h.stamp(t, bridge.LivenessStamp{Time: time.Now().Unix(), Accepts: []string{h.agent.Identity().SignKid()},
		Policy: strings.Repeat("cd", 32)}, h.host.Identity())
	cat, err := h.client.Ops("")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cat.Warning, "predates the policy") {
		t.Fatalf("no warning: %q", cat.Warning)
	}
	for _, op := range cat.Ops {
		if op.Idempotent {
			t.Fatalf("op %s offered as safe to run again on an out-of-date catalog", op.Name)
		}
	}
	if checked, _ := h.client.CheckCall("", "nosuch", nil, bridge.CallInput{}); checked {
		t.Fatal("a call is checked against a catalog the host's stamp says is out of date")
	}
	// A stamp older than that one, put back by a folder writer: the
	// newest this agent verified still counts.
	h.stamp(t, bridge.LivenessStamp{Time: time.Now().Add(-time.Minute).Unix(), Accepts: []string{h.agent.Identity().SignKid()},
		Policy: strings.Repeat("ab", 32)}, h.host.Identity())
	if cat, err = h.client.Ops(""); err != nil || !cat.Stale {
		t.Fatalf("an older stamp put back makes the old catalog current: %+v, %v", cat, err)
	}
	// Or the stamp removed.
	if err := os.Remove(filepath.Join(h.folder, filepath.FromSlash(bridge.LivenessPath(h.host.Config.ID, h.agent.Config.ID)))); err != nil {
		t.Fatal(err)
	}
	if cat, err = h.client.Ops(""); err != nil || !cat.Stale {
		t.Fatalf("the stamp removed makes the old catalog current: %+v, %v", cat, err)
	}
	// A later stamp with the catalog's policy: believed as it is.
	h.stamp(t, bridge.LivenessStamp{Time: time.Now().Add(time.Second).Unix(), Accepts: []string{h.agent.Identity().SignKid()},
		Policy: strings.Repeat("ab", 32)}, h.host.Identity())
	if cat, err = h.client.Ops(""); err != nil || cat.Warning != "" || !cat.Ops[0].Idempotent {
		t.Fatalf("a current catalog: %+v, %v", cat, err)
	}
	// A stamp older than the catalog says nothing of it (the new policy's
	// stamp is still on its way).
	h.putCatalog(t, h.signedCatalog(t, time.Now().Add(time.Minute).UnixMilli(), strings.Repeat("ef", 32), true, ""))
	if cat, err = h.client.Ops(""); err != nil || cat.Warning != "" {
		t.Fatalf("a catalog newer than the stamp: %+v, %v", cat, err)
	}
}

// A catalog from a release before catalogs were dated (v 1) still reads,
// and a dated one replaces it in the agent's keeping.
func TestCatalogOfAnEarlierReleaseReads(t *testing.T) {
	h := newHomes(t)
	h.stamp(t, bridge.LivenessStamp{Time: time.Now().Unix(), Accepts: []string{h.agent.Identity().SignKid()}, Policy: strings.Repeat("ab", 32)}, h.host.Identity())
	body := `{"v":1,"host":"` + h.host.Config.ID + `","agent":"` + h.agent.Config.ID + `","policy_sha256":"` + strings.Repeat("ab", 32) +
		`","ops":[{"name":"status","scope":"read","approve":false,"idempotent":true,"timeout":"10s","max_output":0,"max_stdin":0,"args":[]}]}`
	v1, err := signBody(h, body)
	if err != nil {
		t.Fatal(err)
	}
	h.putCatalog(t, v1)
	if cat, err := h.client.Ops(""); err != nil || cat.Issued != 0 || cat.Ops[0].Name != "status" {
		t.Fatalf("a v 1 catalog: %+v, %v", cat, err)
	}
	h.putCatalog(t, h.signedCatalog(t, time.Now().UnixMilli(), strings.Repeat("ab", 32), false, ""))
	if cat, err := h.client.Ops(""); err != nil || cat.Ops[0].Name != "deploy" {
		t.Fatalf("v 2 after v 1: %+v, %v", cat, err)
	}
	h.putCatalog(t, v1)
	if cat, err := h.client.Ops(""); err != nil || cat.Ops[0].Name != "deploy" || cat.Warning == "" {
		t.Fatalf("v 1 put back over a kept v 2 is believed: %+v, %v", cat, err)
	}
}

// reopen opens another client on the agent's home, as a new process would.
func (h *homes) reopen(t *testing.T) *Client {
	t.Helper()
	cl, err := OpenClient(h.agent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// signBody signs a catalog body as it is, as the host's key would.
func signBody(h *homes, body string) ([]byte, error) {
	return bcrypto.Sign(bcrypto.KindCatalog, []byte(body), h.host.Identity())
}

// A catalog dated ahead of this machine's clock (a host clock that was
// ahead, or a host that turned hostile) is used, with a warning, but never
// kept: it must not lock out every later catalog (the red team of 8612227).
func TestCatalogFromTheFutureIsNotKept(t *testing.T) {
	h := newHomes(t)
	pol := strings.Repeat("ab", 32)
	h.stamp(t, bridge.LivenessStamp{Time: time.Now().Unix(), Accepts: []string{h.agent.Identity().SignKid()}, Policy: pol}, h.host.Identity())
	h.putCatalog(t, h.signedCatalog(t, time.Now().Add(365*24*time.Hour).UnixMilli(), pol, true, ""))
	cat, err := h.client.Ops("")
	if err != nil || !cat.Stale || !strings.Contains(cat.Warning, "ahead of this machine's clock") {
		t.Fatalf("a catalog a year ahead: %+v, %v", cat, err)
	}
	current := h.signedCatalog(t, time.Now().UnixMilli(), pol, false, "new-op")
	h.putCatalog(t, current)
	if cat, err = h.client.Ops(""); err != nil || cat.Warning != "" || len(cat.Ops) != 2 {
		t.Fatalf("the host's later catalog after one from the future: %+v, %v", cat, err)
	}
	if checked, err := h.client.CheckCall("", "new-op", nil, bridge.CallInput{}); !checked || err != nil {
		t.Fatalf("new-op: checked %v, %v", checked, err)
	}
	// The future one put back: the kept current one is used.
	h.putCatalog(t, h.signedCatalog(t, time.Now().Add(365*24*time.Hour).UnixMilli(), pol, true, "drop-db"))
	if cat, err = h.client.Ops(""); err != nil || cat.Stale || len(cat.Ops) != 2 || cat.Ops[1].Name != "new-op" || !strings.Contains(cat.Warning, "the one this agent kept is used") {
		t.Fatalf("a future catalog over a kept one: %+v, %v", cat, err)
	}
}

// Two processes of this agent keeping catalogs at once: the kept copy is
// only ever replaced by a newer one, whatever the order.
func TestCatalogKeptOnlyByANewerOne(t *testing.T) {
	h := newHomes(t)
	pol := strings.Repeat("ab", 32)
	h.stamp(t, bridge.LivenessStamp{Time: time.Now().Unix(), Accepts: []string{h.agent.Identity().SignKid()}, Policy: pol}, h.host.Identity())
	now := time.Now().UnixMilli()
	newer, older := h.signedCatalog(t, now, pol, false, ""), h.signedCatalog(t, now-1000, pol, true, "drop-db")
	h.putCatalog(t, newer)
	if _, err := h.client.Ops(""); err != nil {
		t.Fatal(err)
	}
	// The other process read the older one before and keeps it now.
	cat, err := bridge.OpenCatalog(older, h.host.Config.ID, h.agent.Config.ID, [][]byte{h.host.Identity().SignPublic()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.keepNewestCatalog(h.host.Config.ID, older, cat, [][]byte{h.host.Identity().SignPublic()}, func(int64) bool { return false }); err != nil {
		t.Fatal(err)
	}
	h.putCatalog(t, older)
	if cat, err = h.client.Ops(""); err != nil || len(cat.Ops) != 1 || !strings.Contains(cat.Warning, "older catalog") {
		t.Fatalf("after a late keep of the older catalog: %+v, %v", cat, err)
	}
}

// A stamp of the same second as the catalog, naming another policy, makes
// it stale: stamps count whole seconds, and the policy may have changed
// within that second after the catalog was signed (the red team of
// 5da3cff).
func TestCatalogStaleByAStampOfTheSameSecond(t *testing.T) {
	h := newHomes(t)
	sec := time.Now().Unix()
	h.putCatalog(t, h.signedCatalog(t, sec*1000+200, strings.Repeat("ab", 32), true, ""))
	h.stamp(t, bridge.LivenessStamp{Time: sec, Accepts: []string{h.agent.Identity().SignKid()}, Policy: strings.Repeat("cd", 32)}, h.host.Identity())
	if cat, err := h.client.Ops(""); err != nil || !cat.Stale {
		t.Fatalf("a stamp of the same second with another policy: %+v, %v", cat, err)
	}
	// The catalog's own policy's stamp of that second, put back: the one
	// kept first stays.
	h.stamp(t, bridge.LivenessStamp{Time: sec, Accepts: []string{h.agent.Identity().SignKid()}, Policy: strings.Repeat("ab", 32)}, h.host.Identity())
	if cat, err := h.client.Ops(""); err != nil || !cat.Stale {
		t.Fatalf("a put-back stamp of the same second: %+v, %v", cat, err)
	}
}
