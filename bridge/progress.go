package bridge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"

	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// Progress (SPEC §9.3): while an op runs, the host publishes sealed,
// sequence-numbered chunks of its output and a heartbeat, at most one file
// per ProgressInterval, as `<id>.progress-<seq>` in the agent's result
// directory. Each chunk names the hash of the one before it, and the final
// receipt names the last, so the chain is committed to by the signed result.

// ProgressInterval bounds how often a chunk is published; a chunk is also
// published every HeartbeatEvery when the op is silent.
const (
	ProgressInterval = time.Second
	HeartbeatEvery   = 5 * time.Second
	// maxProgressData caps the output one chunk carries; more output between
	// two chunks is counted but not streamed (the result has it).
	maxProgressData = 48 << 10
)

var progressName = regexp.MustCompile(`^([0-9a-f]{32})\.progress-([1-9][0-9]{0,5})$`)

// ProgressPath names chunk seq of request id.
func ProgressPath(host, agent, id string, seq int) string {
	return ToAgentDir(host, agent) + "/" + id + ".progress-" + strconv.Itoa(seq)
}

// ParseProgressName splits a chunk's file name.
func ParseProgressName(name string) (id string, seq int, ok bool) {
	m := progressName.FindStringSubmatch(name)
	if m == nil {
		return "", 0, false
	}
	n, err := strconv.Atoi(m[2])
	return m[1], n, err == nil
}

// Progress is the signed body of a chunk.
type Progress struct {
	V           int    `json:"v"`
	ID          string `json:"id"`
	Host        string `json:"host"`
	Agent       string `json:"agent"`
	AgentBoxKid string `json:"agent_box_kid"`
	Seq         int    `json:"seq"`
	Prev        string `json:"prev"` // hex SHA-256 of chunk seq-1's file, "" for the first
	ElapsedMS   int64  `json:"elapsed_ms"`
	StdoutTotal int64  `json:"stdout_total"` // bytes the op wrote so far
	StderrTotal int64  `json:"stderr_total"`
	Dropped     int64  `json:"dropped"` // bytes not streamed in this chunk (over its cap)
	Key         []byte `json:"key"`
	Data        []byte `json:"data"` // sealed: header {v, stdout_len, stderr_len} ‖ stdout ‖ stderr
}

// chunkHeader is the sealed header of a chunk's data.
type chunkHeader struct {
	V         int   `json:"v"`
	StdoutLen int64 `json:"stdout_len"`
	StderrLen int64 `json:"stderr_len"`
}

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

func newProgress(d *Daemon, j *job) *progress {
	return &progress{d: d, j: j, start: time.Now()}
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
	room := maxProgressData - p.out.Len() - p.err.Len()
	if room < len(b) {
		p.dropped += int64(len(b) - max(room, 0))
		b = b[:max(room, 0)]
	}
	buf.Write(b)
}

// loop publishes chunks until stop is closed.
func (p *progress) loop(stop <-chan struct{}) {
	t := time.NewTicker(ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		due := p.out.Len()+p.err.Len() > 0 || time.Since(p.last) >= HeartbeatEvery
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
	out, _ = p.d.redactor.bytes(out)
	errb, _ = p.d.redactor.bytes(errb)
	p.out.Reset()
	p.err.Reset()
	body := Progress{V: 1, ID: p.j.req.ID, Host: p.d.me, Agent: p.j.agent, Seq: p.seq + 1, Prev: p.prev,
		ElapsedMS: time.Since(p.start).Milliseconds(), StdoutTotal: p.outTotal, StderrTotal: p.errTotal, Dropped: p.dropped}
	p.dropped = 0
	p.mu.Unlock()
	box, ok := p.j.keys.boxPub(p.j.req.ReplyBoxKid)
	if !ok {
		return
	}
	var ct bytes.Buffer
	pin, err := sealPayload(&ct, box, chunkHeader{V: 1, StdoutLen: int64(len(out)), StderrLen: int64(len(errb))},
		[]io.Reader{bytes.NewReader(out), bytes.NewReader(errb)}, nil)
	if err != nil {
		p.d.log.Warn("progress", "err", err)
		return
	}
	body.AgentBoxKid, body.Key, body.Data = bcrypto.Kid(bcrypto.AlgX25519, box), pin.Key, ct.Bytes()
	enc, err := bcrypto.EncodeBody(body)
	if err != nil {
		return
	}
	signed, err := bcrypto.Sign(bcrypto.KindProgress, enc, p.d.own().current)
	if err != nil {
		return
	}
	if err := p.d.folder.Publish(ProgressPath(p.d.me, p.j.agent, p.j.req.ID, body.Seq), writeBytes(signed), syncsafe.WithMode(0o644)); err != nil {
		p.d.log.Warn("publish progress", "err", err)
		return
	}
	p.mu.Lock()
	p.seq, p.prev, p.last = body.Seq, SHA256Hex(signed), time.Now()
	p.mu.Unlock()
}

// head returns the chain's length and last hash, for the receipt.
func (p *progress) head() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq, p.prev
}

