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
// maxCarry (a line that long, a key block that long) is published anyway,
// redacted as it stands; a key block cut that way stays hidden up to its
// END line. The verified result remains what counts (SPEC §9.3).
type progress struct {
	d     *Daemon
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
	// skip: bytes of this stream were dropped (over a chunk's cap), so
	// what follows, up to the next line break, is dropped too: the rest of
	// a secret whose start fell into the gap would match nothing.
	skip bool
	// inKey: a chunk forced out by the bound ended inside a private key,
	// which the redaction hid to the chunk's end: the stream is hidden
	// until the key's END line.
	inKey bool
}

// maxCarry bounds what a stream holds back. Both streams' carries share
// the chunk's cap (bridge.MaxProgressData) with the output that arrives
// meanwhile, so each may hold at most a third of it; a private key (a few
// KiB even for RSA 8192) fits.
const maxCarry = bridge.MaxProgressData / 3

// The private key markers, as the default PEM pattern has them.
var (
	pemBegin = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----`)
	pemEnd   = regexp.MustCompile(`-----END [A-Z0-9 ]*PRIVATE KEY-----`)
)

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

// write is the runner's OnOutput tap: it only buffers, at most a chunk's
// worth for both streams together. What does not fit is dropped from the
// stream, and with it the partial line before the gap and the one after
// (see outStream.skip): no chunk shows a piece of a line cut by a gap.
func (p *progress) write(stream int, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := &p.out
	if stream == 2 {
		s = &p.err
	}
	s.total += int64(len(b))
	if s.skip {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.dropped += int64(len(b))
			return
		}
		p.dropped += int64(i + 1)
		b, s.skip = b[i+1:], false
	}
	room := max(bridge.MaxProgressData-p.out.buf.Len()-p.err.buf.Len(), 0)
	if room >= len(b) {
		s.buf.Write(b)
		return
	}
	kept := b[:room]
	if i := bytes.LastIndexByte(kept, '\n'); i >= 0 {
		kept = kept[:i+1]
	} else {
		whole := bytes.LastIndexByte(s.buf.Bytes(), '\n') + 1
		p.dropped += int64(s.buf.Len() - whole)
		s.buf.Truncate(whole)
		kept = nil
	}
	s.buf.Write(kept)
	p.dropped += int64(len(b) - len(kept))
	s.skip = true
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
	red := p.d.redactorFor(p.j)
	p.mu.Lock()
	out := p.out.take(red, all)
	errb := p.err.take(red, all)
	dropped := p.dropped
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
	body := bridge.Progress{ID: p.j.req.ID, Host: p.d.me, Agent: p.j.agent, Seq: p.seq + 1, Prev: p.prev,
		ElapsedMS: time.Since(p.start).Milliseconds(), StdoutTotal: p.out.total, StderrTotal: p.err.total, Dropped: dropped}
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

// take removes from the stream what the next chunk may carry and returns
// it redacted; the rest stays as the carry. all: the op has exited, so
// everything goes.
func (s *outStream) take(red *redactor, all bool) []byte {
	b := s.buf.Bytes()
	if s.inKey {
		// Hidden up to the key's END line. Its marker may be cut by this
		// flush: the partial line waits, unless the bound or the end says go.
		end := pemEnd.FindIndex(b)
		switch {
		case end != nil:
			b, s.inKey = b[end[1]:], false
		case all || len(b)-(bytes.LastIndexByte(b, '\n')+1) >= maxCarry:
			b = b[len(b):]
		default:
			b = b[bytes.LastIndexByte(b, '\n')+1:]
		}
	}
	cut := len(b)
	if red != nil && !all {
		cut = bytes.LastIndexByte(b, '\n') + 1
		if red.spansLines() {
			cut = 0
		}
		if open := pemOpen(b[:cut]); open >= 0 {
			cut = open
		}
		if len(b)-cut >= maxCarry {
			cut = len(b)
			s.inKey = pemOpen(b) >= 0
		}
	}
	pub := append([]byte(nil), b[:cut]...)
	rest := b[cut:]
	s.buf.Reset() // rest is in its memory: keep it before anything overwrites it
	carry := append([]byte(nil), rest...)
	s.buf.Write(carry)
	pub, _ = red.bytes(pub)
	return pub
}

// pemOpen returns where the first private key of b starts whose END line
// is not in b, or -1 when every key in b ends in b. Keys are read as the
// default pattern reads them: from a BEGIN to the first END after it.
func pemOpen(b []byte) int {
	pos := 0
	for {
		begin := pemBegin.FindIndex(b[pos:])
		if begin == nil {
			return -1
		}
		end := pemEnd.FindIndex(b[pos+begin[1]:])
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
