package crypto

import (
	"bytes"
	"crypto/ed25519"
	"crypto/fips140"
	cryptorand "crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/curve25519"
)

// Labels that are not envelope kinds (SPEC §2).
const (
	labelKid         = "bridge/v1/kid\x00"
	labelFingerprint = "bridge/v1/fingerprint\x00"
	secretPrefix     = "bridge-secret-v1:"
	bundleTextPrefix = "bridge-bundle-v1:"
)

// Key algorithms named in kids.
const (
	AlgEd25519 = "ed25519"
	AlgX25519  = "x25519"
)

// Kid returns the key id of a public key: the first 16 bytes of
// SHA-256(label ‖ alg ‖ 0x00 ‖ pub), as 32 lower-case hex digits.
func Kid(alg string, pub []byte) string {
	h := sha256.New()
	h.Write([]byte(labelKid))
	h.Write([]byte(alg))
	h.Write([]byte{0})
	h.Write(pub)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Identity is a party's private keys: an Ed25519 signing key and an X25519
// encryption key. They are independent key pairs bound by the signed bundle.
type Identity struct {
	// seed is the Ed25519 seed; the public key and the standard library's
	// private key are derived from it when first needed: the standard
	// library's derivation builds the base point's tables (sign.go), and a
	// command that only reads and verifies never signs.
	seed     [32]byte
	pubOnce  sync.Once
	pub      [32]byte
	signOnce sync.Once
	sign     ed25519.PrivateKey
	signs    atomic.Int64 // signatures made, for signMessage
	box      [32]byte
	boxPub   [32]byte
}

// signPublic is the Ed25519 public key, derived from the seed once.
func (id *Identity) signPublic() [32]byte {
	id.pubOnce.Do(func() {
		if fips140.Enabled() {
			copy(id.pub[:], id.signKey().Public().(ed25519.PublicKey))
			return
		}
		id.pub = publicFromSeed(&id.seed)
	})
	return id.pub
}

// signKey is the standard library's Ed25519 private key, derived once.
func (id *Identity) signKey() ed25519.PrivateKey {
	id.signOnce.Do(func() { id.sign = ed25519.NewKeyFromSeed(id.seed[:]) })
	return id.sign
}

// GenerateIdentity makes a new identity from rand (crypto/rand when nil).
func GenerateIdentity(rand io.Reader) (*Identity, error) {
	if rand == nil {
		rand = cryptorand.Reader
	}
	var seed [64]byte
	if _, err := io.ReadFull(rand, seed[:]); err != nil {
		return nil, fmt.Errorf("generate identity: %w", err)
	}
	return identityFromSeed(seed[:32], seed[32:])
}

func identityFromSeed(signSeed, boxPriv []byte) (*Identity, error) {
	if len(signSeed) != ed25519.SeedSize {
		return nil, fmt.Errorf("derive signing key: %w: seed of %d bytes", ErrMalformed, len(signSeed))
	}
	id := &Identity{}
	copy(id.seed[:], signSeed)
	copy(id.box[:], boxPriv)
	pub, err := curve25519.X25519(id.box[:], curve25519.Basepoint)
	if err != nil {
		return nil, fmt.Errorf("derive encryption key: %w", err)
	}
	copy(id.boxPub[:], pub)
	return id, nil
}

// MarshalText returns the private file form (SPEC §2.5): one line,
// "bridge-secret-v1:" and the unpadded base64url of the 32-byte Ed25519 seed
// followed by the 32-byte X25519 private key. Store it with mode 0600.
func (id *Identity) MarshalText() ([]byte, error) {
	raw := append(append([]byte{}, id.seed[:]...), id.box[:]...)
	return []byte(secretPrefix + base64.RawURLEncoding.EncodeToString(raw) + "\n"), nil
}

// ParseIdentity reads the private file form written by MarshalText.
func ParseIdentity(text []byte) (*Identity, error) {
	s := string(text)
	if !strings.HasPrefix(s, secretPrefix) || !strings.HasSuffix(s, "\n") || strings.Count(s, "\n") != 1 {
		return nil, fmt.Errorf("parse identity: %w: not a bridge-secret-v1 line", ErrMalformed)
	}
	enc := strings.TrimSuffix(strings.TrimPrefix(s, secretPrefix), "\n")
	// The decoder skips CR and LF even in strict mode; one form only.
	if strings.ContainsAny(enc, "\r\n") {
		return nil, fmt.Errorf("parse identity: %w: line breaks inside the key", ErrMalformed)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(enc)
	if err != nil || len(raw) != 64 {
		return nil, fmt.Errorf("parse identity: %w: bad key encoding", ErrMalformed)
	}
	return identityFromSeed(raw[:32], raw[32:])
}

// SignPublic is the Ed25519 public key.
func (id *Identity) SignPublic() []byte {
	pub := id.signPublic()
	return append([]byte{}, pub[:]...)
}

// BoxPublic is the X25519 public key.
func (id *Identity) BoxPublic() []byte { return append([]byte{}, id.boxPub[:]...) }

// SignKid is the key id of the signing key.
func (id *Identity) SignKid() string { return Kid(AlgEd25519, id.SignPublic()) }

// BoxKid is the key id of the encryption key.
func (id *Identity) BoxKid() string { return Kid(AlgX25519, id.boxPub[:]) }

// CheckBoxKey refuses an X25519 public key of the wrong length or of low order.
// A low-order key makes every shared secret a fixed public value; NaCl box's
// Precompute would accept it silently.
func CheckBoxKey(pub []byte) error {
	if len(pub) != 32 {
		return fmt.Errorf("%w: encryption key of %d bytes, want 32", ErrBadKey, len(pub))
	}
	var k [32]byte
	copy(k[:], pub)
	goodBoxKeys.Lock()
	_, known := goodBoxKeys.m[k]
	goodBoxKeys.Unlock()
	if known {
		return nil
	}
	// Any scalar does: X25519 fails exactly when the result is all zeros, which
	// happens for every scalar iff the point has low order.
	if _, err := curve25519.X25519(lowOrderProbe[:], k[:]); err != nil { // the copy: what is checked is what is kept
		return fmt.Errorf("%w: encryption key has low order", ErrBadKey)
	}
	goodBoxKeys.Lock()
	if len(goodBoxKeys.m) >= 256 {
		clear(goodBoxKeys.m)
	}
	goodBoxKeys.m[k] = struct{}{}
	goodBoxKeys.Unlock()
	return nil
}

// goodBoxKeys are keys CheckBoxKey passed: the answer is the key's alone,
// and a peer's key is checked as it is read and again at every seal to it
// (a scalar multiplication each, a third of a seal's). Bounded: a process
// deals with a few peers' keys.
var goodBoxKeys = struct {
	sync.Mutex
	m map[[32]byte]struct{}
}{m: map[[32]byte]struct{}{}}

var lowOrderProbe = [32]byte{9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}

// CheckSignKey refuses an Ed25519 public key of the wrong length.
func CheckSignKey(pub []byte) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: signing key of %d bytes, want 32", ErrBadKey, len(pub))
	}
	return nil
}

