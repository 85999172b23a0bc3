package host

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/policy"
	"github.com/syncbridge/bridge/bridge/runner"
	"github.com/syncbridge/bridge/syncsafe"
)

// Per-agent ceilings (policy [agents.X] max_concurrent, max_runs_per_hour,
// max_cpu_seconds_per_day). A request that would go over one is rejected
// with reason "ceiling" when it would be claimed: it is answered, not
// queued, so the agent learns at once and can try later.
//
// Runs in the last hour and CPU seconds of the current UTC day survive a
// restart in ceilings.json in the home; it is written only for agents that
// have one of those two ceilings, so a policy without ceilings costs nothing.
// Runs at once are counted in memory: after a restart nothing runs.

const ceilingsName = "ceilings.json"

type ceilings struct {
	*base   // the policy's ceilings, the home where the usage is kept
	mu      sync.Mutex
	loaded  bool
	running map[string]int // by agent name
	usage   ceilingUsage
}

type ceilingUsage struct {
	Runs map[string][]int64  `json:"runs"` // agent -> unix seconds of the runs of the last hour
	CPU  map[string]cpuUsage `json:"cpu"`  // agent -> CPU of its ops today
}

type cpuUsage struct {
	Day string `json:"day"` // UTC, 2006-01-02
	MS  int64  `json:"ms"`
}

// ReasonCeiling is the reason of a request rejected for an agent's ceiling.
const ReasonCeiling = bridge.ReasonCeiling

func (cs *ceilings) load() {
	if cs.loaded {
		return
	}
	cs.loaded = true
	cs.running = map[string]int{}
	if data, err := os.ReadFile(cs.home.Path(ceilingsName)); err == nil {
		if err := json.Unmarshal(data, &cs.usage); err != nil {
			cs.log.Warn("ceilings: unreadable usage file; counting from zero", "err", err)
		}
	}
	if cs.usage.Runs == nil {
		cs.usage.Runs = map[string][]int64{}
	}
	if cs.usage.CPU == nil {
		cs.usage.CPU = map[string]cpuUsage{}
	}
}

func (cs *ceilings) save() {
	data, _ := json.Marshal(cs.usage)
	if err := syncsafe.WriteFileAtomic(cs.home.Path(ceilingsName), data); err != nil {
		cs.log.Warn("ceilings: save usage", "err", err)
	}
}

// concurrentFull reports whether agent runs as many ops as its
// max_concurrent allows now.
func (cs *ceilings) concurrentFull(agent string) bool {
	c := cs.pol().Ceilings(agent)
	if c.MaxConcurrent <= 0 {
		return false
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.running[agent] >= c.MaxConcurrent
}

// reserve takes a place under agent's ceilings for a run of inv, or
// returns the rejection to answer with. The release function ends the run's
// place in max_concurrent. The op's CPU limit is lowered to what is left of
// the agent's CPU for the day, so one run cannot overdraw it by much.
func (cs *ceilings) reserve(agent string, inv *policy.Invocation) (release func(), over *bridge.Receipt) {
	c := cs.pol().Ceilings(agent)
	if c == (policy.Ceilings{}) {
		return func() {}, nil
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.load()
	now := cs.opt.Now()
	reject := func(name string, limit int64, format string, args ...any) (func(), *bridge.Receipt) {
		return nil, &bridge.Receipt{Status: bridge.StatusRejected, Reason: ReasonCeiling, Op: inv.Op,
			Detail: fmt.Sprintf("agent %s is at its ceiling %s = %d (%s); try again later", agent, name, limit, fmt.Sprintf(format, args...))}
	}
	if c.MaxConcurrent > 0 && cs.running[agent] >= c.MaxConcurrent {
		return reject("max_concurrent", int64(c.MaxConcurrent), "%d runs now", cs.running[agent])
	}
	runs := cs.usage.Runs[agent][:0:0]
	for _, t := range cs.usage.Runs[agent] {
		if now.Sub(time.Unix(t, 0)) < time.Hour {
			runs = append(runs, t)
		}
	}
	if c.MaxRunsPerHour > 0 && len(runs) >= c.MaxRunsPerHour {
		return reject("max_runs_per_hour", int64(c.MaxRunsPerHour), "%d runs in the last hour", len(runs))
	}
	if c.MaxCPUSecondsPerDay > 0 {
		used := cs.usage.CPU[agent]
		if used.Day != now.UTC().Format(time.DateOnly) {
			used = cpuUsage{}
		}
		left := c.MaxCPUSecondsPerDay - used.MS/1000
		if left <= 0 {
			return reject("max_cpu_seconds_per_day", c.MaxCPUSecondsPerDay, "%.1f CPU seconds used today (UTC)", float64(used.MS)/1000)
		}
		if inv.Limits.CPUSeconds == 0 || inv.Limits.CPUSeconds > uint64(left) {
			inv.Limits.CPUSeconds = uint64(left)
		}
	}
	cs.running[agent]++
	if c.MaxRunsPerHour > 0 {
		cs.usage.Runs[agent] = append(runs, now.Unix())
		cs.save()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cs.mu.Lock()
			cs.running[agent]--
			cs.mu.Unlock()
		})
	}, nil
}

// chargeCPU adds a finished run's CPU time to its agent's day.
func (cs *ceilings) chargeCPU(agent string, cpu time.Duration) {
	if cs.pol().Ceilings(agent).MaxCPUSecondsPerDay == 0 || cpu <= 0 {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.load()
	day := cs.opt.Now().UTC().Format(time.DateOnly)
	u := cs.usage.CPU[agent]
	if u.Day != day {
		u = cpuUsage{Day: day}
	}
	u.MS += cpu.Milliseconds()
	cs.usage.CPU[agent] = u
	cs.save()
}

// runnerLimits converts the policy's limits for the runner.
func runnerLimits(l policy.Limits) runner.Limits {
	return runner.Limits{CPUSeconds: l.CPUSeconds, AddressSpace: l.AddressSpace, OpenFiles: l.OpenFiles, Processes: l.Processes}
}
