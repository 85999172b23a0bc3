package host

import "strings"

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
