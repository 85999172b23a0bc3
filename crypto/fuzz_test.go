package crypto

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// addCorpus seeds f with the committed corpus of its target:
// fixtures/fuzz/<target>/, raw inputs, one per file (SPEC test vectors and
// inputs fuzzing found interesting).
func addCorpus(f *testing.F, target string, asString bool) {
	paths, _ := filepath.Glob(filepath.Join("..", "fixtures", "fuzz", target, "*"))
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil && asString {
			f.Add(string(data))
		} else if err == nil {
			f.Add(data)
		}
	}
}

// Round-trip properties (house style rule 6): whatever a parser accepts, the
// encoder gives back byte for byte; whatever it refuses, it refuses without
// panicking.

func FuzzBundleText(f *testing.F) {
	id := mustIdentity(f, "fuzz-host")
	signed, _ := id.SignBundle(Bundle{Role: "host", Name: "h", ID: id.SignKid(), Created: 1})
	f.Add(BundleText(signed))
	f.Add("bridge-bundle-v1:")
	f.Add("bridge-bundle-v1:QlJCMQ")
	addCorpus(f, "FuzzBundleText", true)
	f.Fuzz(func(t *testing.T, s string) {
		b, raw, err := ParseBundleText(s)
		if err != nil {
			return
		}
		if BundleText(raw) != string(bytes.TrimSpace([]byte(s))) {
			t.Fatalf("text form not canonical: %q", s)
		}
		if b.SignKid() == "" {
			t.Fatal("accepted bundle without key")
		}
	})
}

func FuzzEnvelope(f *testing.F) {
	id := mustIdentity(f, "fuzz-agent")
	signed, _ := Sign(KindRequest, []byte(`{"v":1}`), id)
	f.Add(signed)
	f.Add([]byte("BRQ1\x00\x00\x00\x00"))
	f.Add([]byte("BRQ2"))
	addCorpus(f, "FuzzEnvelope", false)
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := Parse(KindRequest, data)
		if err != nil {
			if env != nil {
				t.Fatal("non-nil envelope with error")
			}
			return
		}
		if !bytes.Equal(env.Bytes(), data) {
			t.Fatal("envelope bytes differ from input")
		}
		if env.Verify(0, id.SignPublic()) == nil {
			// Only a genuine signature verifies; re-signing must give the input.
			again, _ := Sign(KindRequest, env.Body(), id)
			if !bytes.Equal(again, data) {
				t.Fatal("verified envelope does not re-sign to itself")
			}
		}
	})
}

func FuzzDecodeBody(f *testing.F) {
	f.Add([]byte(`{"v":1,"id":"x","n":[1,2],"b":"AAE="}`))
	f.Add([]byte(`{"v":1}`))
	addCorpus(f, "FuzzDecodeBody", false)
	type body struct {
		V  int               `json:"v"`
		ID string            `json:"id"`
		N  []int64           `json:"n"`
		B  []byte            `json:"b"`
		M  map[string]string `json:"m"`
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b body
		if err := DecodeBody(data, &b); err != nil {
			return
		}
		again, err := EncodeBody(b)
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("accepted a non-canonical body: %q", data)
		}
	})
}

func FuzzRotation(f *testing.F) {
	old := mustIdentity(f, "fuzz-old")
	next := mustIdentity(f, "fuzz-next")
	signed, _ := SignRotation(old, next, Rotation{Role: "agent", ID: old.SignKid(), Seq: 3, Created: 5, OldValidUntil: 9})
	f.Add(signed)
	addCorpus(f, "FuzzRotation", false)
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRotation(data, old.SignPublic())
		if err != nil {
			return
		}
		body, _ := EncodeBody(r)
		env, _ := Parse(KindRotation, data)
		if !bytes.Equal(body, env.Body()) {
			t.Fatal("rotation body not canonical")
		}
	})
}

func FuzzPayloadStream(f *testing.F) {
	host := mustIdentity(f, "fuzz-host")
	ct, wrapped := seal(f, host, []byte("hello"))
	f.Add([]byte("hello"), ct)
	f.Add([]byte{}, ct[:10])
	f.Fuzz(func(t *testing.T, pt, junk []byte) {
		// Sealing then opening any plaintext gives it back.
		c, w := seal(t, host, pt)
		got, err := open(host, c, w)
		if err != nil || !bytes.Equal(got, pt) {
			t.Fatalf("round trip failed: %v", err)
		}
		// Arbitrary ciphertext under a real key never panics and never
		// yields plaintext that was not sealed.
		o, err := NewOpener(bytes.NewReader(junk), wrapped, host)
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(o)
		if err == nil && !bytes.Equal(junk, ct) {
			t.Fatalf("opened forged ciphertext to %q", out)
		}
	})
}
