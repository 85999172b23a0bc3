package bridge

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	bcrypto "github.com/syncbridge/bridge/crypto"
)

// seedFromVectors adds every file of the given name in fixtures/vectors.
func seedFromVectors(f *testing.F, file string) {
	paths, _ := filepath.Glob(filepath.Join(vectorDir, "*.txtar"))
	for _, p := range paths {
		v := parseVector(f, p)
		if data, ok := v.files[file]; ok {
			f.Add(data)
		}
	}
}

// FuzzOpenRequest: no input makes OpenRequest panic, and an accepted
// manifest is the canonical, re-signable encoding of what it returned.
func FuzzOpenRequest(f *testing.F) {
	seedFromVectors(f, "manifest.b64")
	keys := loadKeys(f)
	host := bundleOf(f, keys.host, "host", "laptop")
	agent := bundleOf(f, keys.agent, "agent", "cloud-1")
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := bcrypto.Parse(bcrypto.KindRequest, data)
		stem := strings.Repeat("0", 32)
		if err == nil {
			var r Request
			if bcrypto.DecodeBody(env.Body(), &r) == nil && ValidID(r.ID) {
				stem = r.ID
			}
		}
		req, err := OpenRequest(data, stem, RequestCheck{
			Host: host.ID, HostBoxKids: []string{host.BoxKid()}, Agent: agent.ID,
			AgentKeys: [][]byte{agent.SignPub}, Now: vectorNow,
		})
		if err != nil {
			return
		}
		body, _ := bcrypto.EncodeBody(req)
		again, _ := bcrypto.Sign(bcrypto.KindRequest, body, keys.agent)
		if !bytes.Equal(again, data) {
			t.Fatal("accepted manifest is not canonical")
		}
	})
}

// FuzzOpenOutput: arbitrary output bytes under a genuine result manifest never
// panic and never yield a receipt unless they are the genuine output.
func FuzzOpenOutput(f *testing.F) {
	v := parseVector(f, filepath.Join(vectorDir, "result-ok.txtar"))
	f.Add(v.files["output.b64"])
	f.Add([]byte{})
	keys := loadKeys(f)
	host := bundleOf(f, keys.host, "host", "laptop")
	agent := bundleOf(f, keys.agent, "agent", "cloud-1")
	res, err := OpenResult(v.files["result.b64"], strings.TrimSuffix(v.fields["name"], ".result"), ResultCheck{
		Host: host.ID, HostKeys: [][]byte{host.SignPub}, Agent: agent.ID, AgentBoxKids: []string{agent.BoxKid()},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rc, err := OpenOutput(bytes.NewReader(data), res, keys.agent, nil, nil)
		if err == nil && (rc == nil || !bytes.Equal(data, v.files["output.b64"])) {
			t.Fatal("accepted output that is not the sealed one")
		}
	})
}

// FuzzIdempotencySecret: a secret file is accepted only in its one text
// form, and a rejected one yields no secret.
func FuzzIdempotencySecret(f *testing.F) {
	seedFromVectors(f, "secret.b64")
	f.Fuzz(func(t *testing.T, data []byte) {
		secret, err := ParseIdempotencySecret(data)
		if err != nil {
			if secret != nil {
				t.Fatal("a rejected secret file yielded a secret")
			}
			return
		}
		if !bytes.Equal(MarshalIdempotencySecret(secret), data) {
			t.Fatal("accepted secret file is not canonical")
		}
	})
}
