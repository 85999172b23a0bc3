package bridge

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"time"

	bcrypto "github.com/syncbridge/bridge/crypto"
)

// Protocol limits (SPEC §6).
const (
	// MaxHeader caps the JSON header at the front of a payload's plaintext.
	MaxHeader = 64 << 10
	// MaxPayload caps a request payload's ciphertext.
	MaxPayload = 4 << 30
	// MaxValidity is the longest a request may be valid (expires - created).
	MaxValidity = 7 * 24 * time.Hour
	// DefaultSkew is how far the peer's clock may run ahead of ours.
	DefaultSkew = 10 * time.Minute
)

// PingOp is the built-in no-op every trusted agent may call: a round trip
// through the sync that runs no process.
const PingOp = "bridge.ping"

// Errors a request or result is refused with. Reason turns any error into the
// short code that goes into audit lines and rejected results.
var (
	ErrWrongRecipient = errors.New("addressed to another party")
	ErrExpired        = errors.New("expired")
	ErrNotYetValid    = errors.New("created in the future")
	ErrNameMismatch   = errors.New("file name does not match the signed content")
	ErrPending        = errors.New("payload not complete yet")
	ErrHashMismatch   = errors.New("payload does not match the manifest")
	ErrWrongRequest   = errors.New("result is bound to another request")
	ErrNotAllowed     = errors.New("not allowed")
	ErrReplay         = errors.New("id already used with other content")
	ErrTooLarge       = errors.New("too large")
	ErrKeyRevoked     = errors.New("signed by a revoked key")
	ErrKeyExpired     = errors.New("signed by a key whose overlap after a rotation has ended")
)

// Payload pins a sealed payload file from inside a signed manifest: its exact
// length and SHA-256, and the payload key wrapped for the recipient.
type Payload struct {
	Len    int64  `json:"len"`
	SHA256 string `json:"sha256"`
	Key    []byte `json:"key"`
}

// Request is the signed body of <id>.manifest (SPEC §7.1). It carries no
// operation name or argument: those are sealed in the payload.
type Request struct {
	V           int     `json:"v"`
	ID          string  `json:"id"`
	Agent       string  `json:"agent"`         // agent party id; equals the directory it is found in
	AgentKid    string  `json:"agent_kid"`     // kid of the signing key
	Host        string  `json:"host"`          // host party id
	HostBoxKid  string  `json:"host_box_kid"`  // the host key the payload key is wrapped for
	ReplyBoxKid string  `json:"reply_box_kid"` // the agent key the result must be sealed to
	Created     int64   `json:"created"`       // unix seconds, agent clock
	Expires     int64   `json:"expires"`       // unix seconds, agent clock
	Payload     Payload `json:"payload"`
}

// Call is the sealed header of a request payload: what to run. Argument values
// are strings; the host's policy gives them types.
type Call struct {
	V    int               `json:"v"`
	Op   string            `json:"op"`
	Args map[string]string `json:"args"`
}

// Result is the signed body of <id>.result (SPEC §9.1).
type Result struct {
	V             int     `json:"v"`
	ID            string  `json:"id"`
	Host          string  `json:"host"`
	HostKid       string  `json:"host_kid"`
	Agent         string  `json:"agent"`
	AgentBoxKid   string  `json:"agent_box_kid"`
	RequestSHA256 string  `json:"request_sha256"` // of the exact request manifest file
	Status        string  `json:"status"`
	Created       int64   `json:"created"`
	Payload       Payload `json:"payload"`
}

// Result statuses.
const (
	StatusDone      = "done"      // the operation ran; see the receipt's exit code
	StatusFailed    = "failed"    // the operation could not be started
	StatusRejected  = "rejected"  // refused before running; the receipt says why
	StatusExpired   = "expired"   // arrived or waited past its expiry
	StatusCancelled = "cancelled" // cancelled by the agent
	StatusUncertain = "uncertain" // the host crashed while it ran; a human decides
)

