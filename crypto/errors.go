package crypto

import "errors"

// Sentinel errors. Callers branch on these with errors.Is; the wrapped message
// says what exactly was wrong.
var (
	// ErrBadSignature: the signature does not verify under the key it names.
	ErrBadSignature = errors.New("bad signature")
	// ErrUnknownKey: the signer's key is not one the caller trusts.
	ErrUnknownKey = errors.New("unknown key")
	// ErrTruncated: the input ends before the structure it announces, or a
	// payload stream ends without its final chunk.
	ErrTruncated = errors.New("truncated")
	// ErrTooLarge: a declared or actual size is over the cap for its kind.
	ErrTooLarge = errors.New("too large")
	// ErrMalformed: bytes that are not the one canonical encoding: unknown
	// fields, trailing bytes, bad magic, non-canonical JSON or base64.
	ErrMalformed = errors.New("malformed")
	// ErrUnknownVersion: a format version this build does not speak.
	ErrUnknownVersion = errors.New("unknown version")
	// ErrBadKey: a key of the wrong length, or an X25519 key of low order.
	ErrBadKey = errors.New("bad key")
	// ErrUnauthenticated: a payload chunk or wrapped key failed to open.
	ErrUnauthenticated = errors.New("unauthenticated")
)
