package host

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// What the daemon trusts: each agent's keys, read from the home, and its
// own, followed across rotations; the catalog each agent is shown.

// agentKeys is what the host trusts for one agent: a snapshot of its peer
// record, whose keys are judged at the time of use.
type agentKeys struct {
	name string
	peer trust.Peer
}

// allSign returns the signing keys of every generation, revoked ones too:
// to recognise what the agent signed, not to accept it.
func (k *agentKeys) allSign() [][]byte {
	var out [][]byte
	for _, pk := range k.peer.Keys {
		out = append(out, pk.SignPub)
	}
	return out
}

// sign returns the signing keys valid now.
func (k *agentKeys) sign(now time.Time) [][]byte {
	var out [][]byte
	for _, pk := range k.peer.KeysIn(trust.KeyValid, now) {
		out = append(out, pk.SignPub)
	}
	return out
}

// invalidSign returns the agent's revoked and expired signing keys with the
// reason each stands for: a request signed by one is answered with that
// reason instead of being dropped as forged.
func (k *agentKeys) invalidSign(now time.Time) (keys [][]byte, reasons []string) {
	for _, pk := range k.peer.Keys {
		switch k.peer.State(pk, now) {
		case trust.KeyRevoked:
			keys, reasons = append(keys, pk.SignPub), append(reasons, "revoked")
		case trust.KeyExpired:
			keys, reasons = append(keys, pk.SignPub), append(reasons, "key-expired")
		}
	}
	return keys, reasons
}

// boxPub returns the agent's encryption key with this kid, of any generation.
func (k *agentKeys) boxPub(kid string) ([]byte, bool) {
	for _, pk := range k.peer.Keys {
		if pk.BoxKid() == kid {
			return pk.BoxPub, true
		}
	}
	return nil, false
}

// boxValid reports whether kid names a box key of the agent valid now.
func (k *agentKeys) boxValid(kid string, now time.Time) bool {
	for _, pk := range k.peer.KeysIn(trust.KeyValid, now) {
		if pk.BoxKid() == kid {
			return true
		}
	}
	return false
}

// ownKeys are the host's own identities: the current one and the retired
// ones still kept to open requests sealed to them.
type ownKeys struct {
	current *bcrypto.Identity
	all     []trust.OwnKey
	stamp   time.Time // mtime of the home's bundle when loaded
}

func (o *ownKeys) boxKids() []string {
	var out []string
	for _, k := range o.all {
		out = append(out, k.Identity.BoxKid())
	}
	return out
}

func (o *ownKeys) byBoxKid(kid string) *bcrypto.Identity {
	for _, k := range o.all {
		if k.Identity.BoxKid() == kid {
			return k.Identity
		}
	}
	return nil
}

func (o *ownKeys) signPubs() [][]byte {
	var out [][]byte
	for _, k := range o.all {
		out = append(out, k.Identity.SignPublic())
	}
	return out
}

// keyring keeps the keys in force (the base's atomics) in step with the
// home: the trusted agents' records, the host's own identities after a
// rotation, and the agents' rotation statements in the folder. What the
// agents are shown of a change (stamps, catalogs, a note) the outbox
// publishes.
type keyring struct {
	*base
	out *outbox
	// loadedFrom is the peers directory's version read just before Open
	// loaded the trusted agents. The control loop starts from it: a stamp
	// of its own, taken when it starts, would take a pairing made between
	// Open and then for one already loaded, and never load it (a first
	// `bridge run` waited for good in the README's quick start, CI33).
	loadedFrom string
}

// check is what a request of agent is verified against (SPEC §8.2–3):
// this host's keys and the agent's valid now, and the clock.
func (k *keyring) check(agent string, keys *agentKeys) bridge.RequestCheck {
	return bridge.RequestCheck{
		Host: k.me, HostBoxKids: k.own().boxKids(), Agent: agent, AgentKeys: keys.sign(k.opt.Now()),
		AgentBoxKid: func(kid string) bool { return keys.boxValid(kid, k.opt.Now()) },
		Now:         k.opt.Now(), Skew: k.opt.Skew,
	}
}

func (k *keyring) loadAgents() error {
	peers, err := k.home.Peers()
	if err != nil {
		return err
	}
	agents := map[string]*agentKeys{}
	for _, p := range peers {
		if p.Role != "agent" {
			continue
		}
		// The record is checked against the bundle it was made from: never a
		// lookup by name, which another record could shadow.
		if err := p.Check(); err != nil {
			return fmt.Errorf("trusted agent: %w", err)
		}
		agents[p.ID] = &agentKeys{name: p.Name, peer: p}
	}
	k.agentsP.Store(&agents)
	return nil
}

