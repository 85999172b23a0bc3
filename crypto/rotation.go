package crypto

import (
	"fmt"
)

// Rotation is a rotation statement (SPEC §11): a party replaces its keys. It
// is signed by the old signing key (continuity: only the holder of the old key
// can name a successor) and by the new one (proof of possession).
type Rotation struct {
	V             int    `json:"v"`
	Role          string `json:"role"`
	ID            string `json:"id"`  // the stable party id
	Seq           uint64 `json:"seq"` // generation of the new key; higher than any before
	OldSignKid    string `json:"old_sign_kid"`
	NewSignPub    []byte `json:"new_sign_pub"`
	NewBoxPub     []byte `json:"new_box_pub"`
	Created       int64  `json:"created"`
	OldValidUntil int64  `json:"old_valid_until"` // end of the overlap, unix seconds
}

func (r *Rotation) check() error {
	switch {
	case r.V != 1:
		return fmt.Errorf("rotation: %w: v=%d", ErrUnknownVersion, r.V)
	case r.Role != "host" && r.Role != "agent":
		return fmt.Errorf("rotation: %w: role %q", ErrMalformed, r.Role)
	case !ValidKid(r.ID), !ValidKid(r.OldSignKid):
		return fmt.Errorf("rotation: %w: bad id or kid", ErrMalformed)
	case r.Seq == 0:
		return fmt.Errorf("rotation: %w: seq 0 is the first key, never a rotation", ErrMalformed)
	case r.Created <= 0:
		// 0 would also let old_valid_until be 0, which readers take for a
		// key with no end.
		return fmt.Errorf("rotation: %w: created %d", ErrMalformed, r.Created)
	case r.OldValidUntil < r.Created:
		return fmt.Errorf("rotation: %w: overlap ends before it starts", ErrMalformed)
	}
	if err := CheckSignKey(r.NewSignPub); err != nil {
		return fmt.Errorf("rotation: %w", err)
	}
	if err := CheckBoxKey(r.NewBoxPub); err != nil {
		return fmt.Errorf("rotation: %w", err)
	}
	if Kid(AlgEd25519, r.NewSignPub) == r.OldSignKid {
		return fmt.Errorf("rotation: %w: new key equals the old one", ErrMalformed)
	}
	return nil
}

// SignRotation states that old is replaced by next. The fields OldSignKid,
// NewSignPub and NewBoxPub are filled in from the identities.
func SignRotation(old, next *Identity, r Rotation) ([]byte, error) {
	r.V = 1
	r.OldSignKid = old.SignKid()
	r.NewSignPub = next.SignPublic()
	r.NewBoxPub = next.BoxPublic()
	if err := r.check(); err != nil {
		return nil, err
	}
	body, err := EncodeBody(r)
	if err != nil {
		return nil, err
	}
	return Sign(KindRotation, body, old, next)
}

// ParseRotation verifies a rotation statement against the old signing key the
// caller already trusts, then decodes it and verifies the new key's signature.
// Whether the sequence number moves forward, and whether the old key is
// revoked, is the caller's decision.
func ParseRotation(data []byte, oldSignPub []byte) (*Rotation, error) {
	env, err := Parse(KindRotation, data)
	if err != nil {
		return nil, err
	}
	if err := env.Verify(0, oldSignPub); err != nil {
		return nil, fmt.Errorf("rotation: old key: %w", err)
	}
	var r Rotation
	if err := DecodeBody(env.Body(), &r); err != nil {
		return nil, fmt.Errorf("rotation: %w", err)
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	if r.OldSignKid != Kid(AlgEd25519, oldSignPub) {
		return nil, fmt.Errorf("rotation: %w: names another old key", ErrUnknownKey)
	}
	if err := env.Verify(1, r.NewSignPub); err != nil {
		return nil, fmt.Errorf("rotation: new key: %w", err)
	}
	return &r, nil
}
