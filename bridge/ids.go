package bridge

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

const labelIdempotency = "bridge/v1/idempotency\x00"

// An agent's idempotency secret (SPEC §2.7) keys the derivation of keyed
// request ids. It is not a signing or box key, so a rotation leaves it alone
// and ids stay stable across rotations; it never leaves the agent's home.
const (
	IdempotencySecretName = "idempotency.secret"
	idempotencyPrefix     = "bridge-idempotency-v1:"
	IdempotencySecretSize = 32
)

// NewRequestID returns a random 128-bit request id.
func NewRequestID() string {
	var b [16]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		panic("bridge: internal error: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// KeyedID derives the request id from an idempotency key (SPEC §7.2):
// the same agent asking the same host for the same op with the same arguments
// under the same key gets the same id, so a retry is answered from the host's
// ledger instead of running again. It is an HMAC under the agent's secret,
// not a hash of the inputs alone: the op names and argument values are in the
// catalog a folder writer can read, and a plain hash of them with a guessable
// key would give the sealed call away.
func KeyedID(secret []byte, agent, host, op string, args map[string]string, key string) string {
	if len(secret) != IdempotencySecretSize {
		panic("bridge: internal error: idempotency secret of " + strconv.Itoa(len(secret)) + " bytes")
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(labelIdempotency))
	u32 := func(n int) {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(n))
		m.Write(b[:])
	}
	field := func(s string) {
		u32(len(s))
		m.Write([]byte(s))
	}
	field(agent)
	field(host)
	field(op)
	u32(len(args))
	for _, k := range slices.Sorted(maps.Keys(args)) {
		field(k)
		field(args[k])
	}
	field(key)
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// MarshalIdempotencySecret is the one text form of the secret file.
func MarshalIdempotencySecret(secret []byte) []byte {
	return []byte(idempotencyPrefix + base64.RawURLEncoding.EncodeToString(secret) + "\n")
}

// ParseIdempotencySecret reads the secret file strictly, like an identity
// file (SPEC §2.5): one line, one encoding, exactly 32 bytes.
func ParseIdempotencySecret(text []byte) ([]byte, error) {
	s := string(text)
	if !strings.HasPrefix(s, idempotencyPrefix) || !strings.HasSuffix(s, "\n") || strings.Count(s, "\n") != 1 {
		return nil, fmt.Errorf("parse idempotency secret: %w: not a bridge-idempotency-v1 line", bcrypto.ErrMalformed)
	}
	enc := strings.TrimSuffix(strings.TrimPrefix(s, idempotencyPrefix), "\n")
	// The decoder skips CR even in strict mode; one form only.
	if strings.ContainsAny(enc, "\r") {
		return nil, fmt.Errorf("parse idempotency secret: %w: line break inside the secret", bcrypto.ErrMalformed)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(enc)
	if err != nil || len(raw) != IdempotencySecretSize {
		return nil, fmt.Errorf("parse idempotency secret: %w: bad encoding", bcrypto.ErrMalformed)
	}
	return raw, nil
}

// Reason turns an error from this package or crypto into the short code used
// in audit lines, rejected results and test vectors (SPEC §12).
func Reason(err error) ReasonCode {
	if err == nil {
		return "ok"
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.code
		}
	}
	return "error"
}

var reasons = []struct {
	err  error
	code ReasonCode
}{
	{ErrWrongRecipient, "wrong-recipient"},
	{ErrExpired, "expired"},
	{ErrNotYetValid, "not-yet-valid"},
	{ErrNameMismatch, "name-mismatch"},
	{ErrPending, "pending"},
	{ErrHashMismatch, "hash-mismatch"},
	{ErrWrongRequest, "wrong-request"},
	{ErrNotAllowed, "not-allowed"},
	{ErrReplay, "replay"},
	{ErrTooLarge, "too-large"},
	{ErrKeyRevoked, "revoked"},
	{ErrKeyExpired, "key-expired"},
	{syncsafe.ErrTooLarge, "too-large"},
	{syncsafe.ErrNotRegular, "not-regular"},
	{syncsafe.ErrUnsettled, "pending"},
	{bcrypto.ErrBadSignature, "bad-signature"},
	{bcrypto.ErrUnknownKey, "unknown-key"},
	{bcrypto.ErrTruncated, "truncated"},
	{bcrypto.ErrTooLarge, "too-large"},
	{bcrypto.ErrUnknownVersion, "unknown-version"},
	{bcrypto.ErrBadKey, "bad-key"},
	{bcrypto.ErrUnauthenticated, "unauthenticated"},
	{bcrypto.ErrMalformed, "malformed"},
}
