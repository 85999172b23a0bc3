package bridge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	bcrypto "github.com/syncbridge/bridge/crypto"
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
	// MaxProgressData caps the output one chunk carries; more output between
	// two chunks is counted but not streamed (the result has it).
	MaxProgressData = 48 << 10
)

// ProgressPath names chunk seq of request id.
func ProgressPath(host, agent, id string, seq int) string {
	return ToAgentDir(host, agent) + "/" + id + ".progress-" + strconv.Itoa(seq)
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

// SealProgress seals a chunk's output to the agent's box key and returns the
// signed chunk file. p names everything but AgentBoxKid, Key and Data, which
// it fills in.
func SealProgress(p Progress, stdout, stderr []byte, host *bcrypto.Identity, agentBoxPub []byte) ([]byte, error) {
	if len(stdout)+len(stderr) > MaxProgressData {
		return nil, fmt.Errorf("progress %s: %w: %d bytes of output", p.ID, ErrTooLarge, len(stdout)+len(stderr))
	}
	var ct bytes.Buffer
	pin, err := sealPayload(&ct, agentBoxPub, chunkHeader{V: 1, StdoutLen: int64(len(stdout)), StderrLen: int64(len(stderr))},
		[]io.Reader{bytes.NewReader(stdout), bytes.NewReader(stderr)}, nil)
	if err != nil {
		return nil, err
	}
	p.V, p.AgentBoxKid, p.Key, p.Data = 1, bcrypto.Kid(bcrypto.AlgX25519, agentBoxPub), pin.Key, ct.Bytes()
	enc, err := bcrypto.EncodeBody(p)
	if err != nil {
		return nil, err
	}
	return bcrypto.Sign(bcrypto.KindProgress, enc, host)
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

// ChunkHash is the hash the next chunk (and the receipt) names.
func (ch Chunk) ChunkHash() string { return ch.sha }

// ErrBrokenChain: a progress chunk does not follow the one before it.
var ErrBrokenChain = errors.New("progress chunks do not chain")

// ProgressCheck is what a reader knows when it judges the chunk file found
// as <ID>.progress-<Seq>.
type ProgressCheck struct {
	ID, Host, Agent string
	Seq             int
	Prev            string   // hash of chunk Seq-1 ("" for the first)
	HostKeys        [][]byte // signing keys accepted for the host
}

// OpenProgress verifies a chunk file's signature, names and place in the
// chain; it does not decrypt (see OpenChunk). A chunk that verifies but
// names another predecessor fails with ErrBrokenChain.
func OpenProgress(data []byte, c ProgressCheck) (*Progress, error) {
	var p Progress
	if err := OpenBody(bcrypto.KindProgress, data, c.HostKeys, &p); err != nil {
		return nil, err
	}
	if p.V != 1 || p.ID != c.ID || p.Seq != c.Seq || p.Agent != c.Agent || p.Host != c.Host {
		return nil, fmt.Errorf("progress %s chunk %d: %w", c.ID, c.Seq, ErrNameMismatch)
	}
	if p.Prev != c.Prev {
		return nil, fmt.Errorf("request %s chunk %d: %w", c.ID, c.Seq, ErrBrokenChain)
	}
	return &p, nil
}

// OpenChunk decrypts a verified chunk with the agent's key; data is the
// chunk file, whose hash the next chunk names.
func OpenChunk(p *Progress, data []byte, me *bcrypto.Identity) (*Chunk, error) {
	if me.BoxKid() != p.AgentBoxKid {
		return nil, bcrypto.ErrUnknownKey
	}
	o, err := bcrypto.NewOpener(bytes.NewReader(p.Data), p.Key, me)
	if err != nil {
		return nil, err
	}
	var h chunkHeader
	if _, err := readHeader(o, &h); err != nil {
		return nil, err
	}
	// Each length alone first: their sum could overflow.
	if h.StdoutLen < 0 || h.StderrLen < 0 || h.StdoutLen > MaxProgressData || h.StderrLen > MaxProgressData ||
		h.StdoutLen+h.StderrLen > MaxProgressData {
		return nil, bcrypto.ErrMalformed
	}
	ch := &Chunk{Seq: p.Seq, ElapsedMS: p.ElapsedMS, StdoutTotal: p.StdoutTotal, StderrTotal: p.StderrTotal, Dropped: p.Dropped,
		Stdout: make([]byte, h.StdoutLen), Stderr: make([]byte, h.StderrLen), sha: SHA256Hex(data)}
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
