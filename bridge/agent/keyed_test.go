package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// publicKeyedID is the keyed id as SPEC §7.2 defined it before the agent's
// idempotency secret: a SHA-256 of values a folder writer can read or guess.
func publicKeyedID(agent, host, op string, args map[string]string, key string) string {
	h := sha256.New()
	h.Write([]byte("bridge/v1/idempotency\x00"))
	field := func(s string) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(agent)
	field(host)
	field(op)
	for _, k := range slices.Sorted(maps.Keys(args)) {
		field(k)
		field(args[k])
	}
	field(key)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// publishCatalog puts the host's signed catalog for the agent in the folder,
// as the daemon does: deploy with an enum argument, and status.
func (h *homes) publishCatalog(t *testing.T) {
	t.Helper()
	var cat bridge.Catalog
	err := json.Unmarshal([]byte(`{"ops":[
		{"name":"deploy","scope":"write","timeout":"10m","args":[{"name":"env","type":"enum","required":true,"values":["staging","production"]}]},
		{"name":"status","scope":"read","timeout":"10s","args":[]}]}`), &cat)
	if err != nil {
		t.Fatal(err)
	}
	cat.Host, cat.Agent, cat.Policy, cat.Issued = h.host.Config.ID, h.agent.Config.ID, strings.Repeat("ab", 32), time.Now().UnixMilli()
	signed, err := bridge.SignCatalog(cat, h.host.Identity())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(h.folder, bridge.CatalogPath(h.host.Config.ID, h.agent.Config.ID))
	if err := os.WriteFile(p, signed, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A folder writer without keys sees the request's id, the party ids (the
// directory names) and the catalog. From those alone it must not recover the
// op and arguments of a keyed request (DESIGN §2, the provider as an
// observer). Here it tries what the old public formula made easy: every op
// of the catalog with every enum value, under the keys docs/CLI.md suggests
// ("deploy-42"), 30,000 guesses.
func TestKeyedIDNotFromPublicValues(t *testing.T) {
	h := newHomes(t)
	h.publishCatalog(t)
	if _, err := h.client.Submit(SubmitOptions{Op: "deploy", Args: map[string]string{"env": "production"}, Key: "deploy-42"}); err != nil {
		t.Fatal(err)
	}

	// The attacker's view: plain reads of the folder.
	hostID, agentID := h.host.Config.ID, h.agent.Config.ID
	entries, err := os.ReadDir(filepath.Join(h.folder, bridge.ToHostDir(hostID, agentID)))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), "."+bridge.ExtManifest); ok {
			ids = append(ids, id)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("%d manifests in the folder, want 1", len(ids))
	}
	data, err := os.ReadFile(filepath.Join(h.folder, bridge.CatalogPath(hostID, agentID)))
	if err != nil {
		t.Fatal(err)
	}
	env, err := bcrypto.Parse(bcrypto.KindCatalog, data) // no key needed to read it
	if err != nil {
		t.Fatal(err)
	}
	var cat bridge.Catalog
	if err := json.Unmarshal(env.Body(), &cat); err != nil {
		t.Fatal(err)
	}

	guesses, tried := 0, false
	for _, op := range cat.Ops {
		// Every combination of enum values (the catalog's ops here have
		// enum arguments or none).
		combos := []map[string]string{{}}
		for _, a := range op.Args {
			var next []map[string]string
			for _, c := range combos {
				for _, v := range a.Values {
					m := maps.Clone(c)
					m[a.Name] = v
					next = append(next, m)
				}
			}
			combos = next
		}
		for _, args := range combos {
			for n := range 10000 {
				key := fmt.Sprintf("%s-%d", op.Name, n)
				tried = tried || (op.Name == "deploy" && args["env"] == "production" && key == "deploy-42")
				guesses++
				if publicKeyedID(agentID, hostID, op.Name, args, key) == ids[0] {
					t.Fatalf("the folder alone gave the request away after %d guesses: op %s, args %v, key %s", guesses, op.Name, args, key)
				}
			}
		}
	}
	// The search did cover the real request, so not finding it means the id
	// is not a function of public values.
	if !tried || guesses != 30000 {
		t.Fatalf("the search did not cover the request (%d guesses)", guesses)
	}
}

// Rotating the agent's keys leaves keyed ids as they were: a retry after a
// rotation is the same request, answered from the host's ledger.
func TestKeyedIDSameAcrossRotation(t *testing.T) {
	h := newHomes(t)
	opts := SubmitOptions{Op: "deploy", Args: map[string]string{"env": "staging"}, Key: "deploy-7"}
	first, err := h.client.Submit(opts)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := os.ReadFile(h.agent.Path(bridge.IdempotencySecretName))
	if err != nil {
		t.Fatal(err)
	}
	oldKid := h.agent.Identity().SignKid()
	if _, err := h.agent.Rotate(time.Hour); err != nil {
		t.Fatal(err)
	}
	rotated, err := trust.OpenHome(h.agent.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Identity().SignKid() == oldKid {
		t.Fatal("the rotation did not change the signing key")
	}
	if after, _ := os.ReadFile(rotated.Path(bridge.IdempotencySecretName)); !bytes.Equal(after, secret) {
		t.Fatal("the rotation changed the idempotency secret")
	}
	c, err := OpenClient(rotated)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	again, err := c.Submit(opts)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || again.ManifestSHA256 != first.ManifestSHA256 {
		t.Fatalf("after the rotation the keyed request is %s (manifest %s), before %s (%s)", again.ID, again.ManifestSHA256, first.ID, first.ManifestSHA256)
	}
}

// restoreHome copies what docs/KEYS.md says an agent must back up into a
// fresh directory, as a new sandbox restored from that backup would hold.
func restoreHome(t *testing.T, from *trust.Home, files ...string) *trust.Home {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "restored")
	if err := os.MkdirAll(filepath.Join(dir, trust.PeersDir), 0o700); err != nil {
		t.Fatal(err)
	}
	peers, _ := filepath.Glob(from.Path(trust.PeersDir, "*.json"))
	for _, p := range peers {
		files = append(files, filepath.Join(trust.PeersDir, filepath.Base(p)))
	}
	for _, f := range files {
		data, err := os.ReadFile(from.Path(f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h, err := trust.OpenHome(dir)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A sandbox restored from the agent's key material (docs/KEYS.md, "What an
// agent must keep") derives the same keyed ids, also after a rotation; one
// restored without the idempotency secret does not, which is why the
// secret is on that list.
func TestKeyedIDSameFromRestoredHome(t *testing.T) {
	h := newHomes(t)
	if _, err := h.agent.Rotate(time.Hour); err != nil {
		t.Fatal(err)
	}
	agentHome, err := trust.OpenHome(h.agent.Dir)
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]string{"env": "production"}
	want, err := agentHome.KeyedRequestID(h.host.Config.ID, "deploy", args, "deploy-42")
	if err != nil {
		t.Fatal(err)
	}
	backup := []string{"config.json", trust.IdentityName, trust.BundleName, bridge.IdempotencySecretName}
	restored := restoreHome(t, agentHome, backup...)
	got, err := restored.KeyedRequestID(h.host.Config.ID, "deploy", args, "deploy-42")
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("restored home derives %s, the original %s", got, want)
	}
	c, err := OpenClient(restored)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	without := restoreHome(t, agentHome, backup[:3]...)
	got, err = without.KeyedRequestID(h.host.Config.ID, "deploy", args, "deploy-42")
	if err != nil {
		t.Fatal(err)
	}
	if got == want {
		t.Fatal("a home without the idempotency secret derived the same id: the secret adds nothing")
	}
}

// Keyed ids are the agent's own: another agent, or the same agent with
// another secret, gets other ids for the same command; so do other
// arguments and another key.
func TestKeyedIDsDifferPerAgentAndSecret(t *testing.T) {
	h := newHomes(t)
	second, err := trust.InitHome(filepath.Join(t.TempDir(), "agent2"), "agent", "cloud-2", h.folder)
	if err != nil {
		t.Fatal(err)
	}
	host := h.host.Config.ID
	id := func(home *trust.Home, op string, args map[string]string, key string) string {
		t.Helper()
		s, err := home.KeyedRequestID(host, op, args, key)
		if err != nil {
			t.Fatal(err)
		}
		if !bridge.ValidID(s) {
			t.Fatalf("%q is not a request id", s)
		}
		return s
	}
	args := map[string]string{"env": "production"}
	base := id(h.agent, "deploy", args, "deploy-42")
	if again := id(h.agent, "deploy", args, "deploy-42"); again != base {
		t.Fatalf("one home derived %s, then %s", base, again)
	}
	cases := map[string]string{
		"another agent":     id(second, "deploy", args, "deploy-42"),
		"other arguments":   id(h.agent, "deploy", map[string]string{"env": "staging"}, "deploy-42"),
		"another key":       id(h.agent, "deploy", args, "deploy-43"),
		"another op":        id(h.agent, "status", nil, "deploy-42"),
		"public formula":    publicKeyedID(h.agent.Config.ID, host, "deploy", args, "deploy-42"),
		"name/value spills": id(h.agent, "deploy", map[string]string{"en": "vproduction"}, "deploy-42"),
	}
	// The same agent id with another secret (a home whose secret was lost
	// and made anew).
	if err := os.Remove(h.agent.Path(bridge.IdempotencySecretName)); err != nil {
		t.Fatal(err)
	}
	cases["another secret"] = id(h.agent, "deploy", args, "deploy-42")
	for name, got := range cases {
		if got == base {
			t.Errorf("%s: same id %s", name, got)
		}
	}
}

// A home from before the idempotency secret gets one on its first keyed
// request, and a retry of a keyed request it sent before, under the public
// id of that time, is still that request: it does not run a second time.
func TestKeyedRetryFromHomeWithoutSecret(t *testing.T) {
	h := newHomes(t)
	if err := os.Remove(h.agent.Path(bridge.IdempotencySecretName)); err != nil {
		t.Fatal(err)
	}
	hostID, agentID := h.host.Config.ID, h.agent.Config.ID
	args := map[string]string{"env": "production"}
	old := publicKeyedID(agentID, hostID, "deploy", args, "deploy-42")

	// What Submit did before: seal under the public id, remember, publish.
	_, hb, err := h.agent.Peer(hostID)
	if err != nil {
		t.Fatal(err)
	}
	var payload bytes.Buffer
	now := time.Now()
	manifest, req, err := bridge.SealRequest(&payload, bridge.NewRequest{ID: old, Agent: h.agent.Identity(), AgentID: agentID, Host: hb,
		Call: bridge.Call{Op: "deploy", Args: args}, Created: now, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	sent := &Sent{V: 1, ID: old, Host: hostID, HostName: "laptop", Op: "deploy", Args: args, Key: "deploy-42",
		ManifestSHA256: bridge.SHA256Hex(manifest), Created: req.Created, Expires: req.Expires}
	if err := h.client.Remember(sent, manifest); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(h.folder, bridge.ToHostDir(hostID, agentID))
	os.WriteFile(filepath.Join(dir, old+"."+bridge.ExtPayload), payload.Bytes(), 0o644)
	os.WriteFile(filepath.Join(dir, old+"."+bridge.ExtManifest), manifest, 0o644)

	again, err := h.client.Submit(SubmitOptions{Op: "deploy", Args: args, Key: "deploy-42"})
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != old || again.ManifestSHA256 != sent.ManifestSHA256 {
		t.Fatalf("the retry is %s, want the request sent before, %s", again.ID, old)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 { // the agent's bundle and the one request
		t.Fatalf("%d files in the request directory, want the bundle and one request", len(entries))
	}
	if _, err := os.Stat(h.agent.Path(bridge.IdempotencySecretName)); err != nil {
		t.Fatalf("no secret after the first keyed request: %v", err)
	}
	// A new keyed request gets an id under the new secret.
	s, err := h.client.Submit(SubmitOptions{Op: "deploy", Args: args, Key: "deploy-43"})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID == publicKeyedID(agentID, hostID, "deploy", args, "deploy-43") {
		t.Fatal("a new keyed request got the public id")
	}
}
