package bridge

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/txtar"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// The test vectors in fixtures/vectors are data: each is a txtar archive whose
// comment starts with "expect: <reason>" and names its kind, and whose files
// are the bytes of the case (binary files in base64). TestVectors runs every
// one through the real parsing and verification path; accepted ones must also
// re-encode to the same bytes. Regenerate with
//
//	go test ./bridge -run TestVectors -update
var update = flag.Bool("update", false, "rewrite fixtures/vectors and fixtures/keys")

const (
	vectorDir = "../fixtures/vectors"
	keyDir    = "../fixtures/keys"
)

// vectorNow is the host clock of every vector: 2026-01-01T00:00:00Z.
var vectorNow = time.Unix(1767225600, 0)

func detRand(seed string) io.Reader { return rand.NewChaCha8(sha256.Sum256([]byte(seed))) }

// testKeys are the obviously named, test-only identities in fixtures/keys.
type testKeys struct {
	host, agent, stranger, otherHost *bcrypto.Identity
	agentIdempotency                 []byte // the agent's idempotency secret
}

func loadKeys(t testing.TB) testKeys {
	t.Helper()
	load := func(name string) *bcrypto.Identity {
		p := filepath.Join(keyDir, "TEST-ONLY-"+name+".secret")
		if *update {
			id, err := bcrypto.GenerateIdentity(detRand("key:" + name))
			if err != nil {
				t.Fatal(err)
			}
			text, _ := id.MarshalText()
			if err := os.WriteFile(p, text, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		id, err := bcrypto.ParseIdentity(text)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		return id
	}
	// The agent's idempotency secret (SPEC §2.7), also derived from a seed.
	p := filepath.Join(keyDir, "TEST-ONLY-agent."+IdempotencySecretName)
	if *update {
		secret := make([]byte, IdempotencySecretSize)
		io.ReadFull(detRand("key:agent-idempotency"), secret)
		if err := os.WriteFile(p, MarshalIdempotencySecret(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	text, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	idem, err := ParseIdempotencySecret(text)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return testKeys{load("host"), load("agent"), load("stranger"), load("other-host"), idem}
}

func bundleOf(t testing.TB, id *bcrypto.Identity, role, name string) *bcrypto.Bundle {
	t.Helper()
	signed, err := id.SignBundle(bcrypto.Bundle{Role: role, Name: name, ID: id.SignKid(), Created: vectorNow.Unix() - 86400})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bcrypto.ParseBundle(signed)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vector is one case: its header fields and files.
type vector struct {
	name   string
	expect string
	kind   string
	note   string
	fields map[string]string // extra header fields
	files  map[string][]byte
}

func (v *vector) archive() []byte {
	var hdr strings.Builder
	fmt.Fprintf(&hdr, "expect: %s\nkind: %s\n", v.expect, v.kind)
	for _, k := range slices.Sorted(maps.Keys(v.fields)) {
		fmt.Fprintf(&hdr, "%s: %s\n", k, v.fields[k])
	}
	fmt.Fprintf(&hdr, "note: %s\n", v.note)
	a := &txtar.Archive{Comment: []byte(hdr.String())}
	for _, name := range slices.Sorted(maps.Keys(v.files)) {
		data := v.files[name]
		if strings.HasSuffix(name, ".b64") {
			data = wrap64(data)
		}
		a.Files = append(a.Files, txtar.File{Name: name, Data: data})
	}
	return txtar.Format(a)
}

func wrap64(b []byte) []byte {
	s := base64.StdEncoding.EncodeToString(b)
	var out bytes.Buffer
	for len(s) > 76 {
		out.WriteString(s[:76] + "\n")
		s = s[76:]
	}
	out.WriteString(s + "\n")
	return out.Bytes()
}

func parseVector(t testing.TB, path string) *vector {
	t.Helper()
	a, err := txtar.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := &vector{name: strings.TrimSuffix(filepath.Base(path), ".txtar"), fields: map[string]string{}, files: map[string][]byte{}}
	for _, line := range strings.Split(strings.TrimSpace(string(a.Comment)), "\n") {
		k, val, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("%s: bad header line %q", path, line)
		}
		switch k {
		case "expect":
			v.expect = val
		case "kind":
			v.kind = val
		case "note":
			v.note = val
		default:
			v.fields[k] = val
		}
	}
	if v.expect == "" || v.kind == "" {
		t.Fatalf("%s: no expect: or kind: line", path)
	}
	for _, f := range a.Files {
		data := f.Data
		if strings.HasSuffix(f.Name, ".b64") {
			data, err = base64.StdEncoding.DecodeString(strings.ReplaceAll(string(data), "\n", ""))
			if err != nil {
				t.Fatalf("%s: %s: %v", path, f.Name, err)
			}
		}
		v.files[f.Name] = data
	}
	return v
}

func TestVectors(t *testing.T) {
	keys := loadKeys(t)
	if *update {
		generateVectors(t, keys)
	}
	paths, _ := filepath.Glob(filepath.Join(vectorDir, "*.txtar"))
	if len(paths) < 30 {
		t.Fatalf("only %d vectors in %s; want at least 30", len(paths), vectorDir)
	}
	seen := map[string]int{}
	for _, p := range paths {
		v := parseVector(t, p)
		seen[v.expect]++
		t.Run(v.name, func(t *testing.T) {
			got := runVector(t, keys, v)
			if got != v.expect {
				t.Fatalf("%s (%s): got %q, want %q", v.name, v.note, got, v.expect)
			}
		})
	}
	if seen["ok"] == 0 || len(seen) < 10 {
		t.Fatalf("vectors cover too few outcomes: %v", seen)
	}
}

// runVector runs one vector through the same functions the daemon and the
// agent use, and returns the reason code of the first refusal, or "ok".
func runVector(t *testing.T, k testKeys, v *vector) string {
	host := bundleOf(t, k.host, "host", "laptop")
	agent := bundleOf(t, k.agent, "agent", "cloud-1")
	switch v.kind {
	case "request":
		dir := v.fields["agent-dir"]
		var agentKeys [][]byte
		if dir == agent.ID {
			agentKeys = [][]byte{agent.SignPub}
		}
		check := RequestCheck{
			Host: host.ID, HostBoxKids: []string{host.BoxKid()}, Agent: dir, AgentKeys: agentKeys,
			AgentBoxKid: func(kid string) bool { return kid == agent.BoxKid() },
			Now:         vectorNow,
		}
		stem := strings.TrimSuffix(v.fields["name"], ".manifest")
		req, err := OpenRequest(v.files["manifest.b64"], stem, check)
		if err != nil {
			return string(Reason(err))
		}
		if err := checkPayloadBytes(v.files["payload.b64"], req.Payload); err != nil {
			return string(Reason(err))
		}
		var stdin bytes.Buffer
		call, err := OpenCall(bytes.NewReader(v.files["payload.b64"]), req, k.host, &stdin, nil)
		if err != nil {
			return string(Reason(err))
		}
		if want := v.fields["op"]; call.Op != want {
			t.Fatalf("op %q, header says %q", call.Op, want)
		}
		if want, _ := strconv.Atoi(v.fields["stdin-len"]); stdin.Len() != want {
			t.Fatalf("stdin of %d bytes, header says %d", stdin.Len(), want)
		}
		body, _ := bcrypto.EncodeBody(req)
		again, _ := bcrypto.Sign(bcrypto.KindRequest, body, k.agent)
		if !bytes.Equal(again, v.files["manifest.b64"]) {
			t.Fatal("accepted manifest does not re-encode to the same bytes")
		}
		return "ok"
	case "result":
		stem := strings.TrimSuffix(v.fields["name"], ".result")
		res, err := OpenResult(v.files["result.b64"], stem, ResultCheck{
			Host: host.ID, HostKeys: [][]byte{host.SignPub}, Agent: agent.ID, AgentBoxKids: []string{agent.BoxKid()},
			RequestSHA256: SHA256Hex(v.files["request.b64"]),
		})
		if err != nil {
			return string(Reason(err))
		}
		if err := checkPayloadBytes(v.files["output.b64"], res.Payload); err != nil {
			return string(Reason(err))
		}
		var stdout, stderr bytes.Buffer
		rc, err := OpenOutput(bytes.NewReader(v.files["output.b64"]), res, k.agent, &stdout, &stderr)
		if err != nil {
			return string(Reason(err))
		}
		if want, _ := strconv.Unquote(v.fields["stdout"]); stdout.String() != want || rc.ExitCode != 0 {
			t.Fatalf("stdout %q exit %d", stdout.String(), rc.ExitCode)
		}
		body, _ := bcrypto.EncodeBody(res)
		again, _ := bcrypto.Sign(bcrypto.KindResult, body, k.host)
		if !bytes.Equal(again, v.files["result.b64"]) {
			t.Fatal("accepted result does not re-encode to the same bytes")
		}
		return "ok"
	case "bundle":
		b, raw, err := bcrypto.ParseBundleText(string(v.files["bundle.txt"]))
		if err != nil {
			return string(Reason(err))
		}
		if strings.TrimSpace(string(v.files["bundle.txt"])) != bcrypto.BundleText(raw) {
			t.Fatal("accepted bundle text is not canonical")
		}
		if b.Fingerprint() != v.fields["fingerprint"] {
			t.Fatalf("fingerprint %s, header says %s", b.Fingerprint(), v.fields["fingerprint"])
		}
		return "ok"
	case "rotation":
		r, err := bcrypto.ParseRotation(v.files["rotation.b64"], agent.SignPub)
		if err != nil {
			return string(Reason(err))
		}
		body, _ := bcrypto.EncodeBody(r)
		env, _ := bcrypto.Parse(bcrypto.KindRotation, v.files["rotation.b64"])
		if !bytes.Equal(body, env.Body()) {
			t.Fatal("accepted rotation body is not canonical")
		}
		return "ok"
	case "keyed-id":
		secret, err := ParseIdempotencySecret(v.files["secret.b64"])
		if err != nil {
			return string(Reason(err))
		}
		if !bytes.Equal(MarshalIdempotencySecret(secret), v.files["secret.b64"]) {
			t.Fatal("accepted secret does not re-encode to the same bytes")
		}
		var args map[string]string
		if err := json.Unmarshal([]byte(v.fields["args"]), &args); err != nil {
			t.Fatalf("args header: %v", err)
		}
		id := KeyedID(secret, v.fields["agent"], v.fields["host"], v.fields["op"], args, v.fields["key"])
		if id != v.fields["id"] {
			t.Fatalf("keyed id %s, header says %s", id, v.fields["id"])
		}
		return "ok"
	case "agent-secret":
		s, err := ParseAgentSecret(string(v.files["secret.b64"]))
		if err != nil {
			return string(Reason(err))
		}
		again, _ := s.MarshalText()
		if again != strings.TrimSpace(string(v.files["secret.b64"])) {
			t.Fatal("accepted agent secret does not re-encode to the same bytes")
		}
		if s.ID != v.fields["agent"] || len(s.Hosts) != 1 || s.Hosts[0].ID != v.fields["host"] ||
			!bytes.Equal(s.Idempotency, k.agentIdempotency) || s.Identity.SignKid() != k.agent.SignKid() {
			t.Fatalf("agent secret decodes to other values: %+v", s)
		}
		return "ok"
	case "catalog":
		cat, err := OpenCatalog(v.files["catalog.b64"], host.ID, agent.ID, [][]byte{host.SignPub})
		if err != nil {
			return string(Reason(err))
		}
		var modes []string
		for i := range cat.Ops {
			modes = append(modes, cat.Ops[i].Name+"="+cat.Ops[i].StdinMode())
		}
		if got := strings.Join(modes, ","); got != v.fields["stdin"] {
			t.Fatalf("stdin modes %s, header says %s", got, v.fields["stdin"])
		}
		body, _ := bcrypto.EncodeBody(cat)
		again, _ := bcrypto.Sign(bcrypto.KindCatalog, body, k.host)
		if !bytes.Equal(again, v.files["catalog.b64"]) {
			t.Fatal("accepted catalog does not re-encode to the same bytes")
		}
		return "ok"
	case "cancel":
		_, err := OpenCancel(v.files["cancel.b64"], v.fields["id"], host.ID, agent.ID, [][]byte{agent.SignPub})
		return string(Reason(err))
	case "ack":
		_, err := OpenAck(v.files["ack.b64"], v.fields["id"], host.ID, agent.ID, [][]byte{agent.SignPub})
		return string(Reason(err))
	case "liveness":
		st, err := OpenLiveness(v.files["liveness.b64"], host.ID, agent.ID, [][]byte{host.SignPub})
		if err != nil {
			return string(Reason(err))
		}
		again, _ := SignLiveness(*st, k.host)
		if !bytes.Equal(again, v.files["liveness.b64"]) {
			t.Fatal("accepted stamp does not re-encode to the same bytes")
		}
		return "ok"
	}
	t.Fatalf("unknown kind %q", v.kind)
	return ""
}

// checkPayloadBytes compares a vector's payload with its pin: shorter is
// pending, anything else that differs is a hash mismatch (the daemon settles
// files with syncsafe.Settle, the agent with checkPayloadFile).
func checkPayloadBytes(data []byte, p Payload) error {
	if int64(len(data)) < p.Len {
		return fmt.Errorf("%w: %d of %d bytes", ErrPending, len(data), p.Len)
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != p.Len || hex.EncodeToString(sum[:]) != p.SHA256 {
		return ErrHashMismatch
	}
	return nil
}