// Receipt is the sealed header of a result's output file: what the host ran,
// under which policy, and how it ended. The signature on the result manifest
// covers it through the pinned output hash.
type Receipt struct {
	V               int        `json:"v"`
	ID              string     `json:"id"`
	RequestSHA256   string     `json:"request_sha256"`
	Status          string     `json:"status"`
	Reason          ReasonCode `json:"reason"`
	Detail          string     `json:"detail"`
	Op              string     `json:"op"`
	Argv            []string   `json:"argv"`
	PolicySHA256    string     `json:"policy_sha256"`
	ExitCode        int        `json:"exit_code"`
	Signal          string     `json:"signal"`
	TimedOut        bool       `json:"timed_out"`
	Started         int64      `json:"started_ms"`
	Finished        int64      `json:"finished_ms"`
	StdoutLen       int64      `json:"stdout_len"`
	StdoutTotal     int64      `json:"stdout_total"`
	StdoutTruncated bool       `json:"stdout_truncated"`
	StderrLen       int64      `json:"stderr_len"`
	StderrTotal     int64      `json:"stderr_total"`
	StderrTruncated bool       `json:"stderr_truncated"`
	ProgressCount   int        `json:"progress_count"` // progress chunks published while it ran (SPEC §9.3)
	ProgressHead    string     `json:"progress_head"`  // hex SHA-256 of the last chunk's file, "" if none
}

// Cancel is the signed body of <id>.cancel.
type Cancel struct {
	V       int    `json:"v"`
	ID      string `json:"id"`
	Agent   string `json:"agent"`
	Host    string `json:"host"`
	Created int64  `json:"created"`
}

// Ack is the signed body of <id>.ack: the agent holds the result and the host
// may collect it.
type Ack struct {
	V            int    `json:"v"`
	ID           string `json:"id"`
	Agent        string `json:"agent"`
	Host         string `json:"host"`
	ResultSHA256 string `json:"result_sha256"`
	Created      int64  `json:"created"`
}

func (r *Request) check() error {
	switch {
	case r.V != 1:
		return fmt.Errorf("request: %w: v=%d", bcrypto.ErrUnknownVersion, r.V)
	case !ValidID(r.ID):
		return fmt.Errorf("request: %w: id %q", bcrypto.ErrMalformed, r.ID)
	case !bcrypto.ValidKid(r.Agent), !bcrypto.ValidKid(r.AgentKid), !bcrypto.ValidKid(r.Host),
		!bcrypto.ValidKid(r.HostBoxKid), !bcrypto.ValidKid(r.ReplyBoxKid):
		return fmt.Errorf("request: %w: bad party id or kid", bcrypto.ErrMalformed)
	case r.Expires <= r.Created:
		return fmt.Errorf("request: %w: expires before it is created", bcrypto.ErrMalformed)
	}
	return r.Payload.check(MaxPayload)
}

func (p *Payload) check(max int64) error {
	switch {
	case p.Len < 0 || bcrypto.OpenedSize(p.Len) < 0:
		return fmt.Errorf("payload: %w: length %d is not a sealed length", bcrypto.ErrMalformed, p.Len)
	case p.Len > max:
		return fmt.Errorf("payload: %w: %d bytes, cap %d", ErrTooLarge, p.Len, max)
	case !validSHA256Hex(p.SHA256):
		return fmt.Errorf("payload: %w: sha256 %q", bcrypto.ErrMalformed, p.SHA256)
	case len(p.Key) != bcrypto.WrappedKeySize:
		return fmt.Errorf("payload: %w: wrapped key of %d bytes", bcrypto.ErrMalformed, len(p.Key))
	}
	return nil
}

// Digest returns the payload's pinned SHA-256 as bytes.
func (p *Payload) Digest() [32]byte {
	var d [32]byte
	hex.Decode(d[:], []byte(p.SHA256))
	return d
}

// RequestCheck is what a host knows when it judges a request manifest.
type RequestCheck struct {
	Host        string            // my party id
	HostBoxKids []string          // encryption kids I hold private keys for
	Agent       string            // the agent directory the manifest was found in
	AgentKeys   [][]byte          // signing keys accepted for that agent now
	AgentBoxKid func(string) bool // reports whether a box kid belongs to that agent
	Now         time.Time
	Skew        time.Duration
}

