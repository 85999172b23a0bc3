package host

import "strings"

// schedule queues a request for evaluation. A request that changes while it
// is being evaluated or run is evaluated once more afterwards.
func (d *Daemon) schedule(agent, id string) {
	key := agent + "/" + id
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closing:
	case d.active[key]:
		d.dirty[key] = true
	case !d.queued[key]:
		d.queued[key] = true
		d.queue = append(d.queue, key)
		d.cond.Signal()
	}
}

// worker evaluates queued keys until the daemon closes. A key someone else
// owns meanwhile (an operator's decision, recovery) is evaluated again once
// it is released.
func (d *Daemon) worker() {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		for len(d.queue) == 0 && !d.closing {
			d.cond.Wait()
		}
		if d.closing {
			d.mu.Unlock()
			return
		}
		key := d.queue[0]
		d.queue[0] = "" // not kept alive by the array behind the queue
		d.queue = d.queue[1:]
		delete(d.queued, key)
		if len(d.queue) == 0 {
			// A burst's array and buckets go with it (a map never
			// shrinks): 100,000 names of junk cost nothing once read.
			d.queue, d.queued = nil, map[string]bool{}
		}
		if d.active[key] {
			d.dirty[key] = true
			d.mu.Unlock()
			continue
		}
		d.active[key] = true
		d.mu.Unlock()
		agent, id, _ := strings.Cut(key, "/")
		if !d.evaluate(agent, id) {
			d.release(key)
		}
	}
}

// take takes a request's key for work outside the queue (an operator's
// decision, an expiry sweep, recovery): nothing else evaluates, runs or
// answers it until release. It reports false if the key is busy.
func (d *Daemon) take(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.active[key] || d.closing {
		return false
	}
	d.active[key] = true
	return true
}

// release ends a key's activity and queues it again if it changed meanwhile.
func (d *Daemon) release(key string) {
	d.mu.Lock()
	delete(d.active, key)
	again := d.dirty[key]
	delete(d.dirty, key)
	d.mu.Unlock()
	if again {
		agent, id, _ := strings.Cut(key, "/")
		d.schedule(agent, id)
	}
}

// An op with a concurrency runs that many at a time; the requests for it
// beyond that are claimed and wait for a slot, each holding its decrypted
// stdin (in memory up to 256 KiB, else a file in the home) and a
// goroutine. So that an agent cannot make the host hold any number of
// them, at most maxWaitingPerSlot times the concurrency wait: a request
// beyond that is left unclaimed (seen or pending in the ledger, its spools
// released) and evaluated again when a run of the op ends, or by the next
// rescan.
var maxWaitingPerSlot = 8

// keyQueue is a first-in, first-out set of ledger keys.
type keyQueue struct {
	order []string
	in    map[string]bool
}

func (q *keyQueue) push(key string) {
	if q.in[key] {
		return
	}
	q.in[key] = true
	q.order = append(q.order, key)
}

func (q *keyQueue) pop() (string, bool) {
	if len(q.order) == 0 {
		return "", false
	}
	key := q.order[0]
	q.order = q.order[1:]
	delete(q.in, key)
	return key, true
}

// reserveQueue reports whether a request for op may be claimed now, and
// counts it if so; otherwise it remembers key for when a run of op ends.
// The returned function gives the place back (and evaluates the next
// deferred key); call it once the request ended or was not claimed after
// all.
func (d *Daemon) reserveQueue(op string, concurrency int, key string) (func(), bool) {
	if concurrency <= 0 {
		return func() {}, true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.opQueued[op] >= concurrency*(1+maxWaitingPerSlot) {
		q := d.deferred[op]
		if q == nil {
			q = &keyQueue{in: map[string]bool{}}
			d.deferred[op] = q
		}
		q.push(key)
		return nil, false
	}
	d.opQueued[op]++
	return func() { d.releaseQueue(op) }, true
}

// releaseQueue gives back a place reserveQueue counted, and schedules the
// request deferred longest for op.
func (d *Daemon) releaseQueue(op string) {
	d.mu.Lock()
	d.opQueued[op]--
	var next string
	if q := d.deferred[op]; q != nil {
		next, _ = q.pop()
		if len(q.order) == 0 {
			delete(d.deferred, op)
		}
	}
	d.mu.Unlock()
	if agent, id, ok := strings.Cut(next, "/"); ok {
		d.schedule(agent, id)
	}
}
