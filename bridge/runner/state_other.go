//go:build !linux

package runner

import "time"

// recover: without a containment that outlives the daemon, nothing of an
// earlier daemon's runs is recorded, and nothing is found.
func (s *State) recover(time.Duration) (Leftovers, error) { return Leftovers{}, nil }

type statePlat struct{}

func (*State) closePlat() {}

// dirIdentity is not needed where no cgroup is named for the directory.
func dirIdentity(string) string { return "" }
