package host

import (
	"bytes"
	"regexp"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// progress collects an op's output and publishes chunks.
//
// Chunks are redacted like the result, but the result is redacted whole
// and a chunk is a piece of the output: a secret the op prints across a
// flush (a second apart) would match no pattern in either piece. So a
// chunk carries output only up to the last line break; the rest of the
// line waits for the next chunk (the carry), and all of it goes out once
// the op has exited. None of the default patterns matches a line break,
// save the private key's (see pemOpen), so a match never spans two
// chunks; a policy pattern that can match one makes the host hold the
// output until the bound (redactor.spansLines). The bound: a carry longer than
// maxCarry (a line that long, a key block that long) is never cut and sent
// in pieces; the stream halts there, as after a gap (outStream.halted).
// The verified result remains what counts (SPEC §9.3).
type progress struct {
	o     *outbox
	j     *job
	start time.Time

	mu       sync.Mutex
	out, err outStream
	dropped  int64

	seq  int
	prev string
	last time.Time
}

// outStream is one of the op's output streams between chunks.
type outStream struct {
	buf   bytes.Buffer // written by the op, published by no chunk yet (the carry first)
	total int64        // bytes the op wrote
	// halted: bytes of this stream were dropped (over a chunk's cap), or
	// its carry outgrew maxCarry: nothing more of it is streamed, and the
	// result carries it. Whatever came after a gap or a forced cut could be
	// the rest of a secret whose start no chunk showed (a private key's
	// body after its BEGIN line, a token's second half), which the
	// patterns would not match alone; what was streamed stays a prefix of
	// the result.
	halted bool
}

// maxCarry bounds what a stream holds back. Both streams' carries share
// the chunk's cap (bridge.MaxProgressData) with the output that arrives
// meanwhile, so each may hold at most a third of it; a private key (a few
// KiB even for RSA 8192) fits.
const maxCarry = bridge.MaxProgressData / 3

// The private key markers, as the default PEM pattern has them, compiled
// on first use (only a daemon streams output).
var (
	pemBegin = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----`) })
	pemEnd   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`-----END [A-Z0-9 ]*PRIVATE KEY-----`) })
)

// newProgress starts the publisher of a run's output. A run after a crash
// (an idempotent re-run, a human's rerun) continues the chain the earlier
// run left in the folder, so that the agent reads one verified stream and
// the result commits to its head: it follows the chunks this host signed,
// in order, from the first. Anything after them at a chunk name is not part
// of the chain and is replaced (the host owns those names).
func (o *outbox) newProgress(j *job) *progress {
	p := &progress{o: o, j: j, start: time.Now()}
	keys := o.own().signPubs()
	for seq := 1; ; seq++ {
		data, err := o.folder.ReadFile(bridge.ProgressPath(o.me, j.agent, j.req.ID, seq), bcrypto.KindProgress.MaxSize())
		if err != nil {
			break
		}
		c := bridge.ProgressCheck{ID: j.req.ID, Host: o.me, Agent: j.agent, Seq: seq, Prev: p.prev, HostKeys: keys}
		if _, err := bridge.OpenProgress(data, c); err != nil {
			break
		}
		p.seq, p.prev = seq, bridge.SHA256Hex(data)
	}
	if p.seq > 0 {
		o.log.Info("progress: continuing the chain of an earlier run", "key", j.key, "chunks", p.seq)
	}
	return p
}

// write is the runner's OnOutput tap: it only buffers, at most a chunk's
// worth for both streams together. When that does not fit, the stream
// keeps its whole lines and halts (see outStream.halted): no chunk shows a
// piece of a line cut by a gap, nor anything after it.
func (p *progress) write(stream int, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := &p.out
	if stream == 2 {
		s = &p.err
	}
	s.total += int64(len(b))
	if s.halted {
		p.dropped += int64(len(b))
		return
	}
	room := max(bridge.MaxProgressData-p.out.buf.Len()-p.err.buf.Len(), 0)
	if room >= len(b) {
		s.buf.Write(b)
		return
	}
	whole := bytes.LastIndexByte(s.buf.Bytes(), '\n') + 1
	p.dropped += int64(s.buf.Len()-whole) + int64(len(b))
	s.buf.Truncate(whole)
	s.halted = true
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
		p.flush(false)
	}
}

// flush publishes one chunk with the output that may go out (all of it
// once the op has exited), or a heartbeat when it is due.
func (p *progress) flush(all bool) {
	red := p.o.redactorFor(p.j)
	p.mu.Lock()
	out, d1 := p.out.take(red, all)
	errb, d2 := p.err.take(red, all)
	dropped := p.dropped + d1 + d2
	// Redaction may lengthen the text (a short password becomes
	// [REDACTED]); what is over the chunk's cap is not streamed.
	if over := len(out) + len(errb) - bridge.MaxProgressData; over > 0 {
		cut := min(over, len(errb))
		errb = errb[:len(errb)-cut]
		out = out[:len(out)-(over-cut)]
		dropped += int64(over)
	}
	if len(out)+len(errb) == 0 && dropped == 0 && !all && time.Since(p.last) < bridge.HeartbeatEvery {
		p.mu.Unlock()
		return
	}
	body := bridge.Progress{ID: p.j.req.ID, Host: p.o.me, Agent: p.j.agent, Seq: p.seq + 1, Prev: p.prev,
		ElapsedMS: time.Since(p.start).Milliseconds(), StdoutTotal: p.out.total, StderrTotal: p.err.total, Dropped: dropped}
	p.dropped = 0
	p.mu.Unlock()
	box, ok := p.j.keys.boxPub(p.j.req.ReplyBoxKid)
	if !ok {
		return
	}
	signed, err := bridge.SealProgress(body, out, errb, p.o.own().current, box)
	if err != nil {
		p.o.log.Warn("progress", "err", err)
		return
	}
	if err := p.o.folder.PublishReplace(bridge.ProgressPath(p.o.me, p.j.agent, p.j.req.ID, body.Seq), bridge.WriteBytes(signed), syncsafe.WithMode(0o644)); err != nil {
		p.o.log.Warn("publish progress", "err", err)
		return
	}
	p.mu.Lock()
	p.seq, p.prev, p.last = body.Seq, bridge.SHA256Hex(signed), time.Now()
	p.mu.Unlock()
}

// take removes from the stream what the next chunk may carry and returns
// it redacted, with how many bytes it dropped; the rest stays as the
// carry. all: the op has exited, so everything goes (unless the stream
// halted: the result has it).
func (s *outStream) take(red *redactor, all bool) ([]byte, int64) {
	b := s.buf.Bytes()
	cut := len(b)
	var dropped int64
	if red != nil && (!all || s.halted) {
		cut = bytes.LastIndexByte(b, '\n') + 1
		if red.spansLines() {
			cut = 0
		}
		if open := pemOpen(b[:cut]); open >= 0 {
			cut = open
		}
		if len(b)-cut >= maxCarry || (all && s.halted) {
			// Too long to hold, and unsafe to cut: the rest is the
			// result's to show.
			dropped, s.halted = int64(len(b)-cut), true
			b = b[:cut]
		}
	}
	pub := append([]byte(nil), b[:cut]...)
	carry := append([]byte(nil), b[cut:]...)
	s.buf.Reset()
	s.buf.Write(carry)
	pub, _ = red.bytes(pub)
	return pub, dropped
}

// pemOpen returns where the first private key of b starts whose END line
// is not in b, or -1 when every key in b ends in b. Keys are read as the
// default pattern reads them: from a BEGIN to the first END after it.
func pemOpen(b []byte) int {
	pos := 0
	for {
		begin := pemBegin().FindIndex(b[pos:])
		if begin == nil {
			return -1
		}
		end := pemEnd().FindIndex(b[pos+begin[1]:])
		if end == nil {
			return pos + begin[0]
		}
		pos += begin[1] + end[1]
	}
}

// final publishes what the op wrote after the last chunk, once it has
// exited, so that a follower of a streamed run sees all of its output
// before the result. A run too short to stream anything publishes no chunk
// at all: its result carries the output, and the follower prints it from
// there.
func (p *progress) final() {
	p.mu.Lock()
	due := p.seq > 0 && p.out.buf.Len()+p.err.buf.Len()+int(p.dropped) > 0
	p.mu.Unlock()
	if due {
		p.flush(true)
	}
}

// head returns the chain's length and last hash, for the receipt.
func (p *progress) head() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq, p.prev
}
