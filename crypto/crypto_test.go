package crypto

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// newDetRand is a deterministic byte source for reproducible keys in tests.
func newDetRand(seed string) io.Reader {
	return rand.NewChaCha8(sha256.Sum256([]byte(seed)))
}

func mustIdentity(t testing.TB, seed string) *Identity {
	t.Helper()
	id, err := GenerateIdentity(newDetRand(seed))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func seal(t testing.TB, to *Identity, pt []byte) (ct, wrapped []byte) {
	t.Helper()
	var buf bytes.Buffer
	s, wrapped, err := NewSealer(&buf, to.BoxPublic(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(pt); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), wrapped
}

func open(id *Identity, ct, wrapped []byte) ([]byte, error) {
	o, err := NewOpener(bytes.NewReader(ct), wrapped, id)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(o)
}

func TestStreamRoundTrip(t *testing.T) {
	host := mustIdentity(t, "host")
	for _, n := range []int{0, 1, 100, ChunkSize - 1, ChunkSize, ChunkSize + 1, 2 * ChunkSize, 3*ChunkSize + 7} {
		pt := bytes.Repeat([]byte{byte(n)}, n)
		ct, wrapped := seal(t, host, pt)
		if int64(len(ct)) != SealedSize(int64(n)) {
			t.Errorf("n=%d: ciphertext %d bytes, SealedSize says %d", n, len(ct), SealedSize(int64(n)))
		}
		if got := OpenedSize(int64(len(ct))); got != int64(n) {
			t.Errorf("n=%d: OpenedSize = %d", n, got)
		}
		got, err := open(host, ct, wrapped)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if !bytes.Equal(got, pt) {
			t.Fatalf("n=%d: plaintext differs", n)
		}
	}
}

func TestStreamSmallWrites(t *testing.T) {
	host := mustIdentity(t, "host")
	pt := bytes.Repeat([]byte("abcdefg"), ChunkSize/3)
	var buf bytes.Buffer
	s, wrapped, err := NewSealer(&buf, host.BoxPublic(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(pt); i += 1000 {
		s.Write(pt[i:min(i+1000, len(pt))])
	}
	s.Close()
	got, err := open(host, buf.Bytes(), wrapped)
	if err != nil || !bytes.Equal(got, pt) {
		t.Fatalf("round trip with small writes: err=%v equal=%v", err, bytes.Equal(got, pt))
	}
}

func TestStreamRejects(t *testing.T) {
	host := mustIdentity(t, "host")
	other := mustIdentity(t, "other")
	pt := bytes.Repeat([]byte("x"), 2*ChunkSize+10)
	ct, wrapped := seal(t, host, pt)
	flip := func(b []byte, i int) []byte { c := bytes.Clone(b); c[i] ^= 1; return c }
	cases := []struct {
		name    string
		ct, key []byte
		id      *Identity
		want    error
	}{
		{"cut at chunk boundary", ct[:2*encChunkSize], wrapped, host, ErrTruncated},
		{"cut after first chunk", ct[:encChunkSize], wrapped, host, ErrTruncated},
		{"cut mid chunk", ct[:encChunkSize+100], wrapped, host, ErrUnauthenticated},
		{"cut inside tag", ct[:2*encChunkSize+5], wrapped, host, ErrTruncated},
		{"empty", nil, wrapped, host, ErrTruncated},
		{"bit flip first chunk", flip(ct, 10), wrapped, host, ErrUnauthenticated},
		{"bit flip last tag", flip(ct, len(ct)-1), wrapped, host, ErrUnauthenticated},
		{"extended", append(bytes.Clone(ct), 0), wrapped, host, ErrUnauthenticated},
		{"chunks swapped", append(append(bytes.Clone(ct[encChunkSize:2*encChunkSize]), ct[:encChunkSize]...), ct[2*encChunkSize:]...), wrapped, host, ErrUnauthenticated},
		{"wrong recipient", ct, wrapped, other, ErrUnauthenticated},
		{"wrapped key flipped", ct, flip(wrapped, 40), host, ErrUnauthenticated},
		{"wrapped key short", ct, wrapped[:79], host, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := open(c.id, c.ct, c.key)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// The one legitimately empty chunk is the only chunk of an empty payload. A
// sealer that appended an empty final chunk after full ones would make a second
// encoding of the same plaintext.
func TestStreamRejectsEmptyTrailingChunk(t *testing.T) {
	host := mustIdentity(t, "host")
	var buf bytes.Buffer
	s, wrapped, _ := NewSealer(&buf, host.BoxPublic(), nil)
	s.Write(bytes.Repeat([]byte("y"), ChunkSize))
	s.flush(false)
	s.Close()
	if _, err := open(host, buf.Bytes(), wrapped); !errors.Is(err, ErrMalformed) {
		t.Fatalf("got %v, want ErrMalformed", err)
	}
}

// Low-order points of Curve25519 (the list libsodium refuses) must all be
// refused as recipients and in bundles.
var lowOrderPoints = []string{
	"0000000000000000000000000000000000000000000000000000000000000000",
	"0100000000000000000000000000000000000000000000000000000000000000",
	"e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
	"5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
	"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
}

func TestLowOrderKeysRefused(t *testing.T) {
	for _, h := range lowOrderPoints {
		pub, _ := hex.DecodeString(h)
		if err := CheckBoxKey(pub); !errors.Is(err, ErrBadKey) {
			t.Errorf("%s: CheckBoxKey = %v, want ErrBadKey", h[:8], err)
		}
		if _, _, err := NewSealer(io.Discard, pub, nil); !errors.Is(err, ErrBadKey) {
			t.Errorf("%s: NewSealer = %v, want ErrBadKey", h[:8], err)
		}
	}
	if err := CheckBoxKey(mustIdentity(t, "x").BoxPublic()); err != nil {
		t.Fatalf("a real key was refused: %v", err)
	}
	if err := CheckBoxKey(make([]byte, 31)); !errors.Is(err, ErrBadKey) {
		t.Fatalf("short key: %v", err)
	}
}

// The keys CheckBoxKey remembers as good never make a bad one pass: after
// good keys fill the memory past its bound (and it starts again), and with
// a good key's bytes changed in place after its check.
func TestGoodKeyMemoryKeepsRefusing(t *testing.T) {
	for i := range 300 {
		good := mustIdentity(t, fmt.Sprint("k", i)).BoxPublic()
		if err := CheckBoxKey(good); err != nil {
			t.Fatal(err)
		}
		if err := CheckBoxKey(good); err != nil {
			t.Fatalf("a good key, checked again: %v", err)
		}
		bad, _ := hex.DecodeString(lowOrderPoints[i%len(lowOrderPoints)])
		copy(good, bad) // the same slice, now a low-order key
		if err := CheckBoxKey(good); !errors.Is(err, ErrBadKey) {
			t.Fatalf("round %d: a low-order key passed: %v", i, err)
		}
	}
}

func TestEnvelope(t *testing.T) {
	a := mustIdentity(t, "agent")
	body := []byte(`{"v":1}`)
	signed, err := Sign(KindRequest, body, a)
	if err != nil {
		t.Fatal(err)
	}
	env, err := Parse(KindRequest, signed)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Verify(0, a.SignPublic()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(env.Body(), body) || !bytes.Equal(env.Bytes(), signed) {
		t.Fatal("body or bytes differ")
	}
	other := mustIdentity(t, "other")
	if err := env.Verify(0, other.SignPublic()); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("other key: %v", err)
	}
	for _, n := range []int{0, 31, 33, 64} {
		if err := env.Verify(0, make([]byte, n)); !errors.Is(err, ErrBadKey) {
			t.Fatalf("key of %d bytes: %v", n, err)
		}
	}
	// Domain separation: the same bytes under another kind's magic must not
	// verify, even if the length and cap allow it.
	asCancel := bytes.Clone(signed)
	copy(asCancel, KindCancel.magic)
	env2, err := Parse(KindCancel, asCancel)
	if err != nil {
		t.Fatal(err)
	}
	if err := env2.Verify(0, a.SignPublic()); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("cross-kind signature: %v", err)
	}
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"header only", signed[:8], ErrTruncated},
		{"short signature", signed[:len(signed)-1], ErrTruncated},
		{"trailing", append(bytes.Clone(signed), 0), ErrMalformed},
		{"bad magic", append([]byte("XXXX"), signed[4:]...), ErrMalformed},
		{"bad magic short", []byte("XX"), ErrMalformed},
		{"next version", append([]byte("BRQ2"), signed[4:]...), ErrUnknownVersion},
		{"oversize", append([]byte("BRQ1\x00\x01\x00\x00"), signed[8:]...), ErrTooLarge},
	}
	for _, c := range cases {
		if _, err := Parse(KindRequest, c.data); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := Sign(KindRequest, make([]byte, KindRequest.max+1), a); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversize sign: %v", err)
	}
}

func TestDecodeBodyStrict(t *testing.T) {
	type body struct {
		V   int    `json:"v"`
		Key []byte `json:"key"`
		S   string `json:"s"`
	}
	good := `{"v":1,"key":"AAE=","s":"a<b"}`
	var b body
	if err := DecodeBody([]byte(good), &b); err != nil {
		t.Fatalf("canonical body refused: %v", err)
	}
	for _, bad := range []string{
		`{"v":1,"key":"AAE=","s":"a<b","x":1}`,        // unknown field
		`{"v":1,"key":"AAE=","s":"a<b"} `,             // trailing space
		`{"v":1,"key":"AAE=","s":"a<b"}{}`,            // trailing value
		`{ "v":1,"key":"AAE=","s":"a<b"}`,             // white space
		`{"key":"AAE=","v":1,"s":"a<b"}`,              // field order
		`{"v":1,"v":1,"key":"AAE=","s":"a<b"}`,        // duplicate key
		`{"v":1,"key":"AAF=","s":"a<b"}`,              // non-canonical base64 padding bits
		`{"v":1,"key":"AAE","s":"a<b"}`,               // missing padding
		`{"v":1,"key":"AAE=","s":"a\u003cb"}`,         // needless escape
		`{"v":1.0,"key":"AAE=","s":"a<b"}`,            // non-integer number
		`{"v":01,"key":"AAE=","s":"a<b"}`,             // leading zero
		`{"v":1,"key":"AAE=","s":"a` + "\xff" + `b"}`, // invalid UTF-8
		`{"v":1,"key":"AAE=","s":"a<b","s":"c"}`,      // duplicate, last wins
		`{"v":1,"key":"AAE=","S":"a<b"}`,              // case-folded field name
	} {
		var b body
		if err := DecodeBody([]byte(bad), &b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", bad, err)
		}
	}
}

func TestIdentityText(t *testing.T) {
	id := mustIdentity(t, "id")
	text, _ := id.MarshalText()
	back, err := ParseIdentity(text)
	if err != nil {
		t.Fatal(err)
	}
	if back.SignKid() != id.SignKid() || back.BoxKid() != id.BoxKid() {
		t.Fatal("identity changed across text round trip")
	}
	for _, bad := range []string{
		"", string(text[:len(text)-1]), string(text) + "\n", "x" + string(text),
		strings.Replace(string(text), "bridge-secret-v1:", "bridge-secret-v2:", 1),
		string(text[:len(text)-3]) + "\n",
	} {
		if _, err := ParseIdentity([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: got %v", bad, err)
		}
	}
}

func TestBundle(t *testing.T) {
	id := mustIdentity(t, "host")
	signed, err := id.SignBundle(Bundle{Role: "host", Name: "laptop", ID: id.SignKid(), Created: 1700000000})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseBundle(signed)
	if err != nil {
		t.Fatal(err)
	}
	if b.SignKid() != id.SignKid() || b.BoxKid() != id.BoxKid() || b.Name != "laptop" {
		t.Fatalf("bundle fields: %+v", b)
	}
	text := BundleText(signed)
	b2, raw, err := ParseBundleText("  " + text + "\n")
	if err != nil || !bytes.Equal(raw, signed) || !b2.Equal(b) {
		t.Fatalf("text round trip: %v", err)
	}
	if len(b.Fingerprint()) != 29 || b.Fingerprint() != Fingerprint("host", id.SignKid(), id.SignPublic(), id.BoxPublic()) {
		t.Fatalf("fingerprint %q", b.Fingerprint())
	}
	for _, bad := range []string{text + "=", text[:len(text)-1], strings.ToUpper(text[:6]) + text[6:], "bridge-bundle-v2:" + text[17:], text + "A"} {
		if _, _, err := ParseBundleText(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	if _, err := id.SignBundle(Bundle{Role: "host", Name: "Laptop", ID: id.SignKid()}); !errors.Is(err, ErrMalformed) {
		t.Errorf("upper-case name: %v", err)
	}
	if _, err := id.SignBundle(Bundle{Role: "boss", Name: "x", ID: id.SignKid()}); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad role: %v", err)
	}
	if _, err := id.SignBundle(Bundle{Role: "host", Name: "x", ID: mustIdentity(t, "y").SignKid()}); !errors.Is(err, ErrMalformed) {
		t.Errorf("first-generation id that is not the kid: %v", err)
	}
	// A bundle whose self-signature is made by another key.
	other := mustIdentity(t, "other")
	body, _ := EncodeBody(Bundle{V: 1, Role: "host", Name: "x", ID: id.SignKid(), SignPub: id.SignPublic(), BoxPub: id.BoxPublic()})
	forged, _ := Sign(KindBundle, body, other)
	if _, err := ParseBundle(forged); !errors.Is(err, ErrBadSignature) {
		t.Errorf("forged bundle: %v", err)
	}
}

func TestRotation(t *testing.T) {
	old := mustIdentity(t, "old")
	next := mustIdentity(t, "next")
	stranger := mustIdentity(t, "stranger")
	r := Rotation{Role: "host", ID: old.SignKid(), Seq: 1, Created: 100, OldValidUntil: 200}
	signed, err := SignRotation(old, next, r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseRotation(signed, old.SignPublic())
	if err != nil {
		t.Fatal(err)
	}
	if Kid(AlgEd25519, got.NewSignPub) != next.SignKid() || got.Seq != 1 {
		t.Fatalf("rotation fields: %+v", got)
	}
	if _, err := ParseRotation(signed, stranger.SignPublic()); !errors.Is(err, ErrBadSignature) {
		t.Errorf("wrong old key: %v", err)
	}
	// Signed by the old key but the second signature is not the new key's.
	body, _ := EncodeBody(Rotation{V: 1, Role: "host", ID: old.SignKid(), Seq: 1, OldSignKid: old.SignKid(), NewSignPub: next.SignPublic(), NewBoxPub: next.BoxPublic(), Created: 100, OldValidUntil: 200})
	noPossession, _ := Sign(KindRotation, body, old, stranger)
	if _, err := ParseRotation(noPossession, old.SignPublic()); !errors.Is(err, ErrBadSignature) {
		t.Errorf("no proof of possession: %v", err)
	}
	if _, err := SignRotation(old, old, r); !errors.Is(err, ErrMalformed) {
		t.Errorf("rotation to the same key: %v", err)
	}
	r.Seq = 0
	if _, err := SignRotation(old, next, r); !errors.Is(err, ErrMalformed) {
		t.Errorf("seq 0: %v", err)
	}
}

func TestKid(t *testing.T) {
	id := mustIdentity(t, "k")
	if !ValidKid(id.SignKid()) || !ValidKid(id.BoxKid()) || id.SignKid() == id.BoxKid() {
		t.Fatal("kids malformed or not domain separated")
	}
	// The algorithm is part of the kid: the same bytes under two algorithms differ.
	if Kid(AlgEd25519, id.BoxPublic()) == id.BoxKid() {
		t.Fatal("kid ignores the algorithm")
	}
}

// Go's base64 decoder skips line breaks even in strict mode; the text forms
// must not have a second encoding because of it.
func TestTextFormsRefuseLineBreaks(t *testing.T) {
	id := mustIdentity(t, "lb")
	text, _ := id.MarshalText()
	s := string(text)
	withCR := s[:30] + "\r" + s[30:]
	if _, err := ParseIdentity([]byte(withCR)); !errors.Is(err, ErrMalformed) {
		t.Errorf("identity with CR: %v", err)
	}
	signed, _ := id.SignBundle(Bundle{Role: "host", Name: "h", ID: id.SignKid()})
	bt := BundleText(signed)
	if _, _, err := ParseBundleText(bt[:40] + "\n" + bt[40:]); !errors.Is(err, ErrMalformed) {
		t.Errorf("bundle text with a line break: %v", err)
	}
	if _, err := Parse(KindRequest, []byte("BRQ2")); !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("short input of another version: %v", err)
	}
}
