package policy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// This file holds the safety envelope's part of the schema: per-op resource
// limits, per-agent ceilings and the [redact] table (see doc.go).

// Limits are an op's resource limits (setrlimit in the child); 0 leaves one
// unset.
type Limits struct {
	CPUSeconds   uint64 // cpu: seconds of CPU time
	AddressSpace uint64 // memory: bytes of address space
	OpenFiles    uint64 // open_files
	Processes    uint64 // processes (RLIMIT_NPROC: of the daemon's whole user)
}

// String lists the limits that are set ("cpu 90s memory 536870912").
func (l Limits) String() string {
	var parts []string
	for _, f := range []struct {
		name string
		v    uint64
		unit string
	}{{"cpu", l.CPUSeconds, "s"}, {"memory", l.AddressSpace, ""}, {"open_files", l.OpenFiles, ""}, {"processes", l.Processes, ""}} {
		if f.v != 0 {
			parts = append(parts, f.name+" "+strconv.FormatUint(f.v, 10)+f.unit)
		}
	}
	return strings.Join(parts, " ")
}

// Ceilings bound what one agent may use; 0 means no ceiling.
type Ceilings struct {
	MaxConcurrent       int   // runs of the agent at once
	MaxRunsPerHour      int   // runs started in any sliding hour
	MaxCPUSecondsPerDay int64 // CPU seconds of its ops per UTC day
}

// Redaction is the [redact] table: whether output is redacted (default
// true) and the policy's own patterns, added to the built-in ones.
type Redaction struct {
	Enabled  bool
	Patterns []*regexp.Regexp
}

const (
	maxLimitCPU      = 24 * 60 * 60
	maxCeiling       = 1 << 20
	maxRedactPattern = 64
)

type redactDoc struct {
	Enabled  *bool     `toml:"enabled"`
	Patterns *[]string `toml:"patterns"`
}

var redactKeys = []string{"enabled", "patterns"}

// Ceilings returns the agent's ceilings (zero for an unknown agent).
func (p *Policy) Ceilings(agent string) Ceilings { return p.ceilings[agent] }

// Concurrency returns how many runs of op may run at once (0: no limit),
// and false for an op the policy does not have.
func (p *Policy) Concurrency(op string) (int, bool) {
	if o := p.ops[op]; o != nil {
		return o.concurrency, true
	}
	return 0, false
}

// Redaction returns the [redact] settings.
func (p *Policy) Redaction() Redaction {
	if p.redact == nil {
		return Redaction{Enabled: true}
	}
	return *p.redact
}

func (b *builder) redaction(d *redactDoc) *Redaction {
	r := &Redaction{Enabled: true}
	if d == nil {
		return r
	}
	if d.Enabled != nil {
		r.Enabled = *d.Enabled
	}
	if d.Patterns != nil {
		at := []string{"redact", "patterns"}
		if len(*d.Patterns) > maxRedactPattern {
			b.errAt(at, "a few patterns for the secrets of this host", "more than %d patterns", maxRedactPattern)
			return r
		}
		for _, s := range *d.Patterns {
			re, err := regexp.Compile(s)
			switch {
			case err != nil:
				b.errAt(at, "Go regexp syntax (RE2), e.g. \"corp_[A-Za-z0-9]{32}\"", "bad pattern %q: %v", s, err)
			case s == "" || re.MatchString(""):
				b.errAt(at, "a pattern must match the secret, not the empty string", "pattern %q matches the empty string", s)
			default:
				r.Patterns = append(r.Patterns, re)
			}
		}
	}
	return r
}

func (b *builder) limits(name string, d *opDoc) Limits {
	at := func(k string) []string { return []string{"ops", name, k} }
	var l Limits
	if d.CPU != nil {
		var secs int64
		switch x := d.CPU.(type) {
		case int64:
			secs = x
		case string:
			// A string of digits is seconds, as the bare number is: the
			// docs say "seconds (600)" and an operator quotes it.
			if n, err := strconv.ParseInt(x, 10, 64); err == nil && x != "" && x[0] >= '0' && x[0] <= '9' {
				secs = n
				break
			}
			dur, err := time.ParseDuration(x)
			if err != nil {
				b.errAt(at("cpu"), `seconds (60 or "60") or a Go duration ("1m")`, "bad cpu %q", x)
				break
			}
			secs = int64((dur + time.Second - 1) / time.Second)
		default:
			b.errAt(at("cpu"), `seconds (60 or "60") or a Go duration ("1m")`, "want seconds or a duration, got %s", tomlTypeOf(d.CPU))
		}
		if secs < 0 || secs > maxLimitCPU {
			b.errAt(at("cpu"), "1 second to 24h", "cpu %d s out of range", secs)
		} else {
			l.CPUSeconds = uint64(secs)
		}
	}
	if d.Memory != nil {
		var n int64
		var err error
		switch x := d.Memory.(type) {
		case int64:
			n = x
		case string:
			n, err = parseSize(x)
		default:
			err = fmt.Errorf("want a size, got %s", tomlTypeOf(d.Memory))
		}
		switch {
		case err != nil:
			b.errAt(at("memory"), `a size such as "512MiB" or "2GiB"`, "%v", err)
		case n < 1<<20:
			b.errAt(at("memory"), "at least 1MiB: a program needs address space to start", "memory %d is too small", n)
		default:
			l.AddressSpace = uint64(n)
		}
	}
	count := func(k string, v *int64, lo int64) uint64 {
		if v == nil {
			return 0
		}
		if *v < lo || *v > maxCeiling {
			b.errAt(at(k), "a whole number "+strconv.FormatInt(lo, 10)+".."+strconv.Itoa(maxCeiling), "%s %d out of range", k, *v)
			return 0
		}
		return uint64(*v)
	}
	l.OpenFiles = count("open_files", d.OpenFiles, 8)
	l.Processes = count("processes", d.Processes, 1)
	return l
}

func (b *builder) ceilings(name string, d *agentDoc) Ceilings {
	at := func(k string) []string { return []string{"agents", name, k} }
	get := func(k string, v *int64) int64 {
		if v == nil {
			return 0
		}
		if *v < 1 || *v > maxCeiling {
			b.errAt(at(k), "a whole number 1.."+strconv.Itoa(maxCeiling)+"; leave it out for no ceiling", "%s %d out of range", k, *v)
			return 0
		}
		return *v
	}
	return Ceilings{
		MaxConcurrent:       int(get("max_concurrent", d.MaxConcurrent)),
		MaxRunsPerHour:      int(get("max_runs_per_hour", d.MaxRunsPerHour)),
		MaxCPUSecondsPerDay: get("max_cpu_seconds_per_day", d.MaxCPUSecondsPerDay),
	}
}
