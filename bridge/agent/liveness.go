package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// What the agent tells of a host from its signed liveness stamp (SPEC
// §10c): up, stopped, silent for too long, or refusing this agent's key.

// Liveness verdicts, most urgent first.
const (
	// LivenessNotAccepted: a fresh stamp says the host accepts none of
	// this agent's keys (never paired, revoked, removed): nothing this
	// agent sends will run there.
	LivenessNotAccepted = "not-accepted"
	// LivenessStopped: the host's daemon stopped cleanly and said so.
	LivenessStopped = "stopped"
	// LivenessDraining: a fresh stamp says the host's daemon is stopping:
	// the ops it runs may finish, it starts nothing new, and new requests
	// wait in the folder for its next start.
	LivenessDraining = "draining"
	// LivenessStale: the stamp is older than twice its interval: the host
	// is down, or the sync (its side or this one) stalled.
	LivenessStale = "stale"
	// LivenessNoStamp: no stamp for this agent (yet), or none that
	// verifies.
	LivenessNoStamp = "no-stamp"
	// LivenessRotationPending: the host accepts an older key of this
	// agent but has not yet followed its latest rotation.
	LivenessRotationPending = "rotation-pending"
	// LivenessOK: the host is serving and accepts this agent's key.
	LivenessOK = "ok"
	// LivenessClockAhead: the stamp's time is ahead of this machine's clock
	// by more than futureSlack: a clock is wrong on one side, or a folder
	// writer replays a stamp the host signed while its clock was ahead.
	// Nothing is acted on: neither a refusal nor "serving" is believed.
	LivenessClockAhead = "clock-ahead"
)

// futureSlack is how far ahead of this machine a stamp's time may be and
// still be read as now (clocks differ a little; more is not "fresh").
const futureSlack = 5 * time.Minute

// Liveness is what an agent knows of a host from its stamp.
type Liveness struct {
	Host     string     `json:"host"`      // the host's id
	HostName string     `json:"host_name"` // its local name here
	Verdict  string     `json:"verdict"`   // one of the Liveness* verdicts
	State    string     `json:"state"`     // the stamp's: serving | draining | stopped | "" (none)
	LastSeen *time.Time `json:"last_seen"` // the stamp's time, on the host's clock; null: none
	// AgeSeconds is how old the stamp is by this machine's clock (0 if
	// the host's clock is ahead).
	AgeSeconds      int64 `json:"age_seconds"`
	IntervalSeconds int64 `json:"interval_seconds"` // how often the host rewrites it while serving
	// Accepted: the stamp lists this agent's current signing key.
	Accepted bool `json:"accepted"`
	// Trusted: the host still reads this agent's requests and answers
	// each, if only to refuse it; false: it ignores them (removed, or it
	// never knew this agent).
	Trusted      bool   `json:"trusted"`
	PolicySHA256 string `json:"policy_sha256"`
	// ClockAheadSeconds: with a stale stamp that arrived here within its
	// interval, how far it is dated before it arrived: this machine's
	// clock may be that far ahead of the host's (the sync's delay
	// included), unless the stamp was delivered again late.
	ClockAheadSeconds int64  `json:"clock_ahead_seconds,omitempty"`
	Message           string `json:"message"` // one sentence for a human, without a leading "bridge:"
}

// ErrNotAccepted: the host's stamp says it accepts none of this agent's
// keys, so what the agent sends there will not run.
var ErrNotAccepted = errors.New("the host does not accept this agent's key")

// NotAcceptedError carries the verdict that refused.
type NotAcceptedError struct{ Liveness *Liveness }

func (e *NotAcceptedError) Error() string { return e.Liveness.Message }
func (e *NotAcceptedError) Unwrap() error { return ErrNotAccepted }