// Chunk is one verified progress chunk as the agent reads it.
type Chunk struct {
	Seq         int    `json:"seq"`
	ElapsedMS   int64  `json:"elapsed_ms"`
	StdoutTotal int64  `json:"stdout_total"`
	StderrTotal int64  `json:"stderr_total"`
	Dropped     int64  `json:"dropped"`
	Stdout      []byte `json:"stdout"`
	Stderr      []byte `json:"stderr"`
	sha         string
}

// ErrBrokenChain: a progress chunk does not follow the one before it.
var ErrBrokenChain = errors.New("progress chunks do not chain")

// Progress reads the verified progress chunks of a request from seq from
// on, in order, stopping at the first missing or unverifiable one. prev is
// the hash of chunk from-1 ("" when from is 1). It reads only.
func (c *Client) Progress(id string, from int, prev string) ([]Chunk, error) {
	s, err := c.Sent(id)
	if err != nil {
		return nil, err
	}
	check, own, err := c.resultCheck(s)
	if err != nil {
		return nil, err
	}
	entries, err := c.folder.List(ToAgentDir(s.Host, c.home.Config.ID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var seqs []int
	for _, e := range entries {
		if cid, seq, ok := ParseProgressName(e.Name); ok && cid == id && seq >= from {
			seqs = append(seqs, seq)
		}
	}
	sort.Ints(seqs)
	var out []Chunk
	for i, seq := range seqs {
		if seq != from+i {
			break // a gap: the next one has not arrived yet
		}
		data, err := c.folder.ReadFile(ProgressPath(s.Host, c.home.Config.ID, id, seq), bcrypto.KindProgress.MaxSize())
		if err != nil {
			break
		}
		var p Progress
		if err := openBody(bcrypto.KindProgress, data, check.HostKeys, &p); err != nil {
			break // not (yet) a valid chunk from the host
		}
		if p.V != 1 || p.ID != id || p.Seq != seq || p.Agent != c.home.Config.ID || p.Host != s.Host {
			break
		}
		if p.Prev != prev {
			return out, fmt.Errorf("request %s chunk %d: %w", id, seq, ErrBrokenChain)
		}
		ch, err := c.openChunk(&p, own)
		if err != nil {
			break
		}
		ch.sha = SHA256Hex(data)
		prev = ch.sha
		out = append(out, *ch)
	}
	return out, nil
}

func (c *Client) openChunk(p *Progress, own []OwnKey) (*Chunk, error) {
	var me *bcrypto.Identity
	for _, k := range own {
		if k.Identity.BoxKid() == p.AgentBoxKid {
			me = k.Identity
		}
	}
	if me == nil {
		return nil, bcrypto.ErrUnknownKey
	}
	o, err := bcrypto.NewOpener(bytes.NewReader(p.Data), p.Key, me)
	if err != nil {
		return nil, err
	}
	var h chunkHeader
	if err := readHeader(o, &h); err != nil {
		return nil, err
	}
	// Each length alone first: their sum could overflow.
	if h.StdoutLen < 0 || h.StderrLen < 0 || h.StdoutLen > maxProgressData || h.StderrLen > maxProgressData ||
		h.StdoutLen+h.StderrLen > maxProgressData {
		return nil, bcrypto.ErrMalformed
	}
	ch := &Chunk{Seq: p.Seq, ElapsedMS: p.ElapsedMS, StdoutTotal: p.StdoutTotal, StderrTotal: p.StderrTotal, Dropped: p.Dropped,
		Stdout: make([]byte, h.StdoutLen), Stderr: make([]byte, h.StderrLen)}
	if _, err := io.ReadFull(o, ch.Stdout); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(o, ch.Stderr); err != nil {
		return nil, err
	}
	if n, err := io.Copy(io.Discard, o); err != nil || n != 0 {
		return nil, bcrypto.ErrMalformed
	}
	return ch, nil
}

// ChunkHash is the hash the next chunk (and the receipt) names.
func (ch Chunk) ChunkHash() string { return ch.sha }
