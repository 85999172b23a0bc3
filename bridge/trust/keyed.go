package trust

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/syncsafe"
)

// KeyedRequestID is the id of a keyed request this home's agent sends to
// host (SPEC §7.2). A home from before the idempotency secret existed gets
// one on its first keyed request.
func (h *Home) KeyedRequestID(host, op string, args map[string]string, key string) (string, error) {
	secret, err := h.idempotencySecret()
	if err != nil {
		return "", err
	}
	return bridge.KeyedID(secret, h.Config.ID, host, op, args, key), nil
}

// idempotencySecret reads the home's idempotency secret, creating it if the
// home has none. A file that is there but damaged is an error, never
// replaced: a new secret would give every keyed request a new id, and a
// retry of one sent before would run again.
func (h *Home) idempotencySecret() ([]byte, error) {
	p := h.Path(bridge.IdempotencySecretName)
	text, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		fresh := make([]byte, bridge.IdempotencySecretSize)
		if _, err := io.ReadFull(rand.Reader, fresh); err != nil {
			panic("bridge: internal error: no randomness: " + err.Error())
		}
		err = syncsafe.CreateFileAtomic(p, bridge.MarshalIdempotencySecret(fresh))
		if err == nil {
			return fresh, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("create idempotency secret: %w", err)
		}
		// Another command of this home created it first: use that one.
		text, err = os.ReadFile(p)
	}
	if err != nil {
		return nil, fmt.Errorf("read idempotency secret: %w", err)
	}
	secret, err := bridge.ParseIdempotencySecret(text)
	if err != nil {
		return nil, bridge.WithHint(fmt.Errorf("read %s: %w", p, err),
			"restore it from a backup of this home (docs/KEYS.md); a new secret would give keyed requests new ids, and a retry of an earlier one could run again")
	}
	return secret, nil
}
