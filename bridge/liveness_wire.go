package bridge

import (
	"fmt"
	"path"
	"slices"
	"time"

	bcrypto "github.com/syncbridge/bridge/crypto"
)

// Liveness stamp (SPEC §10c): the host tells each agent, signed, when it
// last ran, whether it is serving or stopped, and which of that agent's
// keys it accepts now, so an agent learns "host down or sync stalled" and
// "my key is not accepted" from the folder at once instead of from a
// timeout.

// Liveness states.
const (
	LivenessServing = "serving"
	// LivenessDraining: the daemon was told to stop while ops ran; it lets
	// them finish (for up to its drain), starts nothing new, and writes a
	// stopped stamp when it exits.
	LivenessDraining = "draining"
	LivenessStopped  = "stopped"
)

// Liveness limits (SPEC §10c).
const (
	// DefaultLivenessInterval is how often a serving host rewrites its
	// stamps when nothing else changes: often enough to tell a host down
	// from one that is up, rarely enough not to make sync churn.
	DefaultLivenessInterval = 5 * time.Minute
	// MaxLivenessInterval bounds the interval a stamp may claim.
	MaxLivenessInterval = time.Hour
	// MaxLivenessAccepts bounds the key ids one stamp lists.
	MaxLivenessAccepts = 16
)

const livenessName = "host.liveness"

// LivenessPath is where a host publishes its liveness stamp for one agent.
func LivenessPath(host, agent string) string { return path.Join(ToAgentDir(host, agent), livenessName) }

// LivenessName is the file name of a stamp, for watchers.
const LivenessName = livenessName

// LivenessStamp is the signed body of host.liveness.
type LivenessStamp struct {
	V        int      `json:"v"`
	Host     string   `json:"host"`
	HostKid  string   `json:"host_kid"`
	Agent    string   `json:"agent"`
	State    string   `json:"state"`
	Time     int64    `json:"time"`
	Interval int64    `json:"interval"`
	Accepts  []string `json:"accepts"`
	AgentSeq uint64   `json:"agent_seq"`
	// Trusted: the host still reads this agent's requests, and answers
	// each (a refused key gets a signed rejected result); false: it
	// ignores them (removed).
	Trusted bool   `json:"trusted"`
	Policy  string `json:"policy_sha256"`
}

// SignLiveness returns a signed host.liveness file. Accepts is sorted here.
func SignLiveness(s LivenessStamp, host *bcrypto.Identity) ([]byte, error) {
	s.V = 1
	s.HostKid = host.SignKid()
	if s.Accepts == nil {
		s.Accepts = []string{}
	}
	s.Accepts = slices.Clone(s.Accepts)
	slices.Sort(s.Accepts)
	s.Accepts = slices.Compact(s.Accepts)
	return signBody(bcrypto.KindLiveness, host, &s, s.check)
}

// OpenLiveness verifies a stamp found in host's directory for agent under
// any of hostKeys.
func OpenLiveness(data []byte, host, agent string, hostKeys [][]byte) (*LivenessStamp, error) {
	var s LivenessStamp
	if err := OpenBody(bcrypto.KindLiveness, data, hostKeys, &s); err != nil {
		return nil, fmt.Errorf("liveness stamp: %w", err)
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	if s.Host != host || s.Agent != agent {
		return nil, fmt.Errorf("liveness stamp: %w", ErrWrongRecipient)
	}
	return &s, nil
}

func (s *LivenessStamp) check() error {
	if s.V != 1 {
		return fmt.Errorf("liveness stamp: %w: v=%d", bcrypto.ErrUnknownVersion, s.V)
	}
	bad := func(what string) error { return fmt.Errorf("liveness stamp: %w: %s", bcrypto.ErrMalformed, what) }
	switch {
	case !bcrypto.ValidKid(s.Host) || !bcrypto.ValidKid(s.HostKid) || !bcrypto.ValidKid(s.Agent):
		return bad("bad id")
	case s.State != LivenessServing && s.State != LivenessDraining && s.State != LivenessStopped:
		return bad("state " + s.State)
	case s.Time <= 0:
		return bad("time")
	case s.Interval < 1 || s.Interval > int64(MaxLivenessInterval/time.Second):
		return bad("interval")
	case s.Accepts == nil: // `[]`, never null: one byte form
		return bad("accepts is null")
	case len(s.Accepts) > MaxLivenessAccepts:
		return bad("too many accepted keys")
	case !validSHA256Hex(s.Policy):
		return bad("policy_sha256")
	}
	for i, kid := range s.Accepts {
		if !bcrypto.ValidKid(kid) || (i > 0 && s.Accepts[i-1] >= kid) {
			return bad("accepts not sorted key ids")
		}
	}
	return nil
}
