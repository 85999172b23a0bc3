package crypto

import (
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
)

// Kind is one kind of signed file: its magic, its domain-separation label, the
// cap on its body and how many signatures follow the body (SPEC §3).
type Kind struct {
	name  string
	magic string // three letters and a version digit
	label string // signed before everything else; ends in NUL so no label is a prefix of another
	max   int    // largest body accepted
	sigs  int    // signatures after the body
}

// The kinds of signed files. Labels are part of the wire format: changing one
// breaks every signature made with it.
var (
	KindBundle   = Kind{"bundle", "BRB1", "bridge/v1/bundle\x00", 4 << 10, 1}
	KindRequest  = Kind{"request", "BRQ1", "bridge/v1/request\x00", 16 << 10, 1}
	KindResult   = Kind{"result", "BRR1", "bridge/v1/result\x00", 16 << 10, 1}
	KindRotation = Kind{"rotation", "BRK1", "bridge/v1/rotate\x00", 4 << 10, 2}
	KindCancel   = Kind{"cancel", "BRC1", "bridge/v1/cancel\x00", 4 << 10, 1}
	KindAck      = Kind{"ack", "BRA1", "bridge/v1/ack\x00", 4 << 10, 1}
	KindCatalog  = Kind{"catalog", "BRO1", "bridge/v1/catalog\x00", 256 << 10, 1}
	KindMessage  = Kind{"message", "BRM1", "bridge/v1/message\x00", 96 << 10, 1}
	KindProgress = Kind{"progress", "BRP1", "bridge/v1/progress\x00", 96 << 10, 1}
	KindLiveness = Kind{"liveness", "BRL1", "bridge/v1/liveness\x00", 4 << 10, 1}
)

const (
	headerSize = 8 // magic (4) ‖ body length (u32 big-endian)
	sigSize    = ed25519.SignatureSize
)

func (k Kind) String() string { return k.name }

// MaxSize is the largest file of this kind that can be valid. Readers check it
// against the file size before reading a byte.
func (k Kind) MaxSize() int64 { return int64(headerSize + k.max + k.sigs*sigSize) }

// Envelope is a parsed, not yet verified, signed file.
type Envelope struct {
	kind Kind
	raw  []byte // the whole file
	n    int    // body length
}

// Parse checks the structure of a signed file of kind k: magic, declared body
// length against the cap, and exact total length. It verifies nothing; call
// [Envelope.Verify] before trusting [Envelope.Body].
func Parse(k Kind, data []byte) (*Envelope, error) {
	if len(data) >= 4 && string(data[:3]) == k.magic[:3] && data[3] != k.magic[3] {
		return nil, fmt.Errorf("%s: %w: magic %q", k.name, ErrUnknownVersion, data[:4])
	}
	if len(data) < headerSize {
		if len(data) > 0 && !matchesPrefix(data, k.magic) {
			return nil, fmt.Errorf("%s: %w: bad magic", k.name, ErrMalformed)
		}
		return nil, fmt.Errorf("%s: %w: %d bytes, header needs %d", k.name, ErrTruncated, len(data), headerSize)
	}
	if string(data[:4]) != k.magic {
		return nil, fmt.Errorf("%s: %w: bad magic", k.name, ErrMalformed)
	}
	n := binary.BigEndian.Uint32(data[4:8])
	if n > uint32(k.max) {
		return nil, fmt.Errorf("%s: %w: body of %d bytes, cap %d", k.name, ErrTooLarge, n, k.max)
	}
	total := headerSize + int(n) + k.sigs*sigSize
	switch {
	case len(data) < total:
		return nil, fmt.Errorf("%s: %w: %d of %d bytes", k.name, ErrTruncated, len(data), total)
	case len(data) > total:
		return nil, fmt.Errorf("%s: %w: %d trailing bytes", k.name, ErrMalformed, len(data)-total)
	}
	return &Envelope{kind: k, raw: data, n: int(n)}, nil
}

func matchesPrefix(data []byte, magic string) bool {
	for i := 0; i < len(data) && i < len(magic); i++ {
		if data[i] != magic[i] {
			return false
		}
	}
	return true
}

// Body returns the signed body. It is only meaningful after Verify succeeded.
func (e *Envelope) Body() []byte { return e.raw[headerSize : headerSize+e.n] }

// Bytes returns the whole file.
func (e *Envelope) Bytes() []byte { return e.raw }

// Verify checks signature i (0-based) under the Ed25519 public key pub.
func (e *Envelope) Verify(i int, pub []byte) error {
	if len(pub) != ed25519.PublicKeySize {
		// ed25519.Verify panics on a key of the wrong length.
		return fmt.Errorf("%s: %w: signing key of %d bytes", e.kind.name, ErrBadKey, len(pub))
	}
	if i < 0 || i >= e.kind.sigs {
		panic("bridge: internal error: signature index out of range")
	}
	off := headerSize + e.n + i*sigSize
	if !ed25519.Verify(ed25519.PublicKey(pub), signedMessage(e.kind, e.raw[:headerSize+e.n]), e.raw[off:off+sigSize]) {
		return fmt.Errorf("%s: %w", e.kind.name, ErrBadSignature)
	}
	return nil
}

// signedMessage is what every signature covers: label ‖ magic ‖ length ‖ body.
func signedMessage(k Kind, headerAndBody []byte) []byte {
	m := make([]byte, 0, len(k.label)+len(headerAndBody))
	m = append(m, k.label...)
	return append(m, headerAndBody...)
}

// Sign builds a signed file of kind k around body, signed by each signer in
// order. Kinds with two signatures (rotation) take the old key, then the new.
func Sign(k Kind, body []byte, signers ...*Identity) ([]byte, error) {
	if len(signers) != k.sigs {
		return nil, fmt.Errorf("sign %s: %d signers, want %d", k.name, len(signers), k.sigs)
	}
	if len(body) > k.max {
		return nil, fmt.Errorf("sign %s: %w: body of %d bytes, cap %d", k.name, ErrTooLarge, len(body), k.max)
	}
	out := make([]byte, headerSize, headerSize+len(body)+k.sigs*sigSize)
	copy(out, k.magic)
	binary.BigEndian.PutUint32(out[4:8], uint32(len(body)))
	out = append(out, body...)
	msg := signedMessage(k, out)
	for _, s := range signers {
		out = append(out, s.signMessage(msg)...)
	}
	return out, nil
}
