package agent

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/syncbridge/bridge/bridge"
)

// WaitAll waits for the results of many requests at once, as Wait does for
// one, and calls got for each as it comes, in the order the answers land:
// with the verified outcome (got owns it and closes it), or with the error
// that ends the wait for that request (a *NotAcceptedError: its host will
// never answer; or the request is not one this home sent). It returns when
// every request is answered or ctx ends, with the ids still unanswered
// then, in the order given.
//
// It costs what the answers cost, not what the waiting requests number:
// one event-only watch per host directory, and on an event only the
// requests the event names are looked at. A look at all of them, for the
// events a watch may drop, comes on a backoff that grows to a minute for
// thousands of requests.
//
// tick, if set, is called after each full look, on the calling goroutine as
// got is, with the time waited so far.
func (c *Client) WaitAll(ctx context.Context, ids []string, got func(id string, out *Outcome, err error), tick func(elapsed time.Duration)) ([]string, error) {
	start := time.Now()
	pending := map[string]*Sent{}
	byHost := map[string][]string{}
	for _, id := range ids {
		if _, dup := pending[id]; dup {
			continue
		}
		s, err := c.Sent(id)
		if err != nil {
			got(id, nil, err)
			continue
		}
		pending[id] = s
		byHost[s.Host] = append(byHost[s.Host], id)
	}
	// Events name the requests to look at again; a full look goes over
	// all of them.
	var mu sync.Mutex
	dirty := map[string]bool{}
	poke := make(chan struct{}, 1)
	note := func(name string) bool {
		id, _, ok := bridge.ParseToAgentName(name)
		if !ok {
			return false
		}
		mu.Lock()
		dirty[id] = true
		mu.Unlock()
		select {
		case poke <- struct{}{}:
		default:
		}
		return false // poked here, with the name kept
	}
	// The watches come after the first full look, and only for the hosts
	// that left a request unanswered: arming one costs the kernel a walk
	// of the directory's cached entries (Wait), which a wait for answers
	// already there need not pay, nor one whose context ended. One that
	// lands between its look and the watch is taken by the next full look,
	// on the backoff (the first within 25–75 ms of the first look).
	armed := false
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	arm := func() {
		armed = true
		for host, hids := range byHost {
			if !slices.ContainsFunc(hids, func(id string) bool { return pending[id] != nil }) {
				continue
			}
			dir := filepath.Join(c.home.Config.Folder, filepath.FromSlash(bridge.ToAgentDir(host, c.home.Config.ID)))
			if _, stop, err := watchDir(dir, note); err == nil {
				c.waits.watches.Add(1)
				c.waits.open.Add(1)
				stops = append(stops, func() { stop(); c.waits.open.Add(-1) })
			}
		}
	}
	look := func(id string) {
		out, err := c.Result(id)
		if err == nil && c.RerunOrdered(out) {
			out.Close() // the uncertain answer a rerun will replace: wait for that one
			return
		}
		if errors.Is(err, errKeptUnreadable) {
			// Acked, its copy unreadable: no answer is to come.
			delete(pending, id)
			got(id, nil, err)
			return
		}
		if err != nil {
			// None yet, or a file that does not verify (an intermediate
			// version the sync client is still replacing, or junk): the
			// real one is waited for.
			return
		}
		delete(pending, id)
		got(id, out, nil)
	}
	// The longest pause between full looks: a second per 50 requests, from
	// 2 s to a minute. Events carry the answers; this is for lost ones.
	first, most := 50*time.Millisecond, min(max(2*time.Second, time.Duration(len(pending))*20*time.Millisecond), time.Minute)
	if c.fullLooksEvery != 0 {
		first, most = c.fullLooksEvery, c.fullLooksEvery
	}
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(first),
		backoff.WithMaxInterval(most), backoff.WithMaxElapsedTime(0))
	var due time.Time // of the next full look: events do not put it off
	for full := true; len(pending) > 0; {
		if full {
			due = time.Now().Add(b.NextBackOff())
			for _, id := range ids {
				if pending[id] != nil {
					look(id)
				}
			}
			c.dropNotAccepted(byHost, pending, got)
			if tick != nil && len(pending) > 0 {
				tick(time.Since(start))
			}
		} else {
			mu.Lock()
			names := dirty
			dirty = map[string]bool{}
			mu.Unlock()
			for id := range names {
				if pending[id] != nil {
					look(id)
				}
			}
		}
		if len(pending) == 0 {
			break
		}
		if !armed && ctx.Err() == nil {
			arm()
		}
		t := time.NewTimer(time.Until(due))
		select {
		case <-ctx.Done():
			t.Stop()
			var left []string
			for _, id := range ids {
				if pending[id] != nil && !slices.Contains(left, id) {
					left = append(left, id)
				}
			}
			return left, ctx.Err()
		case <-poke:
			t.Stop()
			full = false
		case <-t.C:
			full = true
		}
	}
	return nil, nil
}

// dropNotAccepted ends the wait for the pending requests of each host whose
// fresh stamp says it accepts none of this agent's keys: no answer will
// come (Wait).
func (c *Client) dropNotAccepted(byHost map[string][]string, pending map[string]*Sent, got func(string, *Outcome, error)) {
	for host, ids := range byHost {
		lv, err := c.hostLiveness(host)
		if err != nil || lv.Verdict != LivenessNotAccepted || lv.Trusted {
			continue
		}
		for _, id := range ids {
			if pending[id] != nil {
				delete(pending, id)
				got(id, nil, &NotAcceptedError{Liveness: lv})
			}
		}
	}
}

// Outstanding lists, oldest first, the requests this home sent whose answer
// it has not acked: those with none yet (unless forgotten, Forget, with no
// answer come since), those whose answer is in the folder
// unacked, and those whose acked answer was uncertain and a human on the host
// has since settled it (a new answer in the folder) or ordered it run again
// (its new answer is to come). A wait for all of them (WaitAll) is what an
// agent's loop of `submit --batch` then `wait --all --ack` waits on.
func (c *Client) Outstanding() ([]string, error) {
	sent, err := c.List()
	if err != nil {
		return nil, err
	}
	var ids []string
	for i := len(sent) - 1; i >= 0; i-- {
		id := sent[i].ID
		if sent[i].Forgotten != 0 && !sent[i].Acked {
			// Forgotten here (Forget), unless an answer came all the
			// same: one that verifies (a folder writer's junk at its
			// name must not make it outstanding again).
			out, err := c.Result(id)
			if err != nil {
				continue
			}
			out.Close()
		}
		if sent[i].Acked {
			// The acked answer's manifest is read again only for these.
			acked, err := c.keptManifest(id)
			if err != nil || resultStatus(acked) != bridge.StatusUncertain || !c.newAnswerDue(id, acked) {
				continue
			}
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// newAnswerDue reports whether a request whose uncertain answer this home
// acked (acked: that answer's manifest) has a new one: in the folder, or
// to come from a rerun a human ordered.
func (c *Client) newAnswerDue(id string, acked []byte) bool {
	out, err := c.Result(id)
	if err != nil {
		return false
	}
	defer out.Close()
	return !bytes.Equal(out.Manifest, acked) || c.RerunOrdered(out)
}
