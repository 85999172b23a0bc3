package trust

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// ExportAgentSecret returns the agent secret of an agent home: its current
// keys, its idempotency secret, and the current key of every host it trusts
// that it has not revoked.
func (h *Home) ExportAgentSecret() (string, error) {
	if h.Config.Role != "agent" {
		return "", bridge.WithHint(errors.New("export-secret: this home belongs to a host"), "a host's keys never leave its home; run it with an agent's --home")
	}
	idem, err := h.idempotencySecret()
	if err != nil {
		return "", err
	}
	s := bridge.AgentSecret{ID: h.Config.ID, Seq: h.bundle.Seq, Name: h.bundle.Name, Identity: h.id, Idempotency: idem}
	peers, err := h.Peers()
	if err != nil {
		return "", err
	}
	for _, p := range peers {
		if p.Role != "host" {
			continue
		}
		if p.bad != nil {
			return "", p.bad
		}
		k, ok := p.Current()
		if !ok {
			continue // every key revoked: the restored home does not trust it either
		}
		s.Hosts = append(s.Hosts, bridge.SecretHost{ID: p.ID, Name: p.Name, Seq: k.Seq, SignPub: k.SignPub, BoxPub: k.BoxPub})
	}
	return s.MarshalText()
}

// RestoreAgentHome builds an agent home in dir from an agent secret and the
// folder: the same party, trusting the same hosts, with no pairing. Each
// host's trust is rebuilt from the host's bundle and rotation statements in
// the folder, accepted only if they continue the chain from the key the
// secret pins. What the agent sent is found again in the folder when asked
// for (agent.Client reads its own signed manifests).
func RestoreAgentHome(dir, folder, secret string) (*Home, error) {
	s, err := bridge.ParseAgentSecret(secret)
	if err != nil {
		return nil, bridge.WithHint(err, "pass the whole line `bridge keys export-secret` printed")
	}
	absDir, absFolder, err := newHomePaths("restore", dir, folder)
	if err != nil {
		return nil, err
	}
	f, err := syncsafe.OpenFolder(absFolder)
	if err != nil {
		return nil, bridge.WithHint(err, "is the synced folder %s mounted and shared?", absFolder)
	}
	defer f.Close()
	if err := syncsafe.CheckMarker(f); err != nil {
		return nil, bridge.WithHint(fmt.Errorf("restore agent: %w", err), "wait until the sync client has copied the folder (%s)", syncsafe.MarkerName)
	}
	// Trust first, in memory: nothing is written unless every host checks.
	var peers []*Peer
	for _, hs := range s.Hosts {
		p, err := restoreHost(f, hs)
		if err != nil {
			return nil, err
		}
		peers = append(peers, p)
	}
	if err := os.MkdirAll(absDir, 0o700); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if err := checkOwnHome("restore", absDir); err != nil {
		return nil, err
	}
	os.Chmod(absDir, 0o700)
	h := &Home{Dir: absDir, id: s.Identity, peers: &peerCache{}}
	signed := ownBundleInFolder(f, s)
	if signed == nil {
		// Not in the folder (no host trusted yet, or not synced): the same
		// keys, signed again. Only its created time differs.
		if signed, err = s.Identity.SignBundle(bcrypto.Bundle{Role: "agent", Name: s.Name, ID: s.ID, Seq: s.Seq, Created: time.Now().Unix()}); err != nil {
			return nil, err
		}
	}
	if h.bundle, err = bcrypto.ParseBundle(signed); err != nil {
		return nil, err
	}
	h.Config = Config{V: 1, Role: "agent", Name: s.Name, ID: s.ID, Folder: absFolder, Created: h.bundle.Created}
	text, _ := s.Identity.MarshalText()
	writes := []struct {
		name string
		data []byte
	}{{IdentityName, text}, {bridge.IdempotencySecretName, bridge.MarshalIdempotencySecret(s.Idempotency)}, {BundleName, signed}}
	for _, w := range writes {
		if err := syncsafe.WriteFileAtomic(filepath.Join(absDir, w.name), w.data); err != nil {
			return nil, err
		}
	}
	for _, p := range peers {
		if err := h.savePeer(p); err != nil {
			return nil, err
		}
	}
	cfg, _ := json.MarshalIndent(h.Config, "", "  ")
	if err := syncsafe.WriteFileAtomic(filepath.Join(absDir, configName), append(cfg, '\n')); err != nil {
		return nil, err
	}
	for _, p := range peers {
		if err := h.trustDirs(p.ID); err != nil {
			return h, err
		}
	}
	return h, nil
}

