package host

import (
	"math"
	"strings"
	"sync"

	"github.com/syncbridge/bridge/bridge/policy"
)

// scheduler decides when a request's key is worked on, under a lock of its
// own: keys ("agent/id") wait in a queue until one of a fixed number of
// evaluation workers takes them, so hostile volume costs queue entries, not
// goroutines. A key is active from the moment a worker (or an operator's
// decision, a sweep, recovery) takes it until its evaluation ends or, if it
// runs, its run ends; a key scheduled while active is marked dirty and
// queued again afterwards. It also holds each op's slots (its concurrency,
// admit.go) and the places of the requests waiting for them.
type scheduler struct {
	*base // the policy in force (the limits) and the daemon's closing
	// mu is taken after the Daemon's lock (Close), never before it.
	mu    sync.Mutex
	cond  *sync.Cond
	queue []string
	// queued, active and dirty are sets of keys.
	queued, active, dirty map[string]bool
	slots                 map[string]*opSlots  // per op with runs or a concurrency
	opQueued              map[string]int       // per op with a concurrency: requests claimed and not yet ended
	deferred              map[string]*keyQueue // per op: keys left unclaimed while it was full
	ceil                  ceilings             // per-agent ceilings (ceilings.go), under a lock of their own
}

func newScheduler(b *base) *scheduler {
	s := &scheduler{base: b, queued: map[string]bool{}, active: map[string]bool{}, dirty: map[string]bool{},
		slots: map[string]*opSlots{}, opQueued: map[string]int{}, deferred: map[string]*keyQueue{}}
	s.cond = sync.NewCond(&s.mu)
	s.ceil.base = b
	return s
}

// close marks the daemon closing and wakes every worker to return: no key
// is taken from here on.
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing.Store(true)
	s.cond.Broadcast()
}

// idle reports whether no key waits in the queue.
func (s *scheduler) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) == 0
}

// relimit applies a reloaded policy's concurrency limits to the ops' slots:
// a raised limit frees its waiters now; a removed op's waiters stay until a
// slot frees, and are then refused (stillAsAdmitted).
func (s *scheduler) relimit(p *policy.Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for op, o := range s.slots {
		switch c, ok := p.Concurrency(op); {
		case ok && c > 0:
			o.limit = c
		case ok:
			o.limit = math.MaxInt
		}
		s.grantSlots(o)
	}
}

// schedule queues a request for evaluation. A request that changes while it
// is being evaluated or run is evaluated once more afterwards.
func (s *scheduler) schedule(agent, id string) {
	key := agent + "/" + id
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing.Load():
	case s.active[key]:
		s.dirty[key] = true
	case !s.queued[key]:
		s.queued[key] = true
		s.queue = append(s.queue, key)
		s.cond.Signal()
	}
}

// worker evaluates queued keys until the daemon closes. A key someone else
// owns meanwhile (an operator's decision, recovery) is evaluated again once
// it is released.
func (d *Daemon) worker() {
	defer d.wg.Done()
	for {
		key, ok := d.sched.next()
		if !ok {
			return
		}
		agent, id, _ := strings.Cut(key, "/")
		if !d.evaluate(agent, id) {
			d.sched.release(key)
		}
	}
}

// next waits for a queued key that nobody works on and makes it active;
// false once the daemon closes.
func (s *scheduler) next() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for len(s.queue) == 0 && !s.closing.Load() {
			s.cond.Wait()
		}
		if s.closing.Load() {
			return "", false
		}
		key := s.queue[0]
		s.queue[0] = "" // not kept alive by the array behind the queue
		s.queue = s.queue[1:]
		delete(s.queued, key)
		if len(s.queue) == 0 {
			// A burst's array and buckets go with it (a map never
			// shrinks): 100,000 names of junk cost nothing once read.
			s.queue, s.queued = nil, map[string]bool{}
		}
		if s.active[key] {
			s.dirty[key] = true
			continue
		}
		s.active[key] = true
		return key, true
	}
}

// take takes a request's key for work outside the queue (an operator's
// decision, an expiry sweep, recovery): nothing else evaluates, runs or
// answers it until release. It reports false if the key is busy.
func (s *scheduler) take(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active[key] || s.closing.Load() {
		return false
	}
	s.active[key] = true
	return true
}

// release ends a key's activity and queues it again if it changed meanwhile.
func (s *scheduler) release(key string) {
	s.mu.Lock()
	delete(s.active, key)
	again := s.dirty[key]
	delete(s.dirty, key)
	s.mu.Unlock()
	if again {
		agent, id, _ := strings.Cut(key, "/")
		s.schedule(agent, id)
	}
}

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

// An op with a concurrency runs that many at a time; the requests for it
// beyond that are claimed and wait for a slot, each holding its decrypted
// stdin (in memory up to 256 KiB, else a file in the home) and a
// goroutine. So that an agent cannot make the host hold any number of
// them, at most limits.waitingPerSlot times the concurrency wait: a
// request beyond that is left unclaimed (seen or pending in the ledger, its
// spools released) and evaluated again when a run of the op ends, or by the
// next rescan.
//
// reserveQueue reports whether a request for op may be claimed now, and
// counts it if so; otherwise it remembers key for when a run of op ends.
// The returned function gives the place back (and evaluates the next
// deferred key); call it once the request ended or was not claimed after
// all.
func (s *scheduler) reserveQueue(op string, concurrency int, key string) (func(), bool) {
	if concurrency <= 0 {
		return func() {}, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opQueued[op] >= concurrency*(1+s.limits.waitingPerSlot) {
		q := s.deferred[op]
		if q == nil {
			q = &keyQueue{in: map[string]bool{}}
			s.deferred[op] = q
		}
		q.push(key)
		return nil, false
	}
	s.opQueued[op]++
	return func() { s.releaseQueue(op) }, true
}

// releaseQueue gives back a place reserveQueue counted, and schedules the
// request deferred longest for op.
func (s *scheduler) releaseQueue(op string) {
	s.mu.Lock()
	s.opQueued[op]--
	var next string
	if q := s.deferred[op]; q != nil {
		next, _ = q.pop()
		if len(q.order) == 0 {
			delete(s.deferred, op)
		}
	}
	s.mu.Unlock()
	if agent, id, ok := strings.Cut(next, "/"); ok {
		s.schedule(agent, id)
	}
}
