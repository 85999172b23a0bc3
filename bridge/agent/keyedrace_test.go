package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// Two processes of an agent submit the same keyed request at once (an agent
// retrying a call whose first attempt is still on its way): one request is
// sent, whole. Before, the second one's removal of a stale payload could
// land between the first one's payload and its manifest: the manifest then
// pinned a payload that was no longer there, and the request waited on a
// hash mismatch until the host rejected it as incomplete.
func TestConcurrentKeyedSubmitsSendOneWholeRequest(t *testing.T) {
	for i := range 40 {
		h := newHomes(t)
		other, err := OpenClient(h.agent)
		if err != nil {
			t.Fatal(err)
		}
		o := SubmitOptions{Op: "echo", Key: fmt.Sprint("k", i)}
		type sent struct {
			s   *Sent
			err error
		}
		got := make(chan sent, 2)
		for _, c := range []*Client{h.client, other} {
			go func() { s, err := c.Submit(o); got <- sent{s, err} }()
		}
		var id string
		for range 2 {
			r := <-got
			if r.err != nil {
				t.Fatalf("round %d: a keyed submit beside another: %v", i, r.err)
			}
			if id != "" && r.s.ID != id {
				t.Fatalf("round %d: two ids for one key: %s and %s", i, id, r.s.ID)
			}
			id = r.s.ID
		}
		other.Close()
		dir := filepath.Join(h.folder, filepath.FromSlash(bridge.ToHostDir(h.host.Config.ID, h.agent.Config.ID)))
		m, err := os.ReadFile(filepath.Join(dir, id+"."+bridge.ExtManifest))
		if err != nil {
			t.Fatal(err)
		}
		pl, err := os.ReadFile(filepath.Join(dir, id+"."+bridge.ExtPayload))
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		var r bridge.Request
		if err := bridge.OpenBody(bcrypto.KindRequest, m, [][]byte{h.agent.Identity().SignPublic()}, &r); err != nil {
			t.Fatal(err)
		}
		if r.Payload.SHA256 != bridge.SHA256Hex(pl) || r.Payload.Len != int64(len(pl)) {
			t.Fatalf("round %d: the manifest pins a payload that is not the one in the folder", i)
		}
	}
}
