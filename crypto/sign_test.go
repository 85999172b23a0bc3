package crypto

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"math/rand/v2"
	"testing"
)

// The direct path must give ed25519.Sign's bytes, for every key and message:
// a signature that differed would still verify, so only a comparison shows it.
func TestSignMatchesStandardLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		var seed [32]byte
		for j := range seed {
			seed[j] = byte(rng.Uint32())
		}
		switch i {
		case 0: // the extremes of the seed
		case 1:
			seed = [32]byte{0: 0xff, 31: 0xff}
			for j := range seed {
				seed[j] = 0xff
			}
		}
		msg := make([]byte, rng.IntN(300))
		for j := range msg {
			msg[j] = byte(rng.Uint32())
		}
		std := ed25519.NewKeyFromSeed(seed[:])
		pub := publicFromSeed(&seed)
		if !bytes.Equal(pub[:], std.Public().(ed25519.PublicKey)) {
			t.Fatalf("seed %x: public key %x, standard library %x", seed, pub, std.Public())
		}
		if got, want := signDirect(&seed, &pub, msg), ed25519.Sign(std, msg); !bytes.Equal(got, want) {
			t.Fatalf("seed %x, message %x: signature\n%x\nstandard library\n%x", seed, msg, got, want)
		}
	}
}

// An identity signs the first few times directly and then through the
// standard library; every signature, either way, is the same bytes.
func TestIdentitySignsAlikeBothWays(t *testing.T) {
	id, err := GenerateIdentity(nil)
	if err != nil {
		t.Fatal(err)
	}
	std := ed25519.NewKeyFromSeed(id.seed[:])
	body := []byte(`{"v":1}`)
	for i := range 3 * directSigns {
		signed, err := Sign(KindLiveness, body, id)
		if err != nil {
			t.Fatal(err)
		}
		env, err := Parse(KindLiveness, signed)
		if err != nil {
			t.Fatal(err)
		}
		if err := env.Verify(0, id.SignPublic()); err != nil {
			t.Fatalf("signature %d: %v", i, err)
		}
		want := ed25519.Sign(std, signedMessage(KindLiveness, signed[:headerSize+len(body)]))
		if got := signed[len(signed)-ed25519.SignatureSize:]; !bytes.Equal(got, want) {
			t.Fatalf("signature %d differs from the standard library's", i)
		}
	}
	if n := id.signs.Load(); n != 3*directSigns {
		t.Fatalf("counted %d signatures, made %d", n, 3*directSigns)
	}
}

func FuzzSignMatchesStandardLibrary(f *testing.F) {
	f.Add(make([]byte, 32), []byte("bridge"))
	f.Fuzz(func(t *testing.T, seedBytes, msg []byte) {
		seed := sha256.Sum256(seedBytes) // any input is a seed
		pub := publicFromSeed(&seed)
		if !bytes.Equal(signDirect(&seed, &pub, msg), ed25519.Sign(ed25519.NewKeyFromSeed(seed[:]), msg)) {
			t.Fatalf("seed %x message %x: signatures differ", seed, msg)
		}
	})
}

func BenchmarkSignFirst(b *testing.B) {
	var seed [32]byte
	seed[0] = 1
	msg := []byte("a manifest of a few hundred bytes")
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			pub := publicFromSeed(&seed)
			signDirect(&seed, &pub, msg)
		}
	})
	b.Run("stdlib-warm", func(b *testing.B) {
		k := ed25519.NewKeyFromSeed(seed[:])
		for b.Loop() {
			ed25519.Sign(k, msg)
		}
	})
}
