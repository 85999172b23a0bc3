package host

import (
	"bytes"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"

	"github.com/syncbridge/bridge/syncsafe"
)

// progress collects an op's output and publishes chunks.
type progress struct {
	d     *Daemon
	j     *job
	start time.Time

	mu       sync.Mutex
	out, err bytes.Buffer
	outTotal int64
	errTotal int64
	dropped  int64

	seq  int
	prev string
	last time.Time
}

// newProgress starts the publisher of a run's output. A run after a crash
// (an idempotent re-run, a human's rerun) continues the chain the earlier
// run left in the folder, so that the agent reads one verified stream and
// the result commits to its head: it follows the chunks this host signed,
// in order, from the first. Anything after them at a chunk name is not part
// of the chain and is replaced (the host owns those names).
func (d *Daemon) newProgress(j *job) *progress {
	p := &progress{d: d, j: j, start: time.Now()}
	keys := d.own().signPubs()
	for seq := 1; ; seq++ {
		data, err := d.folder.ReadFile(bridge.ProgressPath(d.me, j.agent, j.req.ID, seq), bcrypto.KindProgress.MaxSize())
		if err != nil {
			break
		}
		c := bridge.ProgressCheck{ID: j.req.ID, Host: d.me, Agent: j.agent, Seq: seq, Prev: p.prev, HostKeys: keys}
		if _, err := bridge.OpenProgress(data, c); err != nil {
			break
		}
		p.seq, p.prev = seq, bridge.SHA256Hex(data)
	}
	if p.seq > 0 {
		d.log.Info("progress: continuing the chain of an earlier run", "key", j.key, "chunks", p.seq)
	}
	return p
}

// write is the runner's OnOutput tap: it only buffers.
func (p *progress) write(stream int, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	buf, total := &p.out, &p.outTotal
	if stream == 2 {
		buf, total = &p.err, &p.errTotal
	}
	*total += int64(len(b))
	room := bridge.MaxProgressData - p.out.Len() - p.err.Len()
	if room < len(b) {
		p.dropped += int64(len(b) - max(room, 0))
		b = b[:max(room, 0)]
	}
	buf.Write(b)
}

// loop publishes chunks until stop is closed.
func (p *progress) loop(stop <-chan struct{}) {
	t := time.NewTicker(bridge.ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		due := p.out.Len()+p.err.Len() > 0 || time.Since(p.last) >= bridge.HeartbeatEvery
		p.mu.Unlock()
		if due {
			p.flush()
		}
	}
}

// flush publishes one chunk with what was buffered.
func (p *progress) flush() {
	p.mu.Lock()
	out, errb := append([]byte(nil), p.out.Bytes()...), append([]byte(nil), p.err.Bytes()...)
	// Secrets are redacted before anything is sealed (a secret split across
	// two chunks can escape the patterns; the final result is redacted whole).
	red := p.d.redactorFor(p.j)
	out, _ = red.bytes(out)
	errb, _ = red.bytes(errb)
	p.out.Reset()
	p.err.Reset()
	body := bridge.Progress{ID: p.j.req.ID, Host: p.d.me, Agent: p.j.agent, Seq: p.seq + 1, Prev: p.prev,
		ElapsedMS: time.Since(p.start).Milliseconds(), StdoutTotal: p.outTotal, StderrTotal: p.errTotal, Dropped: p.dropped}
	p.dropped = 0
	p.mu.Unlock()
	box, ok := p.j.keys.boxPub(p.j.req.ReplyBoxKid)
	if !ok {
		return
	}
	signed, err := bridge.SealProgress(body, out, errb, p.d.own().current, box)
	if err != nil {
		p.d.log.Warn("progress", "err", err)
		return
	}
	if err := p.d.folder.PublishReplace(bridge.ProgressPath(p.d.me, p.j.agent, p.j.req.ID, body.Seq), bridge.WriteBytes(signed), syncsafe.WithMode(0o644)); err != nil {
		p.d.log.Warn("publish progress", "err", err)
		return
	}
	p.mu.Lock()
	p.seq, p.prev, p.last = body.Seq, bridge.SHA256Hex(signed), time.Now()
	p.mu.Unlock()
}

// final publishes what the op wrote after the last chunk, once it has
// exited, so that a follower of a streamed run sees all of its output
// before the result. A run too short to stream anything publishes no chunk
// at all: its result carries the output, and the follower prints it from
// there.
func (p *progress) final() {
	p.mu.Lock()
	due := p.seq > 0 && p.out.Len()+p.err.Len()+int(p.dropped) > 0
	p.mu.Unlock()
	if due {
		p.flush()
	}
}

// head returns the chain's length and last hash, for the receipt.
func (p *progress) head() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq, p.prev
}