// OpenRequest verifies a request manifest file found as <stem>.manifest in the
// agent's directory, and returns its body. Checks run cheapest first, and the
// body is decoded only after a signature verified (SPEC §8). When the request
// is authentic, addressed to this host and answerable but refused for its
// times (expired, not yet valid, valid too long), both the request and the
// error are returned.
func OpenRequest(data []byte, stem string, c RequestCheck) (*Request, error) {
	var r Request
	if err := OpenBody(bcrypto.KindRequest, data, c.AgentKeys, &r); err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	if r.ID != stem || r.Agent != c.Agent {
		return nil, fmt.Errorf("request %s: %w", stem, ErrNameMismatch)
	}
	if r.Host != c.Host || !slices.Contains(c.HostBoxKids, r.HostBoxKid) {
		return nil, fmt.Errorf("request %s: %w: host %s", r.ID, ErrWrongRecipient, r.Host)
	}
	if c.AgentBoxKid != nil && !c.AgentBoxKid(r.ReplyBoxKid) {
		return nil, fmt.Errorf("request %s: %w: reply key %s is not the agent's", r.ID, bcrypto.ErrUnknownKey, r.ReplyBoxKid)
	}
	// From here on the request is authentic and answerable: refusals return
	// it too, so the host can send a signed rejection.
	if err := checkTimes(r.Created, r.Expires, c.Now, c.Skew); err != nil {
		return &r, fmt.Errorf("request %s: %w", r.ID, err)
	}
	return &r, nil
}