// restoreHost rebuilds the trust record of one pinned host from its tree:
// the rotation statements from the pinned key on, then its bundle, which
// must be one of the generations of that chain.
func restoreHost(f *syncsafe.Folder, hs bridge.SecretHost) (*Peer, error) {
	p := &Peer{V: 1, Name: hs.Name, Role: "host", ID: hs.ID, Trusted: time.Now().Unix(),
		Keys: []PeerKey{{Seq: hs.Seq, SignPub: hs.SignPub, BoxPub: hs.BoxPub}}}
	entries, err := f.ListFunc(bridge.HostDir(hs.ID), func(name string) bool { _, ok := bridge.ParseRotationName(name); return ok })
	if errors.Is(err, fs.ErrNotExist) {
		return nil, bridge.WithHint(fmt.Errorf("restore: host %s (%s) is not in the folder", hs.Name, hs.ID), "wait until the sync client has copied the folder, or check it is the right folder")
	} else if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range entries {
		if seq, ok := bridge.ParseRotationName(e.Name); ok && e.Type == 0 && seq > hs.Seq {
			seqs = append(seqs, seq)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, seq := range seqs {
		cur := p.Keys[len(p.Keys)-1]
		data, err := f.ReadFile(bridge.HostDir(hs.ID)+"/"+bridge.RotationName(seq), bcrypto.KindRotation.MaxSize())
		if err != nil {
			break
		}
		r, err := bcrypto.ParseRotation(data, cur.SignPub)
		if err != nil || r.ID != hs.ID || r.Role != "host" || r.Seq != seq || seq <= cur.Seq {
			continue // not a continuation of the chain: ignored, as FollowRotations does
		}
		p.Keys[len(p.Keys)-1].ValidUntil = r.OldValidUntil
		p.Keys = append(p.Keys, PeerKey{Seq: r.Seq, SignPub: r.NewSignPub, BoxPub: r.NewBoxPub})
	}
	data, err := f.ReadFile(bridge.HostBundlePath(hs.ID), bcrypto.KindBundle.MaxSize())
	if err != nil {
		return nil, bridge.WithHint(fmt.Errorf("restore: read the bundle of host %s: %w", hs.Name, err), "wait until the sync client has copied the folder")
	}
	b, err := bcrypto.ParseBundle(data)
	if err != nil {
		return nil, fmt.Errorf("restore: the bundle of host %s: %w", hs.Name, err)
	}
	p.Bundle = bcrypto.BundleText(data)
	if err := p.Check(); err != nil || b.Role != "host" {
		return nil, bridge.WithHint(fmt.Errorf("restore: the bundle of host %s in the folder is not one of the keys the secret pins (fingerprint %s)", hs.Name, b.Fingerprint()),
			"someone may have replaced it, or the host rotated and its statements have not synced yet; compare the fingerprint with `bridge keys export` on the host")
	}
	return p, nil
}

// ownBundleInFolder finds the agent's own bundle, as it published it for a
// host, if it carries exactly the secret's keys.
func ownBundleInFolder(f *syncsafe.Folder, s *bridge.AgentSecret) []byte {
	for _, hs := range s.Hosts {
		data, err := f.ReadFile(bridge.AgentBundlePath(hs.ID, s.ID), bcrypto.KindBundle.MaxSize())
		if err != nil {
			continue
		}
		b, err := bcrypto.ParseBundle(data)
		if err == nil && b.Role == "agent" && b.ID == s.ID && b.Seq == s.Seq &&
			bytes.Equal(b.SignPub, s.Identity.SignPublic()) && bytes.Equal(b.BoxPub, s.Identity.BoxPublic()) {
			return data
		}
	}
	return nil
}