// HostLiveness reads and judges the liveness stamp a host (by local name
// or id; "" for the only trusted host) published for this agent. It is a
// pure read. An error means the host is not one this agent trusts, or the
// home could not be read; every state of the folder is a verdict.
func (c *Client) HostLiveness(host string) (*Liveness, error) {
	p, _, err := c.host(host)
	if err != nil {
		return nil, err
	}
	return c.hostLiveness(p.ID)
}

func (c *Client) hostLiveness(hostID string) (*Liveness, error) {
	p, _, err := c.home.Peer(hostID)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	lv := &Liveness{Host: p.ID, HostName: p.Name}
	data, err := c.folder.ReadFile(bridge.LivenessPath(p.ID, c.home.Config.ID), bcrypto.KindLiveness.MaxSize())
	if errors.Is(err, fs.ErrNotExist) {
		lv.Verdict = LivenessNoStamp
		lv.Message = fmt.Sprintf("host %q has published no liveness stamp for this agent yet: it has not trusted this agent's key "+
			"(on the host: `bridge pair --fingerprint %s`), or its daemon has not run since it did, or the folder has not synced it",
			p.Name, c.home.Bundle().Fingerprint())
		if b, err := os.ReadFile(c.home.Path(catalogsDir, p.ID+".liveness")); err == nil {
			// This agent verified one before (catalog.go keeps the newest):
			// the host paired it; the folder lost the stamp since.
			var keys [][]byte
			for _, k := range p.KeysIn(trust.KeyValid, now) {
				keys = append(keys, k.SignPub)
			}
			if st, err := bridge.OpenLiveness(b, p.ID, c.home.Config.ID, keys); err == nil {
				lv.Message = fmt.Sprintf("host %q's liveness stamp for this agent is gone from the folder (this agent saw one dated %s): "+
					"the host rewrites it within its interval (%s) while it serves; if it stays gone, check the host's `bridge serve` and the sync",
					p.Name, time.Unix(st.Time, 0).UTC().Format(time.RFC3339), Ago(time.Duration(st.Interval)*time.Second))
			}
		}
		return lv, nil
	} else if err != nil {
		return nil, err
	}
	hostKeys := func() [][]byte {
		var keys [][]byte
		if q, _, err := c.home.Peer(p.ID); err == nil {
			for _, k := range q.KeysIn(trust.KeyValid, now) {
				keys = append(keys, k.SignPub)
			}
		}
		return keys
	}
	st, err := bridge.OpenLiveness(data, p.ID, c.home.Config.ID, hostKeys())
	if errors.Is(err, bcrypto.ErrBadSignature) && c.followHost(p.ID) {
		st, err = bridge.OpenLiveness(data, p.ID, c.home.Config.ID, hostKeys())
	}
	if err != nil {
		// Still arriving, or not the host's: nothing can be told from it.
		lv.Verdict = LivenessNoStamp
		lv.Message = fmt.Sprintf("host %q's liveness stamp for this agent is refused (%s): nothing can be told from it", p.Name, bridge.Reason(err))
		if errors.Is(err, bcrypto.ErrUnknownVersion) {
			lv.Message += "; the host runs a newer bridge than this agent, which does not read its stamps: upgrade this agent"
		}
		return lv, nil
	}
	own, err := c.home.OwnKeys()
	if err != nil {
		return nil, err
	}
	// When the stamp arrived here, by this machine's clock: its file's
	// change time (a sync client sets the modification time from the
	// host's, never this one).
	var arrived time.Time
	if fi, err := c.folder.Lstat(bridge.LivenessPath(p.ID, c.home.Config.ID)); err == nil {
		arrived = syncsafe.ChangeTime(fi)
	}
	judge(lv, st, c.home.Identity().SignKid(), own, now, arrived)
	return lv, nil
}