// Bundle is a party's public identity (SPEC §2.6): both public keys, bound by
// a signature of the signing key over the whole body.
type Bundle struct {
	V       int    `json:"v"`
	Role    string `json:"role"` // "host" or "agent"
	Name    string `json:"name"` // the name the party suggests for itself
	ID      string `json:"id"`   // stable party id: the signing kid of its first key
	Seq     uint64 `json:"seq"`  // key generation: 0 first, raised by each rotation
	SignPub []byte `json:"sign_pub"`
	BoxPub  []byte `json:"box_pub"`
	Created int64  `json:"created"` // unix seconds, the signer's clock (informational)
}

func (b *Bundle) check() error {
	switch {
	case b.V != 1:
		return fmt.Errorf("bundle: %w: v=%d", ErrUnknownVersion, b.V)
	case b.Role != "host" && b.Role != "agent":
		return fmt.Errorf("bundle: %w: role %q", ErrMalformed, b.Role)
	case !ValidName(b.Name):
		return fmt.Errorf("bundle: %w: name %q", ErrMalformed, b.Name)
	case !ValidKid(b.ID):
		return fmt.Errorf("bundle: %w: id %q", ErrMalformed, b.ID)
	}
	if err := CheckSignKey(b.SignPub); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := CheckBoxKey(b.BoxPub); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if b.Seq == 0 && b.ID != Kid(AlgEd25519, b.SignPub) {
		return fmt.Errorf("bundle: %w: id of a first-generation key must be its kid", ErrMalformed)
	}
	return nil
}

