package bridge

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"slices"

	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

const labelIdempotency = "bridge/v1/idempotency\x00"

// NewRequestID returns a random 128-bit request id.
func NewRequestID() string {
	var b [16]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		panic("bridge: internal error: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// KeyedRequestID derives the request id from an idempotency key (SPEC §7.2):
// the same agent asking the same host for the same op with the same arguments
// under the same key gets the same id, so a retry is answered from the host's
// ledger instead of running again.
func KeyedRequestID(agent, host, op string, args map[string]string, key string) string {
	h := sha256.New()
	h.Write([]byte(labelIdempotency))
	field := func(s string) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(agent)
	field(host)
	field(op)
	for _, k := range slices.Sorted(maps.Keys(args)) {
		field(k)
		field(args[k])
	}
	field(key)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Reason turns an error from this package or crypto into the short code used
// in audit lines, rejected results and test vectors (SPEC §12).
func Reason(err error) string {
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
	code string
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