// loadOwnKeys reads the host's own identities, if the home's bundle changed
// since they were last read (a `bridge keys rotate` while serving).
func (k *keyring) loadOwnKeys() error {
	fi, err := os.Stat(k.home.Path(trust.BundleName))
	if err != nil {
		return err
	}
	if o := k.own(); o != nil && o.stamp.Equal(fi.ModTime()) {
		return nil
	}
	h, err := trust.OpenHome(k.home.Dir)
	if err != nil {
		return err
	}
	all, err := h.OwnKeys()
	if err != nil {
		return err
	}
	prev := k.own()
	k.ownP.Store(&ownKeys{current: h.Identity(), all: all, stamp: fi.ModTime()})
	if prev != nil && prev.current.SignKid() != h.Identity().SignKid() && k.folder != nil {
		k.out.notify("", bridge.Note{Event: bridge.EventKeyRotated, Text: "the host rotated its keys; agents follow the rotation statement by themselves"})
		if err := k.out.publishForAgents(); err != nil {
			k.log.Warn("publish catalog", "err", err)
		}
	}
	if len(all) > 1 {
		k.log.Info("own keys", "current", h.Identity().SignKid(), "kept", len(all)-1)
	}
	return nil
}

// followRotations applies the rotation statements an agent published;
// failed says that the following itself failed (the folder's directory or
// the home could not be read or written), not a statement.
func (k *keyring) followRotations(agent string) (failed bool) {
	events, err := k.home.FollowRotations(k.folder, agent, bridge.ToHostDir(k.me, agent))
	if err != nil {
		k.log.Warn("follow rotations", "agent", agent, "err", err)
		failed = true
	}
	changed := false
	for _, ev := range events {
		changed = changed || ev.Result == "accepted"
		// A statement that stays in the folder is read again by every
		// rescan: say why it is refused or ignored once, not every time.
		if ev.Result != "accepted" && !k.firstTime(fmt.Sprintf("rotation:%s:%d:%s", agent, ev.Seq, ev.Result)) {
			continue
		}
		k.audit.log(AuditEvent{Event: "rotation", Agent: agent, Detail: fmt.Sprintf("seq %d: %s", ev.Seq, ev.Result)})
		k.log.Info("agent key rotation", "agent", ev.Peer, "seq", ev.Seq, "result", ev.Result)
	}
	if changed {
		if err := k.loadAgents(); err != nil {
			k.log.Error("reload agents", "err", err)
		}
		if err := k.out.publishForAgents(); err != nil {
			k.log.Warn("publish catalog", "err", err)
		}
	}
	return failed
}

// statementsIn takes out of paths the rotation statements of trusted
// agents (stmts, in order) and returns the other paths in order (rest).
func (k *keyring) statementsIn(paths []string) (rest, stmts []string) {
	// Rotation statements are rare and a full batch is every path in the
	// folder: copy the batch only when it holds one.
	i := slices.IndexFunc(paths, func(p string) bool { return strings.HasSuffix(p, ".rotation") })
	if i < 0 {
		return paths, nil
	}
	rest = append(make([]string, 0, len(paths)), paths[:i]...)
	for _, p := range paths[i:] {
		if strings.HasSuffix(p, ".rotation") {
			agent, name, ok := strings.Cut(p, "/")
			if _, isRot := bridge.ParseRotationName(name); ok && isRot && !strings.Contains(name, "/") && k.agents()[agent] != nil {
				stmts = append(stmts, p)
				continue
			}
		}
		rest = append(rest, p)
	}
	return rest, stmts
}

// followStatements follows the rotation statements of every agent with
// one in stmts (statementsIn's), once per agent however many it has (each
// following reads all of them); failed says that a following failed
// (followRotations).
func (k *keyring) followStatements(stmts []string) (failed bool) {
	var agents []string
	for _, p := range stmts {
		if agent, _, _ := strings.Cut(p, "/"); !slices.Contains(agents, agent) {
			agents = append(agents, agent)
		}
	}
	for _, agent := range agents {
		k.probe.Add(probe.RotationFollows)
		failed = k.followRotations(agent) || failed
	}
	return failed
}

// statementVersions are the versions of the statements at stmts (paths
// below to-host, each agent's adjacent), one batched lstat per agent; the
// zero version for one gone or not to be looked at.
func (k *keyring) statementVersions(stmts []string) []version {
	out := make([]version, len(stmts))
	for i := 0; i < len(stmts); {
		agent, _, _ := strings.Cut(stmts[i], "/")
		j := i
		var names []string
		for ; j < len(stmts) && strings.HasPrefix(stmts[j], agent+"/"); j++ {
			names = append(names, stmts[j][len(agent)+1:])
		}
		if fis, err := k.folder.LstatIn(bridge.ToHostDir(k.me, agent), names); err == nil {
			for n, fi := range fis {
				if fi != nil {
					out[i+n] = versionOf(fi)
				}
			}
		}
		i = j
	}
	return out
}
