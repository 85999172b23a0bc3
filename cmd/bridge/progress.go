package main

import (
	"context"
	"fmt"
	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/syncthing"
	"io"
	"os"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge/agent"
)

// progress shows that bridge is waiting: a spinner with the elapsed time on a
// terminal, a plain line every 15 seconds otherwise.
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	id       string
	tty      bool
	last     time.Time
	frame    int
	shown    bool
	lastLine time.Duration

	// state, if set, tells what the request waits for (a pure read of the
	// folder); looked at every few seconds, and said once when it waits
	// for a human's approval.
	state     func() string
	lastState time.Duration
	awaiting  bool
	silent    bool // the op's output streams: no spinner

	// liveness, if set, judges the host's liveness stamp (a pure read);
	// looked at every second, and said when the host stopped or went
	// silent, and when it is back.
	liveness    func() *agent.Liveness
	livedAt     time.Duration
	lived       bool
	lastLive    *agent.Liveness // the latest verdict
	saidAlarm   bool            // a stopped or stale line was printed
	elapsed     time.Duration   // of the wait, at the latest tick
	saidNoStamp bool            // the line about no stamp at all was printed

	// route, if set, asks the local Syncthing whether the host's results
	// travel by a folder of their own on one side only (routeAfter into
	// the wait, once): then no answer ever arrives, and the wait says so
	// instead of hanging.
	route    func() []syncthing.RouteProblem
	routed   bool
	problems []syncthing.RouteProblem
}

// routeAfter is how far into a wait the results route is checked: an
// answer through a set-up Syncthing takes a fraction of a second, and the
// check is a few local HTTP requests.
const routeAfter = 2 * time.Second

// noStampAfter is how long a wait goes on before the absence of any
// liveness stamp for this agent is said: a host that paired the agent and
// serves publishes one at once, so by then the usual cause is a host that
// never paired this agent (the first thing a new user forgets). A variable
// only so that the test binary's `bridge` can shorten it (main_test.go).
var noStampAfter = 10 * time.Second

func newProgress(w io.Writer, id string) *progress {
	p := &progress{w: w, id: id}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

var spinner = []string{"|", "/", "-", `\`}

func (p *progress) tick(elapsed time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.elapsed = elapsed
	if p.liveness != nil && (!p.lived || elapsed-p.livedAt >= time.Second) {
		p.lived, p.livedAt = true, elapsed
		p.sayLiveness(p.liveness())
	}
	p.checkRouteLocked(elapsed)
	if p.state != nil && !p.awaiting && elapsed >= time.Second && (p.lastState == 0 || elapsed-p.lastState >= 5*time.Second) {
		p.lastState = elapsed
		if p.state() == bridge.StateAwaitingApproval {
			p.awaiting = true
			if p.tty && p.shown {
				fmt.Fprint(p.w, "\r\033[K")
			}
			fmt.Fprintf(p.w, "bridge: %s waits for a human on the host to approve it (`bridge pending` there)\n", p.id)
		}
	}
	if p.silent {
		return
	}
	if p.tty {
		if time.Since(p.last) < 100*time.Millisecond {
			return
		}
		p.last = time.Now()
		p.frame++
		fmt.Fprintf(p.w, "\r%s waiting for %s … %s ", spinner[p.frame%len(spinner)], p.id[:8], elapsed.Round(time.Second))
		p.shown = true
		return
	}
	if elapsed-p.lastLine >= 15*time.Second {
		p.lastLine = elapsed
		fmt.Fprintf(p.w, "bridge: still waiting for %s (%s)\n", p.id, elapsed.Round(time.Second))
	}
}

// sayLiveness prints a line when the host's verdict turns to draining,
// stopped or stale (or from one to another), and when it is serving again.
func (p *progress) sayLiveness(lv *agent.Liveness) {
	if lv == nil {
		return
	}
	prev := p.lastLive
	p.lastLive = lv
	alarm := lv.Verdict == agent.LivenessStopped || lv.Verdict == agent.LivenessDraining || lv.Verdict == agent.LivenessStale
	line := ""
	switch {
	case lv.Verdict == agent.LivenessNoStamp && p.elapsed >= noStampAfter && !p.saidNoStamp:
		line = lv.Message
		p.saidNoStamp = true
	case alarm && (prev == nil || prev.Verdict != lv.Verdict):
		line = lv.Message
		p.saidAlarm = true
	case lv.Verdict == agent.LivenessOK && p.saidAlarm:
		line = fmt.Sprintf("host %q is serving again", lv.HostName)
		p.saidAlarm = false
	}
	if line == "" {
		return
	}
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "bridge: %s\n", escapeControls(line))
}

// alarm returns the latest verdict if it says the host stopped, is silent
// or never published a stamp for this agent, else nil.
func (p *progress) alarm() *agent.Liveness {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lv := p.lastLive; lv != nil && (lv.Verdict == agent.LivenessStopped || lv.Verdict == agent.LivenessDraining || lv.Verdict == agent.LivenessStale || lv.Verdict == agent.LivenessNoStamp) {
		return lv
	}
	return nil
}

// quiet stops the spinner for good: the op's own output now shows that
// bridge is not stuck, and a spinner would cut into its lines.
func (p *progress) quiet() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.silent = true
}

func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func signalNumber(name string) int {
	if s, ok := signals[name]; ok {
		return int(s)
	}
	return 0
}

// checkRoute checks the results route once, routeAfter into the wait, and
// says each problem found.
func (p *progress) checkRoute(elapsed time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checkRouteLocked(elapsed)
}

func (p *progress) checkRouteLocked(elapsed time.Duration) {
	if p.route == nil || p.routed || elapsed < routeAfter {
		return
	}
	p.routed = true
	p.problems = p.route()
	for _, rp := range p.problems {
		if p.tty && p.shown {
			fmt.Fprint(p.w, "\r\033[K")
			p.shown = false
		}
		fmt.Fprintf(p.w, "bridge: %s\nbridge: hint: %s\n", escapeControls(rp.Message), escapeControls(rp.Hint))
	}
}

// routeProblem is the first results-route problem the wait found, or nil.
func (p *progress) routeProblem() *syncthing.RouteProblem {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.problems) == 0 {
		return nil
	}
	return &p.problems[0]
}

// routeCheck returns, when a Syncthing nudge is set, the progress's route
// check of host's results (nil otherwise: without the local Syncthing's
// API nothing can be asked).
func (g *Globals) routeCheck(host, name string) func() []syncthing.RouteProblem {
	if g.nudger == nil || g.folder == "" {
		return nil
	}
	n, folder := g.nudger, g.folder
	return func() []syncthing.RouteProblem {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		ps, _ := n.ResultsRoute(ctx, folder, []syncthing.RouteHost{{ID: host, Name: name}}, false)
		return ps
	}
}

// routeTimeout is a wait's time-out error when the wait found the host's
// results going where this side does not read them: the cause, and its fix.
func routeTimeout(p *progress, id string, timeout time.Duration) error {
	rp := p.routeProblem()
	if rp == nil {
		return nil
	}
	return &codeError{code: exitWaitTime, id: id, err: withHintf(fmt.Errorf("no result for %s after %s: %s", id, timeout, rp.Message),
		"%s; the request stays queued (or answered) on the host, and `bridge wait %s` gets its answer once the two sides agree", rp.Hint, id)}
}
