package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// A format this side does not read names the side that is behind and the
// fix (docs/OPERATIONS.md, "Upgrading"): a host's catalog and liveness
// stamp of a later version, read by this agent, say "it runs a newer
// bridge; upgrade this agent". (A request of a later version is answered
// rejected unknown-version: TestHostileBattery's call/v2; the CLI's hint
// for it is TestHintForUnknownVersion.)
func TestANewerHostFormatNamesTheAgentAsBehind(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	hostID, agentID := p.host.Config.ID, p.agent.Config.ID
	catPath := filepath.Join(p.folder, filepath.FromSlash(bridge.CatalogPath(hostID, agentID)))
	stampPath := filepath.Join(p.folder, filepath.FromSlash(bridge.LivenessPath(hostID, agentID)))
	testkit.WaitFor(t, 10*time.Second, "the catalog and the stamp", func() bool {
		_, e1 := os.Stat(catPath)
		_, e2 := os.Stat(stampPath)
		return e1 == nil && e2 == nil
	})
	p.stop(t)
	key := [][]byte{p.host.Identity().SignPublic()}
	data, err := os.ReadFile(catPath)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := bridge.OpenCatalog(data, hostID, agentID, key)
	if err != nil {
		t.Fatal(err)
	}
	cat.V = bridge.CatalogVersion + 1
	body, err := bcrypto.EncodeBody(cat)
	if err != nil {
		t.Fatal(err)
	}
	later, err := bcrypto.Sign(bcrypto.KindCatalog, body, p.host.Identity())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(catPath, later, 0o644); err != nil {
		t.Fatal(err)
	}
	// A fresh home (none kept): the folder's catalog is all there is.
	cl := p.freshAgentClient(t)
	_, err = cl.Ops("")
	var he *bridge.HintError
	if !errors.Is(err, bcrypto.ErrUnknownVersion) || !errors.As(err, &he) || !strings.Contains(he.Hint, `host "laptop" writes a format this agent does not read: it runs a newer bridge; upgrade this agent`) {
		t.Fatalf("a catalog of a later version: %v", err)
	}

	sdata, err := os.ReadFile(stampPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := bridge.OpenLiveness(sdata, hostID, agentID, key)
	if err != nil {
		t.Fatal(err)
	}
	st.V = 2
	body, err = bcrypto.EncodeBody(st)
	if err != nil {
		t.Fatal(err)
	}
	later, err = bcrypto.Sign(bcrypto.KindLiveness, body, p.host.Identity())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stampPath, later, 0o644); err != nil {
		t.Fatal(err)
	}
	lv, err := cl.HostLiveness("")
	if err != nil || lv.Verdict != agent.LivenessNoStamp || !strings.Contains(lv.Message, "(unknown-version)") || !strings.Contains(lv.Message, "runs a newer bridge than this agent, which does not read its stamps: upgrade this agent") {
		t.Fatalf("a stamp of a later version: %+v, %v", lv, err)
	}
}

// freshAgentClient is a client of a new home of the pair's agent, rebuilt
// from its secret: nothing kept of what the pair's own client has seen.
func (p *pair) freshAgentClient(t *testing.T) *agent.Client {
	t.Helper()
	secret, err := p.agent.ExportAgentSecret()
	if err != nil {
		t.Fatal(err)
	}
	home, err := trust.RestoreAgentHome(filepath.Join(t.TempDir(), "fresh"), p.folder, secret)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := agent.OpenClient(home)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}