// judge fills in the verdict of a verified stamp at time now.
func judge(lv *Liveness, st *bridge.LivenessStamp, current string, own []trust.OwnKey, now, arrived time.Time) {
	seen := time.Unix(st.Time, 0)
	age := max(now.Sub(seen), 0)
	interval := time.Duration(st.Interval) * time.Second
	lv.State, lv.LastSeen, lv.PolicySHA256 = st.State, &seen, st.Policy
	lv.AgeSeconds, lv.IntervalSeconds = int64(age/time.Second), st.Interval
	lv.Accepted, lv.Trusted = slices.Contains(st.Accepts, current), st.Trusted
	// Not accepted, the current key may just be newer than what the host
	// has followed (its rotation statement not synced or read yet), as
	// long as the host still accepts an older key of this agent; anything
	// else (revoked, expired, removed, never paired) is a refusal.
	pending := false
	var curSeq uint64
	for _, k := range own {
		if k.Identity.SignKid() == current {
			curSeq = k.Seq
		}
	}
	for _, k := range own {
		pending = pending || (!lv.Accepted && curSeq > st.AgentSeq && slices.Contains(st.Accepts, k.Identity.SignKid()))
	}
	refused := !lv.Accepted && !pending
	// A stamp says what the host thought when it wrote it: a refusal
	// counts only while the stamp is fresh (a host that has since trusted
	// this agent again rewrites it at once when it runs).
	fresh := age <= 2*interval
	ago := Ago(age)
	switch {
	case seen.Sub(now) > futureSlack:
		lv.Verdict = LivenessClockAhead
		lv.Message = fmt.Sprintf("host %q signed its last stamp %s ahead of this machine's clock: a clock is wrong on one side (or an old stamp is replayed); its state is unknown",
			lv.HostName, Ago(seen.Sub(now)))
		return
	case fresh && refused:
		lv.Verdict = LivenessNotAccepted
		lv.Message = fmt.Sprintf("host %q does not accept this agent's key (not paired, or revoked) as of %s ago", lv.HostName, ago)
	case st.State == bridge.LivenessStopped:
		lv.Verdict = LivenessStopped
		lv.Message = fmt.Sprintf("host %q stopped %s ago: requests wait in the folder until its daemon runs again", lv.HostName, ago)
	case st.State == bridge.LivenessDraining && fresh:
		lv.Verdict = LivenessDraining
		lv.Message = fmt.Sprintf("host %q has been stopping for %s: the ops it runs may finish, it starts nothing new, and new requests wait in the folder until its daemon runs again",
			lv.HostName, ago)
	case !fresh:
		lv.Verdict = LivenessStale
		lv.Message = fmt.Sprintf("host %q last seen %s ago: it may be down or its sync stalled (or this machine's)", lv.HostName, ago)
	case pending:
		lv.Verdict = LivenessRotationPending
		lv.Message = fmt.Sprintf("host %q, last seen %s ago, accepts an older key of this agent and has not yet followed its rotation", lv.HostName, ago)
	default:
		lv.Verdict = LivenessOK
		lv.Message = fmt.Sprintf("host %q is serving (last seen %s ago)", lv.HostName, ago)
	}
	if !fresh && refused {
		lv.Message += "; when last seen, it did not accept this agent's key"
	}
	if lv.Verdict == LivenessStale && !arrived.IsZero() && now.Sub(arrived) <= interval && arrived.Sub(seen) > futureSlack {
		// It arrived here lately, dated long before: the host may well
		// serve and the clocks differ. Said as a possibility: a stamp
		// delivered again (a folder writer, a client's re-download)
		// arrives late too.
		ahead := arrived.Sub(seen)
		lv.ClockAheadSeconds = int64(ahead / time.Second)
		lv.Message += fmt.Sprintf("; or this machine's clock is about %s ahead of the host's, as the stamp arrived here %s ago "+
			"(a request dated ahead of the host's clock by more than its skew is refused as not-yet-valid): compare the clocks, enable NTP on both",
			Ago(ahead), Ago(now.Sub(arrived)))
	}
}

// Ago says a duration the way a person would: "40 s", "12 min", "3 h",
// "2 days".
func Ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h", int(d/time.Hour))
	}
	return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
}
