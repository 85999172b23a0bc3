package crypto

import (
	"crypto/ed25519"
	"crypto/fips140"
	"crypto/sha512"

	"filippo.io/edwards25519"
)

// The standard library signs through a table of multiples of the base point
// that it builds on first use: about 1.4 ms of CPU, the largest single cost
// of a `bridge run` process, which signs once or twice and exits. The first
// signatures of an Identity are therefore made the other way RFC 8032
// allows: the base point multiplied as any point (a constant-time window
// over an eight-entry table of its own), about 0.1 ms with nothing to build.
// Ed25519 signatures are deterministic, so both ways give the same bytes
// (TestSignMatchesStandardLibrary); a long-lived process (serve, mcp) goes
// over to the standard library's faster per-signature path after a few.
const directSigns = 4

// publicFromSeed derives the Ed25519 public key A = s·B of a seed (RFC 8032
// §5.1.5) without the base-point table.
func publicFromSeed(seed *[32]byte) [32]byte {
	h := sha512.Sum512(seed[:])
	s, err := edwards25519.NewScalar().SetBytesWithClamping(h[:32])
	if err != nil {
		panic("bridge: internal error: clamping a 32-byte scalar: " + err.Error())
	}
	var a [32]byte
	copy(a[:], new(edwards25519.Point).ScalarMult(s, edwards25519.NewGeneratorPoint()).Bytes())
	return a
}

// signDirect is Ed25519 signing (RFC 8032 §5.1.6) of msg by the key with
// this seed and public key, with R = r·B computed without the base-point
// table. The output equals ed25519.Sign's.
func signDirect(seed, pub *[32]byte, msg []byte) []byte {
	h := sha512.Sum512(seed[:])
	s, err := edwards25519.NewScalar().SetBytesWithClamping(h[:32])
	if err != nil {
		panic("bridge: internal error: clamping a 32-byte scalar: " + err.Error())
	}
	var digest [sha512.Size]byte
	rh := sha512.New()
	rh.Write(h[32:])
	rh.Write(msg)
	r, err := edwards25519.NewScalar().SetUniformBytes(rh.Sum(digest[:0]))
	if err != nil {
		panic("bridge: internal error: reducing a 64-byte hash: " + err.Error())
	}
	R := new(edwards25519.Point).ScalarMult(r, edwards25519.NewGeneratorPoint()).Bytes()
	kh := sha512.New()
	kh.Write(R)
	kh.Write(pub[:])
	kh.Write(msg)
	k, err := edwards25519.NewScalar().SetUniformBytes(kh.Sum(digest[:0]))
	if err != nil {
		panic("bridge: internal error: reducing a 64-byte hash: " + err.Error())
	}
	S := edwards25519.NewScalar().MultiplyAdd(k, s, r)
	sig := make([]byte, 0, ed25519.SignatureSize)
	sig = append(sig, R...)
	return append(sig, S.Bytes()...)
}

// signMessage signs msg with the identity's Ed25519 key. In FIPS 140 mode
// every signature goes through the standard library's validated module.
func (id *Identity) signMessage(msg []byte) []byte {
	if id.signs.Add(1) <= directSigns && !fips140.Enabled() {
		pub := id.signPublic()
		return signDirect(&id.seed, &pub, msg)
	}
	return ed25519.Sign(id.signKey(), msg)
}