// SignBundle fills in id's public keys and returns the signed bundle file.
func (id *Identity) SignBundle(b Bundle) ([]byte, error) {
	b.V = 1
	b.SignPub = id.SignPublic()
	b.BoxPub = id.BoxPublic()
	if err := b.check(); err != nil {
		return nil, err
	}
	body, err := EncodeBody(b)
	if err != nil {
		return nil, err
	}
	return Sign(KindBundle, body, id)
}

// ParseBundle verifies a signed bundle file and returns its contents. The
// signature is checked before the body is decoded, under the key the body
// names; that is a self-signature, so it proves possession and binding, not
// identity: identity comes from the user comparing fingerprints.
func ParseBundle(data []byte) (*Bundle, error) {
	env, err := Parse(KindBundle, data)
	if err != nil {
		return nil, err
	}
	var b Bundle
	if err := DecodeBody(env.Body(), &b); err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if err := b.check(); err != nil {
		return nil, err
	}
	if err := env.Verify(0, b.SignPub); err != nil {
		return nil, err
	}
	return &b, nil
}

// BundleText returns the one-line text form of a signed bundle file.
func BundleText(signed []byte) string {
	return bundleTextPrefix + base64.RawURLEncoding.EncodeToString(signed)
}

// ParseBundleText reads the one-line form (surrounding white space ignored) and
// returns the verified bundle and the signed file bytes.
func ParseBundleText(s string) (*Bundle, []byte, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, bundleTextPrefix) {
		return nil, nil, fmt.Errorf("bundle text: %w: does not start with %q", ErrMalformed, bundleTextPrefix)
	}
	if strings.ContainsAny(s, "\r\n") {
		return nil, nil, fmt.Errorf("bundle text: %w: line breaks inside the line", ErrMalformed)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s[len(bundleTextPrefix):])
	if err != nil {
		return nil, nil, fmt.Errorf("bundle text: %w: %v", ErrMalformed, err)
	}
	if int64(len(raw)) > KindBundle.MaxSize() {
		return nil, nil, fmt.Errorf("bundle text: %w", ErrTooLarge)
	}
	b, err := ParseBundle(raw)
	if err != nil {
		return nil, nil, err
	}
	return b, raw, nil
}

// fingerprintBytes is how much of the hash a fingerprint shows: 120 bits.
// Matching one is a second preimage, but a folder writer may work against
// every bundle it can see at once: 2^120 / T for T targets stays far out of
// reach for any T, where 80 bits fell to 2^60 SHA-256 (GPU-years) against
// a million (DESIGN §2).
const fingerprintBytes = 15

// Fingerprint is the short form users compare when pairing: 120 bits of
// SHA-256(label ‖ role ‖ 0x00 ‖ id ‖ 0x00 ‖ sign_pub ‖ box_pub) in lower-case
// base32, as six groups of four characters. It covers the party id and role
// as well as the keys, so a bundle claiming someone else's id never shows
// that someone's fingerprint.
func (b *Bundle) Fingerprint() string { return Fingerprint(b.Role, b.ID, b.SignPub, b.BoxPub) }

// Fingerprint of a party's role, id and public keys; see [Bundle.Fingerprint].
func Fingerprint(role, id string, signPub, boxPub []byte) string {
	h := sha256.New()
	h.Write([]byte(labelFingerprint))
	h.Write([]byte(role))
	h.Write([]byte{0})
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write(signPub)
	h.Write(boxPub)
	s := strings.ToLower(base32.StdEncoding.EncodeToString(h.Sum(nil)[:fingerprintBytes]))
	groups := make([]string, 0, len(s)/4)
	for i := 0; i < len(s); i += 4 {
		groups = append(groups, s[i:i+4])
	}
	return strings.Join(groups, "-")
}

// SignKid is the kid of the bundle's signing key.
func (b *Bundle) SignKid() string { return Kid(AlgEd25519, b.SignPub) }

// BoxKid is the kid of the bundle's encryption key.
func (b *Bundle) BoxKid() string { return Kid(AlgX25519, b.BoxPub) }

// Equal reports whether two bundles carry the same keys.
func (b *Bundle) Equal(o *Bundle) bool {
	return bytes.Equal(b.SignPub, o.SignPub) && bytes.Equal(b.BoxPub, o.BoxPub)
}
