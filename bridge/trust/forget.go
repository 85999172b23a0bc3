package trust

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// RevokedName is the home file that keeps the keys revoked here after
// their peer was removed: a removed peer's revocations outlive it, so its
// stolen key can never be trusted again, by pairing or by rotation.
const RevokedName = "revoked.json"

// RevokedKey is one key that stays revoked for ever.
type RevokedKey struct {
	Kid     string `json:"kid"`
	Peer    string `json:"peer"` // the removed peer's local name and id, for people
	ID      string `json:"id"`
	Removed int64  `json:"removed"`
}

type revokedFile struct {
	V    int          `json:"v"`
	Keys []RevokedKey `json:"keys"`
}

// RevokedForever lists the keys of removed peers that stay revoked.
func (h *Home) RevokedForever() ([]RevokedKey, error) {
	data, err := os.ReadFile(h.Path(RevokedName))
	if errors.Is(err, fs.ErrNotExist) {
		return []RevokedKey{}, nil
	} else if err != nil {
		return nil, err
	}
	var f revokedFile
	if err := json.Unmarshal(data, &f); err != nil || f.V != 1 {
		return nil, bridge.WithHint(fmt.Errorf("read %s: not a list of revoked keys (%v)", h.Path(RevokedName), err),
			"restore it from a backup: without it, keys of removed peers that were revoked could be trusted again")
	}
	return f.Keys, nil
}

// revokedForever returns the removed peer a kid was revoked with, if any.
func (h *Home) revokedForever(kids ...string) (*RevokedKey, error) {
	keys, err := h.RevokedForever()
	if err != nil {
		return nil, err
	}
	for i, k := range keys {
		if slices.Contains(kids, k.Kid) {
			return &keys[i], nil
		}
	}
	return nil, nil
}

// Remove forgets a trusted peer, found by name or id. Its revoked keys are
// kept in RevokedName first, so removing a peer never lifts a revocation.
// A peer with keys that are not revoked can be trusted again later.
func (h *Home) Remove(nameOrID string) (*Peer, error) {
	peers, err := h.Peers()
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(peers, func(p Peer) bool { return p.ID == nameOrID })
	if i < 0 {
		i = slices.IndexFunc(peers, func(p Peer) bool { return p.Name == nameOrID })
	}
	if i < 0 {
		return nil, bridge.WithHint(fmt.Errorf("keys remove: %w: %q", ErrUnknownPeer, nameOrID), "`bridge keys show` lists the trusted peers")
	}
	p := peers[i]
	if len(p.Revoked) > 0 {
		keys, err := h.RevokedForever()
		if err != nil {
			return nil, err
		}
		for _, kid := range p.Revoked {
			if !slices.ContainsFunc(keys, func(k RevokedKey) bool { return k.Kid == kid }) {
				keys = append(keys, RevokedKey{Kid: kid, Peer: p.Name, ID: p.ID, Removed: time.Now().Unix()})
			}
		}
		data, _ := json.MarshalIndent(revokedFile{V: 1, Keys: keys}, "", "  ")
		if err := syncsafe.WriteFileAtomic(h.Path(RevokedName), append(data, '\n')); err != nil {
			return nil, fmt.Errorf("keys remove: keep the revocations: %w", err)
		}
	}
	if err := os.Remove(h.Path(PeersDir, p.ID+".json")); err != nil {
		return nil, fmt.Errorf("keys remove: %w", err)
	}
	if h.peers != nil {
		h.peers.mu.Lock()
		delete(h.peers.m, p.ID+".json")
		h.peers.mu.Unlock()
	}
	return &p, nil
}

// refuseRevokedForever is the error for a bundle or rotation that names a
// key revoked with a removed peer.
func refuseRevokedForever(what string, k *RevokedKey) error {
	return bridge.WithHint(fmt.Errorf("%s: %w: key %s was revoked here with %q (%s), which was removed; a revoked key is never trusted again",
		what, bridge.ErrKeyRevoked, k.Kid, k.Peer, k.ID),
		"if the peer is really yours, give it new keys (`bridge keys rotate` on its side, or `bridge init` in a fresh home) and pair with those, comparing fingerprints")
}

// keptRevoked reports whether a key pair a rotation introduces was revoked
// with a removed peer (or the list cannot be read: then nothing new is
// taken).
func (h *Home) keptRevoked(signPub, boxPub []byte) bool {
	k, err := h.revokedForever(bcrypto.Kid(bcrypto.AlgEd25519, signPub), bcrypto.Kid(bcrypto.AlgX25519, boxPub))
	return err != nil || k != nil
}