func checkTimes(created, expires int64, now time.Time, skew time.Duration) error {
	if skew == 0 {
		skew = DefaultSkew
	}
	switch {
	case time.Unix(created, 0).After(now.Add(skew)):
		// Said with both clocks: the agent's is ahead of the host's by
		// about the difference (less the sync's delay), and the agent
		// names it so (bridge run's not-yet-valid hint).
		return fmt.Errorf("%w: created %s, %s ahead of the host's clock (%s; it allows %s): a clock is wrong on one side",
			ErrNotYetValid, time.Unix(created, 0).UTC().Format(time.RFC3339), time.Unix(created, 0).Sub(now).Round(time.Second),
			now.UTC().Format(time.RFC3339), skew)
	case time.Unix(expires, 0).Sub(time.Unix(created, 0)) > MaxValidity:
		return fmt.Errorf("%w: valid for more than %s", bcrypto.ErrMalformed, MaxValidity)
	case !now.Before(time.Unix(expires, 0)):
		return fmt.Errorf("%w: at %s", ErrExpired, time.Unix(expires, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

// writeHeader writes the plaintext framing: u32 length ‖ canonical JSON.
func writeHeader(w io.Writer, v any) error {
	body, err := bcrypto.EncodeBody(v)
	if err != nil {
		return err
	}
	if len(body) > MaxHeader {
		return fmt.Errorf("header: %w", ErrTooLarge)
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(body)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err = w.Write(body)
	return err
}

// readHeader reads the framed header into v and returns how many bytes of
// the stream it took (4 + its length).
func readHeader(r io.Reader, v any) (int64, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return 0, fmt.Errorf("header: %w", shortIsMalformed(err))
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > MaxHeader {
		return 0, fmt.Errorf("header: %w: %d bytes", ErrTooLarge, size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, fmt.Errorf("header: %w", shortIsMalformed(err))
	}
	return 4 + int64(size), bcrypto.DecodeBody(body, v)
}

// shortIsMalformed: a stream that authenticated to its end but is shorter
// than its own header says was sealed that way: malformed, not truncated.
func shortIsMalformed(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: shorter than its header", bcrypto.ErrMalformed)
	}
	return err
}

func (c *Call) check() error {
	if c.V != 1 {
		return fmt.Errorf("call: %w: v=%d", bcrypto.ErrUnknownVersion, c.V)
	}
	if !validOpName(c.Op) {
		return fmt.Errorf("call: %w: op name %q", bcrypto.ErrMalformed, c.Op)
	}
	if c.Args == nil {
		return fmt.Errorf("call: %w: args missing", bcrypto.ErrMalformed)
	}
	for k := range c.Args {
		if !validArgName(k) {
			return fmt.Errorf("call: %w: argument name %q", bcrypto.ErrMalformed, k)
		}
	}
	return nil
}

// countingHash counts and hashes what is written through it.
type countingHash struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

// sealPayload seals header ‖ data for recipient into w and returns the pin.
func sealPayload(w io.Writer, recipientBoxPub []byte, header any, data []io.Reader, rand io.Reader) (Payload, error) {
	ch := &countingHash{w: w, h: sha256.New()}
	s, wrapped, err := bcrypto.NewSealer(ch, recipientBoxPub, rand)
	if err != nil {
		return Payload{}, err
	}
	if err := writeHeader(s, header); err != nil {
		return Payload{}, err
	}
	for _, d := range data {
		if _, err := io.Copy(s, d); err != nil {
			return Payload{}, fmt.Errorf("seal payload: %w", err)
		}
	}
	if err := s.Close(); err != nil {
		return Payload{}, err
	}
	return Payload{Len: ch.n, SHA256: hex.EncodeToString(ch.h.Sum(nil)), Key: wrapped}, nil
}

// NewRequest describes a request an agent is about to send.
type NewRequest struct {
	ID      string
	Agent   *bcrypto.Identity
	AgentID string
	Host    *bcrypto.Bundle // the host's current bundle
	Call    Call
	Stdin   io.Reader // may be nil
	Created time.Time
	Expires time.Time
	Rand    io.Reader // nil: crypto/rand
}

// SealRequest writes the sealed payload to payload and returns the signed
// manifest that pins it. The caller publishes the payload first, then the
// manifest.
func SealRequest(payload io.Writer, n NewRequest) ([]byte, *Request, error) {
	n.Call.V = 1
	if n.Call.Args == nil {
		n.Call.Args = map[string]string{}
	}
	if err := n.Call.check(); err != nil {
		return nil, nil, err
	}
	var data []io.Reader
	if n.Stdin != nil {
		data = append(data, n.Stdin)
	}
	pin, err := sealPayload(payload, n.Host.BoxPub, n.Call, data, n.Rand)
	if err != nil {
		return nil, nil, err
	}
	r := &Request{
		V: 1, ID: n.ID, Agent: n.AgentID, AgentKid: n.Agent.SignKid(),
		Host: n.Host.ID, HostBoxKid: n.Host.BoxKid(), ReplyBoxKid: n.Agent.BoxKid(),
		Created: n.Created.Unix(), Expires: n.Expires.Unix(), Payload: pin,
	}
	if err := r.check(); err != nil {
		return nil, nil, err
	}
	body, err := bcrypto.EncodeBody(r)
	if err != nil {
		return nil, nil, err
	}
	m, err := bcrypto.Sign(bcrypto.KindRequest, body, n.Agent)
	return m, r, err
}

// OpenCall decrypts a settled request payload (read from the private spool
// copy, never from the folder), writes the attached standard input to stdin and
// returns the call. It returns the call only once the whole stream has
// authenticated, so nothing acts on a partial payload.
//
// maxStdin, if not nil, gives the most standard input the call's op may
// carry; a longer one is refused (ErrTooLarge) right after the header, before
// any of it is written to stdin. The length is exact before it is read: the
// pinned payload length fixes the plaintext's (SPEC §4), and the header's
// own length is the rest.
func OpenCall(ct io.Reader, r *Request, host *bcrypto.Identity, stdin io.Writer, maxStdin func(op string) int64) (*Call, error) {
	o, err := bcrypto.NewOpener(ct, r.Payload.Key, host)
	if err != nil {
		return nil, err
	}
	var c Call
	n, err := readHeader(o, &c)
	if err != nil {
		return nil, fmt.Errorf("open request %s: %w", r.ID, err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("open request %s: %w", r.ID, err)
	}
	if maxStdin != nil {
		size := bcrypto.OpenedSize(r.Payload.Len) - n
		if most := maxStdin(c.Op); size > most {
			return nil, fmt.Errorf("open request %s: %w: %d bytes of standard input, op %s takes at most %d (max_stdin)", r.ID, ErrTooLarge, size, c.Op, most)
		}
	}
	if stdin == nil {
		stdin = io.Discard
	}
	if _, err := io.Copy(stdin, o); err != nil {
		return nil, fmt.Errorf("open request %s: %w", r.ID, err)
	}
	return &c, nil
}

// NewResult describes a result a host is about to publish.
type NewResult struct {
	Host        *bcrypto.Identity
	HostID      string
	AgentBoxPub []byte // the agent key named by the request's reply_box_kid
	Request     *Request
	RequestSHA  string // hex SHA-256 of the request manifest file
	Receipt     Receipt
	Stdout      []byte
	Stderr      []byte
	// StdoutFrom and StderrFrom, if set, are read in place of Stdout and
	// Stderr, exactly StdoutLen and StderrLen bytes each: an output kept
	// in a file is sealed as it is read, never held in memory whole.
	StdoutFrom, StderrFrom io.Reader
	StdoutLen, StderrLen   int64
	Created                time.Time
	Rand                   io.Reader
}

// exactly reads n bytes from r, and fails if r ends before.
type exactly struct {
	r    io.Reader
	left int64
	what string
}

func (e *exactly) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		return n, fmt.Errorf("seal result: %s ended %d bytes short: %w", e.what, e.left, io.ErrUnexpectedEOF)
	}
	if e.left == 0 && err == io.EOF {
		err = nil
	}
	return n, err
}

// SealResult writes the sealed output to output and returns the signed result
// manifest.
func SealResult(output io.Writer, n NewResult) ([]byte, error) {
	rc := n.Receipt
	rc.V, rc.ID, rc.RequestSHA256 = 1, n.Request.ID, n.RequestSHA
	rc.StdoutLen, rc.StderrLen = int64(len(n.Stdout)), int64(len(n.Stderr))
	streams := []io.Reader{bytes.NewReader(n.Stdout), bytes.NewReader(n.Stderr)}
	if n.StdoutFrom != nil {
		rc.StdoutLen, streams[0] = n.StdoutLen, &exactly{r: n.StdoutFrom, left: n.StdoutLen, what: "stdout"}
	}
	if n.StderrFrom != nil {
		rc.StderrLen, streams[1] = n.StderrLen, &exactly{r: n.StderrFrom, left: n.StderrLen, what: "stderr"}
	}
	if rc.Argv == nil {
		rc.Argv = []string{}
	}
	pin, err := sealPayload(output, n.AgentBoxPub, rc, streams, n.Rand)
	if err != nil {
		return nil, err
	}
	res := &Result{
		V: 1, ID: n.Request.ID, Host: n.HostID, HostKid: n.Host.SignKid(),
		Agent: n.Request.Agent, AgentBoxKid: bcrypto.Kid(bcrypto.AlgX25519, n.AgentBoxPub),
		RequestSHA256: n.RequestSHA, Status: rc.Status, Created: n.Created.Unix(), Payload: pin,
	}
	if err := res.check(); err != nil {
		return nil, err
	}
	body, err := bcrypto.EncodeBody(res)
	if err != nil {
		return nil, err
	}
	return bcrypto.Sign(bcrypto.KindResult, body, n.Host)
}

var statuses = []string{StatusDone, StatusFailed, StatusRejected, StatusExpired, StatusCancelled, StatusUncertain}

func (r *Result) check() error {
	switch {
	case r.V != 1:
		return fmt.Errorf("result: %w: v=%d", bcrypto.ErrUnknownVersion, r.V)
	case !ValidID(r.ID):
		return fmt.Errorf("result: %w: id %q", bcrypto.ErrMalformed, r.ID)
	case !bcrypto.ValidKid(r.Host), !bcrypto.ValidKid(r.HostKid), !bcrypto.ValidKid(r.Agent), !bcrypto.ValidKid(r.AgentBoxKid):
		return fmt.Errorf("result: %w: bad party id or kid", bcrypto.ErrMalformed)
	case !validSHA256Hex(r.RequestSHA256):
		return fmt.Errorf("result: %w: request hash", bcrypto.ErrMalformed)
	case !slices.Contains(statuses, r.Status):
		return fmt.Errorf("result: %w: status %q", bcrypto.ErrMalformed, r.Status)
	}
	return r.Payload.check(1 << 40)
}

// ResultCheck is what an agent knows when it judges a result manifest.
type ResultCheck struct {
	Host          string   // the host the request went to
	HostKeys      [][]byte // signing keys accepted for that host now
	Agent         string   // my party id
	AgentBoxKids  []string // encryption kids I hold private keys for
	RequestSHA256 string   // hex SHA-256 of the manifest I sent
}

// OpenResult verifies a result manifest file found as <stem>.result.
func OpenResult(data []byte, stem string, c ResultCheck) (*Result, error) {
	var r Result
	if err := OpenBody(bcrypto.KindResult, data, c.HostKeys, &r); err != nil {
		return nil, fmt.Errorf("result %s: %w", stem, err)
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("result %s: %w", stem, err)
	}
	switch {
	case r.ID != stem:
		return nil, fmt.Errorf("result %s: %w", stem, ErrNameMismatch)
	case r.Host != c.Host || r.Agent != c.Agent || !slices.Contains(c.AgentBoxKids, r.AgentBoxKid):
		return nil, fmt.Errorf("result %s: %w", r.ID, ErrWrongRecipient)
	case c.RequestSHA256 != "" && r.RequestSHA256 != c.RequestSHA256:
		return nil, fmt.Errorf("result %s: %w", r.ID, ErrWrongRequest)
	}
	return &r, nil
}

// OpenOutput decrypts a settled result output file and writes the operation's
// standard output and error to stdout and stderr. The receipt must agree with
// the manifest (id, request hash, status).
func OpenOutput(ct io.Reader, r *Result, agent *bcrypto.Identity, stdout, stderr io.Writer) (*Receipt, error) {
	o, err := bcrypto.NewOpener(ct, r.Payload.Key, agent)
	if err != nil {
		return nil, err
	}
	var rc Receipt
	if _, err := readHeader(o, &rc); err != nil {
		return nil, fmt.Errorf("open result %s: %w", r.ID, err)
	}
	if rc.V != 1 || rc.ID != r.ID || rc.RequestSHA256 != r.RequestSHA256 || rc.Status != r.Status || rc.StdoutLen < 0 || rc.StderrLen < 0 {
		return nil, fmt.Errorf("open result %s: %w: receipt disagrees with manifest", r.ID, bcrypto.ErrMalformed)
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if n, err := io.CopyN(stdout, o, rc.StdoutLen); err != nil {
		return nil, fmt.Errorf("open result %s: stdout after %d bytes: %w", r.ID, n, err)
	}
	if n, err := io.CopyN(stderr, o, rc.StderrLen); err != nil {
		return nil, fmt.Errorf("open result %s: stderr after %d bytes: %w", r.ID, n, err)
	}
	// Read to the end: the final chunk must authenticate, and nothing may follow.
	n, err := io.Copy(io.Discard, o)
	if err != nil {
		return nil, fmt.Errorf("open result %s: %w", r.ID, err)
	}
	if n != 0 {
		return nil, fmt.Errorf("open result %s: %w: %d trailing bytes", r.ID, bcrypto.ErrMalformed, n)
	}
	return &rc, nil
}

// SHA256Hex is the hex SHA-256 of b.
func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// writeBytes adapts a byte slice to syncsafe's Publish callback.
func WriteBytes(b []byte) func(w io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}
}
