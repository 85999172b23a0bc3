package host

import (
	"errors"
	"io/fs"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// Liveness stamps (SPEC §10c): one signed file per agent, in its to-agent
// directory, saying when the daemon last ran, whether it serves or has
// stopped, and which of that agent's keys it accepts now. It is rewritten
// on start, on every change of what it says (trust, revocation, rotation,
// policy reload), at a clean stop, and otherwise once per interval: a sync
// client carries one small file per agent per interval, no more.

// maxFormerAgents bounds the directories of agents no longer trusted that
// a stamp round rewrites (a folder writer can make directories there).
const maxFormerAgents = 256

// publishLiveness writes every agent's stamp with the given state. Agents
// the host no longer trusts at all (removed) keep being told, in the
// directory where they had a stamp, that none of their keys is accepted.
func (o *outbox) publishLiveness(state string) error {
	o.stampMu.Lock()
	defer o.stampMu.Unlock()
	switch {
	case state == bridge.LivenessServing && (o.closing.Load() || o.killed.Load()):
		return nil // a round under way when the stop came: the stop's stamps stand
	case state == bridge.LivenessDraining && o.killed.Load():
		return nil
	}
	now := o.opt.Now()
	pol, own := o.pol(), o.own()
	if pol == nil || own == nil || o.folder == nil {
		return nil
	}
	stamp := bridge.LivenessStamp{Host: o.me, State: state, Time: now.Unix(),
		Interval: int64(o.livenessInterval() / time.Second), Policy: pol.SHA256}
	var errs []error
	publish := func(agent string, accepts []string, seq uint64, trusted bool) {
		s := stamp
		s.Agent, s.Accepts, s.AgentSeq, s.Trusted = agent, accepts, seq, trusted
		signed, err := bridge.SignLiveness(s, own.current)
		if err == nil {
			write := func() error {
				return o.folder.PublishReplace(bridge.LivenessPath(o.me, agent), bridge.WriteBytes(signed), syncsafe.WithMode(0o644))
			}
			if trusted {
				// Only a trusted agent's results are checked, and a folder
				// writer makes the other directories: no record of them.
				err = o.ownWrite(agent, write)
			} else {
				err = write()
			}
		}
		errs = append(errs, err)
	}
	agents := o.agents()
	for id, k := range agents {
		accepts := []string{}
		valid := k.peer.KeysIn(trust.KeyValid, now)
		if len(valid) > bridge.MaxLivenessAccepts {
			valid = valid[len(valid)-bridge.MaxLivenessAccepts:] // the newest generations
		}
		for _, pk := range valid {
			accepts = append(accepts, pk.SignKid())
		}
		var seq uint64
		for _, pk := range k.peer.Keys {
			seq = max(seq, pk.Seq)
		}
		publish(id, accepts, seq, true)
	}
	entries, err := o.folder.ListFunc(bridge.ToAgentRoot(o.me), func(name string) bool { return bcrypto.ValidKid(name) && agents[name] == nil })
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	n := 0
	for _, e := range entries {
		if !e.Type.IsDir() || n >= maxFormerAgents {
			continue
		}
		if fi, err := o.folder.Lstat(bridge.LivenessPath(o.me, e.Name)); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		n++
		publish(e.Name, []string{}, 0, false)
	}
	o.livenessAt.Store(now.UnixNano())
	return errors.Join(errs...)
}

// livenessInterval is how often a serving daemon rewrites its stamps.
func (o *outbox) livenessInterval() time.Duration {
	if o.opt.LivenessInterval > 0 {
		return o.opt.LivenessInterval
	}
	return bridge.DefaultLivenessInterval
}

// refreshLiveness rewrites the stamps once their interval has passed, or
// will within early (the control loop calls it every tick; at a rescan's,
// what is due before the next rescan is done early).
func (o *outbox) refreshLiveness(early time.Duration) {
	last := time.Unix(0, o.livenessAt.Load())
	if now := o.opt.Now(); !dueWithin(now.Sub(last), o.livenessInterval(), early) && !now.Before(last) {
		return
	}
	o.probe.Add(probe.LivenessRounds)
	if err := o.publishLiveness(bridge.LivenessServing); err != nil {
		o.log.Warn("publish liveness stamps", "err", err)
	}
	o.guardCatalogs()
}

// livenessDue is how long until refreshLiveness rewrites the stamps.
func (o *outbox) livenessDue() time.Duration {
	last := time.Unix(0, o.livenessAt.Load())
	now := o.opt.Now()
	if now.Before(last) {
		return 0 // the clock stepped back: rewritten at once
	}
	return o.livenessInterval() - now.Sub(last)
}

// publishForAgents publishes what each agent is shown of this host: its
// catalog and its liveness stamp. Called whenever either may change.
func (o *outbox) publishForAgents() error {
	err := o.publishCatalog()
	return errors.Join(err, o.publishLiveness(bridge.LivenessServing))
}
