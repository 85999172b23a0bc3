package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/syncbridge/bridge/bridge/trust"
)

// homes is an agent and the host it trusts, sharing one folder, with no
// daemon: the agent side on its own.
type homes struct {
	folder      string
	host, agent *trust.Home
	client      *Client
}

func newHomes(t *testing.T) *homes {
	t.Helper()
	base := t.TempDir()
	h := &homes{folder: filepath.Join(base, "folder")}
	if err := os.Mkdir(h.folder, 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	if h.host, err = trust.InitHome(filepath.Join(base, "host"), "host", "laptop", h.folder); err != nil {
		t.Fatal(err)
	}
	if h.agent, err = trust.InitHome(filepath.Join(base, "agent"), "agent", "cloud-1", h.folder); err != nil {
		t.Fatal(err)
	}
	if _, err := h.host.Trust(h.agent.BundleText(), "cloud-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.agent.Trust(h.host.BundleText(), "laptop"); err != nil {
		t.Fatal(err)
	}
	if h.client, err = OpenClient(h.agent); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.client.Close() })
	return h
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
