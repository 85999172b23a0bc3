package agent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/syncbridge/bridge/bridge"
)

// A result the host's power cut left at its size without its bytes (zeros),
// or emptied, is a result still arriving (SPEC §5), for Result as for Wait:
// not an error that would stop `bridge status`, `bridge logs -f` or an MCP
// call. Once the host publishes its copy again, it is the answer.
func TestTornResultIsStillArriving(t *testing.T) {
	t.Parallel()
	h := newHomes(t)
	s, err := h.client.Submit(SubmitOptions{Op: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	h.publishResult(t, s, bridge.StatusDone)
	path := filepath.Join(h.folder, bridge.ResultPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtResult))
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, torn := range map[string][]byte{"zeros": make([]byte, len(whole)), "empty": nil, "a zero": {0}} {
		if err := os.WriteFile(path, torn, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := h.client.Result(s.ID); !errors.Is(err, ErrNoResult) {
			t.Errorf("%s at the result's name: %v, want no result yet", name, err)
		}
	}
	if err := os.WriteFile(path, whole, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := h.client.Result(s.ID); err != nil || out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the result published again: %v", err)
	}
}
