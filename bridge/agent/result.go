package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// Results, as the agent reads them: verified against the host's keys and
// the request it sent, waited for, acked; and the agent's own cancels,
// catalog reads and collection.

// Outcome is a verified result.
type Outcome struct {
	Sent    *Sent
	Result  *bridge.Result
	Receipt *bridge.Receipt
	// Stdout and Stderr are the op's output, unless the client streams
	// (Client.StreamOutput): then they are nil, and WriteOutput gives it.
	Stdout []byte
	Stderr []byte

	Manifest []byte // the verified result manifest

	// output is the verified sealed output: a private copy (in memory up
	// to inlineOutputMax, else a spool file of the home without a name,
	// or the kept copy), never the folder's, which the sync client may
	// replace at any moment.
	output sealedOutput
	size   int64
	me     *bcrypto.Identity

	// Earlier: the result answers an earlier send of this keyed request
	// (the same key used again, or another manifest under the same id from
	// a home that lost its record of it); the host did not run it again,
	// and this call's standard input was not sent.
	Earlier bool
}

// ErrNoResult: no complete result is in the folder yet.
var ErrNoResult = errors.New("no result yet")

// Result reads and verifies the result of a request, if one is complete in
// the folder. It changes nothing: the output it checks is copied into
// memory when small (inlineOutputMax), else into a spool file of the home
// that has no name (Outcome.Close releases it).
func (c *Client) Result(id string) (ret *Outcome, _ error) {
	s, _, err := c.sentOf(id)
	if err != nil {
		return nil, err
	}
	defer func() {
		if _, again := c.repeats.Load(id); ret != nil && again {
			ret.Earlier = true // however it was found: the first send's answer
		}
	}()
	check, own, err := c.resultCheck(s)
	if err != nil {
		return nil, err
	}
	// An acked result is kept in the home, and one that is not uncertain
	// is final: the host never replaces it (a host whose home was restored
	// from a backup might answer the request again, wrongly).
	kept, kerr := c.keptResult(s, check, own)
	if kerr == nil && kept.Receipt.Status != bridge.StatusUncertain {
		return kept, nil
	}
	defer func() {
		if ret != kept {
			kept.Close()
		}
	}()
	data, err := c.folder.ReadFile(bridge.ResultPath(s.Host, c.home.Config.ID, id, bridge.ExtResult), bcrypto.KindResult.MaxSize())
	if errors.Is(err, fs.ErrNotExist) {
		// The host may have collected its copy since the ack.
		if kerr == nil {
			return kept, nil
		}
		if errors.Is(kerr, errKeptUnreadable) {
			// Acked, so the host may have collected its copy: no answer
			// will come to wait for.
			hint := "this home acked the answer, and the host may have collected its own copy since: restore the home's requests/ from a backup, or look at the request on the host (`bridge ls` there)"
			if errors.Is(kerr, bcrypto.ErrUnknownKey) || errors.Is(kerr, bridge.ErrWrongRecipient) {
				hint = staleKeysHint + "; if a rotation retired the key and the home has since destroyed it (docs/KEYS.md), it cannot be opened again"
			}
			return nil, bridge.WithHint(fmt.Errorf("result %s: %w", id, kerr), "%s", hint)
		}
		return nil, ErrNoResult
	} else if errors.Is(err, syncsafe.ErrReplaced) {
		// Renamed over as it was opened (a rerun's answer replacing an
		// uncertain one, a sync client's new version): the next look
		// reads what replaced it.
		return nil, ErrNoResult
	} else if err != nil {
		return nil, err
	}
	if !bytes.ContainsFunc(data, func(r rune) bool { return r != 0 }) {
		// Nothing but zeros (or nothing): a copy a power cut on the host
		// left at its size without its bytes, or one a sync client sized
		// before filling it. The host publishes its kept copy again
		// (SPEC §5): still arriving, not an answer, nor an error.
		return nil, ErrNoResult
	}
	res, err := bridge.OpenResult(data, id, check)
	if errors.Is(err, bcrypto.ErrBadSignature) && c.followHost(s.Host) {
		// The host may have rotated since this client opened: follow its
		// statements and try once more.
		if check, own, err = c.resultCheck(s); err != nil {
			return nil, err
		}
		res, err = bridge.OpenResult(data, id, check)
	}
	// A keyed request found again from its result alone (its manifest
	// collected after an earlier home's ack) is such an earlier send too.
	earlier := err == nil && s.ManifestSHA256 == "" && s.Key != ""
	if errors.Is(err, bridge.ErrWrongRequest) && s.Key != "" {
		// A keyed id names one call of this agent's, under a secret only
		// it holds (SPEC §7.2): a result under it for another manifest
		// answers an earlier send of the same call, from a home that lost
		// its record (restored from a backup, or a fresh sandbox). The
		// host never runs the id again; that answer is the answer.
		anyReq := check
		anyReq.RequestSHA256 = ""
		if r, aerr := bridge.OpenResult(data, id, anyReq); aerr == nil {
			res, err, earlier = r, nil, true
		}
	}
	if errors.Is(err, bcrypto.ErrTruncated) {
		return nil, ErrNoResult // still arriving
	} else if errors.Is(err, bcrypto.ErrBadSignature) {
		return nil, c.whyBadSignature(s, id, data, err)
	} else if errors.Is(err, bridge.ErrWrongRecipient) {
		// Signed by the host, and not to this agent's keys as this
		// process holds them: a wait goes on past it.
		return nil, bridge.WithHint(err, "%s", staleKeysHint)
	} else if err != nil {
		return nil, newerHost(err, s.HostName) // OpenResult names the result
	}
	// The output is copied into a private spool as it is checked against
	// the manifest's pin, and opened from there: never held whole in memory.
	// One still arriving (absent, or not its pinned size yet) is not worth
	// a spool: Settle would refuse it before it copies a byte.
	outPath := bridge.ResultPath(s.Host, c.home.Config.ID, id, bridge.ExtOutput)
	if fi, err := c.folder.Lstat(outPath); errors.Is(err, fs.ErrNotExist) || err == nil && fi.Mode().IsRegular() && fi.Size() != res.Payload.Len {
		return nil, ErrNoResult
	}
	var spool sealedOutput
	var to io.Writer
	if res.Payload.Len <= inlineOutputMax {
		buf := bytes.NewBuffer(make([]byte, 0, res.Payload.Len))
		spool, to = memOutput{buf}, buf
	} else {
		f, err := c.spoolFile()
		if err != nil {
			return nil, err
		}
		spool, to = f, f
	}
	err = syncsafe.Settle(c.folder, outPath, res.Payload.Len, res.Payload.Digest(), to)
	if err != nil {
		spool.Close()
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syncsafe.ErrUnsettled) || errors.Is(err, syncsafe.ErrReplaced) {
			return nil, ErrNoResult
		}
		return nil, err
	}
	out, err := c.openOutcome(s, res, data, spool, res.Payload.Len, own, c.StreamOutput)
	if err == nil && earlier {
		if out.Receipt.Op != s.Op {
			out.Close()
			return nil, fmt.Errorf("result %s: %w: an answer for op %q, not %q", id, bridge.ErrWrongRequest, out.Receipt.Op, s.Op)
		}
		out.Earlier = true
	}
	return out, err
}

// inlineOutputMax is the largest sealed output a client keeps in memory
// while it checks it, and in the request's record once it acks it (SPEC
// §10): for the common small answer, no spool file is made and dropped,
// and the ack keeps one file, not two (a file made and an fsync fewer).
// Larger outputs go through a spool file and are kept beside the record.
// Small enough that a home's records, which `bridge ls` reads whole, stay
// small.
const inlineOutputMax = 4 << 10

// sealedOutput is a private copy of a verified sealed output: a file of
// the home, or memOutput.
type sealedOutput interface {
	io.ReaderAt
	io.Closer
}

// memOutput is a sealed output held in memory (at most inlineOutputMax).
type memOutput struct{ b *bytes.Buffer }

func (m memOutput) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(m.b.Bytes()).ReadAt(p, off)
}

func (m memOutput) Close() error { return nil }

// openOutcome opens the verified sealed output (size bytes of f, which it
// owns from here): the whole stream is authenticated, and the output kept
// in memory unless stream (the client streams, or only the check counts).
func (c *Client) openOutcome(s *Sent, res *bridge.Result, manifest []byte, f sealedOutput, size int64, own []trust.OwnKey, stream bool) (*Outcome, error) {
	var me *bcrypto.Identity
	for _, k := range own {
		if k.Identity.BoxKid() == res.AgentBoxKid {
			me = k.Identity
		}
	}
	if me == nil {
		f.Close()
		return nil, fmt.Errorf("result %s: %w: sealed to a key this agent no longer keeps", s.ID, bcrypto.ErrUnknownKey)
	}
	out := &Outcome{Sent: s, Result: res, Manifest: manifest, output: f, size: size, me: me}
	// The first pass authenticates every chunk and reads the receipt;
	// the output, if kept, is read in a second one into buffers of its
	// exact size (the receipt gives it), so it is in memory once.
	rc, err := bridge.OpenOutput(out.sealed(), res, me, nil, nil)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("result %s: %w", s.ID, err)
	}
	out.Receipt = rc
	if !stream {
		stdout, stderr := bytes.NewBuffer(make([]byte, 0, rc.StdoutLen)), bytes.NewBuffer(make([]byte, 0, rc.StderrLen))
		// Plain writers: a Buffer's ReadFrom would double a full buffer
		// to look for more.
		if err := out.WriteOutput(struct{ io.Writer }{stdout}, struct{ io.Writer }{stderr}); err != nil {
			f.Close()
			return nil, err
		}
		out.Stdout, out.Stderr = stdout.Bytes(), stderr.Bytes()
	}
	return out, nil
}

// sealed reads the verified sealed output from its start.
func (o *Outcome) sealed() io.Reader {
	if m, ok := o.output.(memOutput); ok {
		return bytes.NewReader(m.b.Bytes()) // in memory already: no buffer
	}
	return bufio.NewReaderSize(io.NewSectionReader(o.output, 0, o.size), 256<<10)
}

// WriteOutput writes the op's standard output and error to stdout and
// stderr as it opens them: the output is never in memory whole. It may be
// called any number of times, until Close.
func (o *Outcome) WriteOutput(stdout, stderr io.Writer) error {
	if o.output == nil {
		if _, err := stdout.Write(o.Stdout); err != nil {
			return err
		}
		_, err := stderr.Write(o.Stderr)
		return err
	}
	if _, err := bridge.OpenOutput(o.sealed(), o.Result, o.me, stdout, stderr); err != nil {
		return fmt.Errorf("result %s: %w", o.Result.ID, err)
	}
	return nil
}

// Close releases the outcome's copy of the sealed output. Stdout and
// Stderr stay valid.
func (o *Outcome) Close() error {
	if o == nil || o.output == nil {
		return nil
	}
	return o.output.Close()
}

// spoolFile is a private temporary file of the home without a name:
// nothing is left behind whatever becomes of the process.
func (c *Client) spoolFile() (*os.File, error) {
	dir := c.home.Path("requests")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return syncsafe.UnnamedTemp(dir, ".output-*")
}

// staleKeysHint is said of an answer addressed to none of the keys this
// process holds.
const staleKeysHint = "if this agent rotated its keys since this process started (a long-running `bridge mcp`), start it again: it then reads answers sealed to the new key; otherwise the answer is not addressed to this agent"

// errKeptUnreadable: this home kept an acked result's manifest, and the
// copy does not open (its output is missing or not the one the manifest
// pins, or no trusted host key vouches for it any more).
var errKeptUnreadable = errors.New("the copy kept in this home cannot be read")

// keptResult reads the copy of an acked result from the home: an
// fs.ErrNotExist error when it keeps none, errKeptUnreadable when the
// copy it keeps does not open.
func (c *Client) keptResult(s *Sent, check bridge.ResultCheck, own []trust.OwnKey) (*Outcome, error) {
	out, err := c.keptOnce(s, check, own)
	if errors.Is(err, errKeptUnreadable) {
		// Another process may have been moving it between the looks (an
		// ack taking an older layout's copies into the record, which it
		// writes before it removes them): one more look.
		out, err = c.keptOnce(s, check, own)
	}
	return out, err
}

func (c *Client) keptOnce(s *Sent, check bridge.ResultCheck, own []trust.OwnKey) (*Outcome, error) {
	data, rec, err := c.keptManifestAndRecord(s.ID)
	if err != nil {
		return nil, err // none kept
	}
	out, err := c.openKept(s, rec, data, check, own, c.StreamOutput)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errKeptUnreadable, err)
	}
	return out, nil
}

// openKept opens a kept result: data is its manifest, rec the request's
// record (nil if torn or lost); stream as openOutcome's.
func (c *Client) openKept(s *Sent, rec *sentRecord, data []byte, check bridge.ResultCheck, own []trust.OwnKey, stream bool) (*Outcome, error) {
	// It was verified when it was acked; any of the host's keys that is not
	// revoked still vouches for it after a rotation's overlap ended.
	if keys, err := c.unrevokedHostKeys(s.Host); err == nil {
		check.HostKeys = keys
	}
	res, err := bridge.OpenResult(data, s.ID, check)
	if errors.Is(err, bridge.ErrWrongRequest) && s.Key != "" {
		// As Result takes it: a keyed id names one call of this agent's,
		// so a result under it for another manifest answers an earlier
		// send of that call, kept as such (Outcome.Earlier).
		anyReq := check
		anyReq.RequestSHA256 = ""
		res, err = bridge.OpenResult(data, s.ID, anyReq)
	}
	if err != nil {
		return nil, err
	}
	if rec != nil && rec.Output != nil {
		// Kept in the record (a small output, SPEC §10).
		kept := memOutput{bytes.NewBuffer(rec.Output)}
		if err := checkPayloadFile(kept, res.Payload); err != nil {
			return nil, err
		}
		return c.openOutcome(s, res, data, kept, res.Payload.Len, own, stream)
	}
	f, err := os.Open(c.home.Path("requests", s.ID+"."+bridge.ExtOutput))
	if err != nil {
		return nil, err
	}
	if err := checkPayloadFile(f, res.Payload); err != nil {
		f.Close()
		return nil, err
	}
	return c.openOutcome(s, res, data, f, res.Payload.Len, own, stream)
}

// State is what the agent can tell about a request from the folder.
type State struct {
	ID       string `json:"id"`
	Op       string `json:"op"`
	Host     string `json:"host"`
	State    string `json:"state"` // submitted | awaiting-approval | running | rerun-ordered | <result status>
	Reason   string `json:"reason,omitempty"`
	ExitCode *int   `json:"exit_code"` // null when the op did not run (yet)
	// RFC 3339 in JSON, as the host's ledger; nil (left out) when this
	// home does not know them: a request found again from the host's
	// result alone, after the home was rebuilt from the agent's secret.
	Created *time.Time `json:"created,omitempty"`
	Expires *time.Time `json:"expires,omitempty"`
	// Acked: this home acked the answer (it holds its own copy); `wait
	// --all` waits for the requests that are not.
	Acked bool `json:"acked"`
	// Forgotten: this home stopped waiting for it (`cancel --forget`).
	Forgotten bool `json:"forgotten"`
}

// UnixTime is t as a time, nil for 0 (not known).
func UnixTime(t int64) *time.Time {
	if t == 0 {
		return nil
	}
	v := time.Unix(t, 0)
	return &v
}

// RerunOrdered reports whether out is an uncertain answer that a human on
// the host has since ordered run again (a rerun-ordered notice naming this
// very result): its answer is still to come.
func (c *Client) RerunOrdered(out *Outcome) bool {
	if out.Receipt.Status != bridge.StatusUncertain {
		return false
	}
	items, err := c.Inbox()
	if err != nil {
		return false
	}
	// The latest word on this answer counts: a rerun-lost notice after
	// the rerun-ordered one says the rerun's answer is gone and this
	// uncertain one stands (a host home restored from a backup).
	sha := bridge.SHA256Hex(out.Manifest)
	var ordered, lost time.Time
	for _, it := range items {
		if it.Note.Request != out.Receipt.ID || it.Note.Supersedes != sha || it.Host != out.Sent.Host {
			continue
		}
		switch it.Note.Event {
		case bridge.EventRerunOrdered:
			ordered = later(ordered, it.Created)
		case bridge.EventRerunLost:
			lost = later(lost, it.Created)
		}
	}
	return !ordered.IsZero() && lost.Before(ordered)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Status reports a request's state. It is a pure read.
func (c *Client) Status(id string) (*State, error) {
	s, err := c.Sent(id)
	if err != nil {
		return nil, err
	}
	st := &State{ID: id, Op: s.Op, Host: s.HostName, State: bridge.StateSubmitted,
		Created: UnixTime(s.Created), Expires: UnixTime(s.Expires), Acked: s.Acked, Forgotten: s.Forgotten != 0}
	out, err := c.Result(id)
	if err == nil {
		defer out.Close()
	}
	if errors.Is(err, ErrNoResult) {
		if time.Now().Unix() >= s.Expires {
			// It will not start now: the host answers it expired if it
			// sees it within its clock skew, and refuses it without an
			// answer later (SPEC §8); one that started still answers.
			st.Reason = string(bridge.ReasonPastExpiry)
		}
		// The host tells, in the inbox, when a request waits for a human.
		if items, err := c.Inbox(); err == nil {
			for _, it := range items {
				if it.Note.Request == id && it.Note.Event == bridge.EventApprovalPending {
					st.State = bridge.StateAwaitingApproval
				}
			}
		}
		if st.State == bridge.StateSubmitted && c.Started(id) {
			st.State = bridge.StateRunning
		}
		return st, nil
	} else if err != nil {
		return nil, err
	}
	st.State, st.Reason = out.Receipt.Status, string(out.Receipt.Reason)
	if st.Op == "" {
		st.Op = out.Receipt.Op // a request recovered from the folder: the receipt names it
	}
	if c.RerunOrdered(out) {
		st.State, st.Reason = bridge.StateRerunOrdered, "" // the uncertain answer's replacement is to come
	}
	if out.Receipt.Status == bridge.StatusDone {
		code := out.Receipt.ExitCode
		st.ExitCode = &code
	}
	return st, nil
}

// Wait blocks until the request's result is complete and verified, or ctx
// ends. It looks at the request's own files by name, never lists the result
// directory: it looks once, then for a short while (c.quick) only asks
// whether its result's files changed, at short intervals (a host beside it
// answers within milliseconds); then it arms an event-only watch on the
// directory (watchDir), looks again, and sleeps on events, with a backoff
// poll because events are only hints. The watch comes late because arming
// and releasing one costs the kernel a walk of the directory's cached
// entries: about 1 ms per 20,000 files each way, a quarter of a `bridge run`'s
// CPU beside 10,000 unacked results. tick, if set, is called on every look
// after the quick ones (so at most 50 ms late): on the request's result,
// its progress chunks and the host's liveness stamp too, so a caller
// streaming the output sees each chunk as it lands. While no result is
// there, a fresh stamp saying the host accepts none of this agent's keys and
// no longer reads its requests (removed, or never paired) ends the wait with
// a *NotAcceptedError: no answer will ever come. A host that still trusts
// the agent answers a request signed by a refused key itself (rejected,
// revoked), and the wait returns that answer.
func (c *Client) Wait(ctx context.Context, id string, tick func(elapsed time.Duration)) (*Outcome, error) {
	s, err := c.Sent(id)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var events <-chan struct{}
	armed := false
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second), backoff.WithMaxElapsedTime(0))
	var refused error
	// What stands at the result's names before the first look: the quick
	// looks go by its changes.
	quick := c.newQuickLooker(s, id)
	defer func() { quick.close() }()
	for {
		out, err := c.Result(id)
		if err == nil && !c.RerunOrdered(out) {
			return out, nil
		}
		if err == nil {
			out.Close()
			err = ErrNoResult // the uncertain answer a rerun will replace: wait for that one
		}
		if errors.Is(err, errKeptUnreadable) {
			return nil, err // acked, its copy unreadable: no answer is to come
		}
		if !errors.Is(err, ErrNoResult) {
			// A result file that does not verify may be an intermediate
			// version the sync client is still replacing, or a folder
			// writer's junk: keep waiting for the real one, and say so if
			// the wait ends.
			refused = err
		}
		if quick != nil {
			// Until they are over, a full look each time something
			// changes at the result's names; then (or for a file that
			// did not verify, or once the context ended) the watch.
			if refused == nil && c.quickLooks(ctx, quick) {
				continue
			}
			quick.close()
			quick = nil
		}
		if !armed && ctx.Err() == nil {
			// Armed after the quick looks, then looked again at once: a
			// result that landed in between is not left to the poll.
			armed = true
			dir := filepath.Join(c.home.Config.Folder, filepath.FromSlash(bridge.ToAgentDir(s.Host, c.home.Config.ID)))
			if pokes, stop, werr := watchDir(dir, func(name string) bool { return wakes(name, id) }); werr == nil {
				c.waits.watches.Add(1)
				c.waits.open.Add(1)
				c.waits.quickBeforeWatch.Store(c.waits.quick.Load())
				defer func() { stop(); c.waits.open.Add(-1) }()
				events = pokes
				continue
			}
		}
		if lv, lerr := c.hostLiveness(s.Host); lerr == nil && lv.Verdict == LivenessNotAccepted && !lv.Trusted {
			return nil, &NotAcceptedError{Liveness: lv}
		}
		if tick != nil {
			tick(time.Since(start))
		}
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			if refused != nil {
				return nil, fmt.Errorf("%w (the last result file seen was refused: %v)", ctx.Err(), refused)
			}
			return nil, ctx.Err()
		case <-events:
			t.Stop()
			b.Reset()
		case <-t.C:
		}
	}
}

// quickLook is the interval of Wait's quick looks, and quickFor how long
// they go on: a local host's answer to a ping or a short op comes within
// this (20 ms at the p50 of a sporadic `bridge run`, BENCHMARKS), an answer
// through a sync client later, for which the watch is worth its cost.
const (
	quickLook = time.Millisecond
	quickFor  = 50 * time.Millisecond
)

// quick is how long Wait's quick looks go on (Client.quickFor: tests set
// it).
func (c *Client) quick() time.Duration {
	if c.quickFor != 0 {
		return c.quickFor
	}
	return quickFor
}

// quickLooker looks at what stands at a request's result and output
// names, through the folder (no link followed), until end.
type quickLooker struct {
	l     *syncsafe.Looker
	names [2]string
	was   [2]nameStamp
	end   time.Time
}

// nameStamp is what a look saw at a name: nothing, or a file of a size,
// modification and change time (a rename sets the change time, where the
// system keeps one: a file replaced by one of its size and time is told
// apart, but for one within the same clock tick, or on Windows, which the
// 50 ms end then catches).
type nameStamp struct {
	there              bool
	size, mtime, ctime int64
}

// newQuickLooker notes what stands at the names of s's result now; nil if
// its directory cannot be opened (Wait then arms its watch at once).
func (c *Client) newQuickLooker(s *Sent, id string) *quickLooker {
	l, err := c.folder.Looker(bridge.ToAgentDir(s.Host, c.home.Config.ID))
	if err != nil {
		return nil
	}
	q := &quickLooker{l: l, names: [2]string{id + "." + bridge.ExtResult, id + "." + bridge.ExtOutput}, end: time.Now().Add(c.quick())}
	q.was = q.look()
	return q
}

func (q *quickLooker) look() (st [2]nameStamp) {
	for i, n := range q.names {
		if fi, err := q.l.Lstat(n); err == nil {
			st[i] = nameStamp{true, fi.Size(), fi.ModTime().UnixNano(), syncsafe.ChangeTime(fi).UnixNano()}
		}
	}
	return st
}

func (q *quickLooker) close() {
	if q != nil {
		q.l.Close()
	}
}

// quickLooks waits until what stands at q's names changed since it last
// looked (below, which change counts), and reports whether it did before
// q's end or ctx's: two lstats per quickLook. It says nothing of what the
// files are; the full look that follows does.
func (c *Client) quickLooks(ctx context.Context, q *quickLooker) bool {
	t := time.NewTimer(quickLook)
	defer t.Stop()
	for ; time.Now().Before(q.end); t.Reset(quickLook) {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		c.waits.quick.Add(1)
		// The host publishes the output, then the result: the result's
		// name changing is the sign, or the output's while a result
		// stands (one the sync delivered first, or the uncertain answer
		// a rerun replaces).
		now := q.look()
		if now[0] != q.was[0] || now[1] != q.was[1] && now[0].there {
			q.was = now
			return true
		}
	}
	return false
}

// wakes reports whether a file event in the agent's result directory is
// one a wait for request id looks again on: its result or output, one of
// its progress chunks, or the host's liveness stamp.
func wakes(name, id string) bool {
	if rid, _, ok := bridge.ParseToAgentName(name); ok {
		return rid == id
	}
	if rid, _, ok := bridge.ParseProgressName(name); ok {
		return rid == id
	}
	return name == bridge.LivenessName
}

// Ack tells the host the result is held, then removes this agent's own
// request files (never the host's), unless the result is uncertain: a
// human may then run the request again on the host, from those files.
func (c *Client) Ack(out *Outcome) error {
	// Keep the verified result, durably before the ack: the host may
	// collect its copy after it. The result's manifest goes into the
	// request's record (no longer a cache from here: it holds the answer),
	// and so does a small output (inlineOutputMax); a larger one is
	// requests/<id>.output. One fsync of the directory covers the names.
	// The ack is placed under the records' lock too: two processes acking
	// two answers of one request (an uncertain one and the settled one)
	// then leave the ack naming the answer the home keeps.
	settled := out.Result.Status != bridge.StatusUncertain
	err := c.changeRecord(out.Sent, func(rec *sentRecord) error {
		final, err := c.keepIn(*rec, out)
		if err != nil {
			return err
		}
		acked := out.Manifest
		if final != nil {
			// A settled answer is kept already: out, read before it (an
			// uncertain one, acked late by another process), is not
			// kept, and the ack names the kept one, as it must (SPEC §10).
			acked, settled = final, true
		}
		// Without an fsync, the file's or the directory's: an ack a power
		// cut lost or tore costs only time (the host keeps its result
		// until --retention, and this home has its copy, durable above).
		// The host takes a torn ack for a lost one, not a forgery (SPEC
		// §10), and the next ack of the id (`result --ack`, the agent's
		// gc) replaces it.
		ackPlacing()
		return c.placeAck(out.Sent.Host, out.Sent.ID, bridge.SHA256Hex(acked), syncsafe.WithoutSync(), syncsafe.WithoutDirSync())
	})
	if err != nil || !settled {
		// Not settled: a human on the host may run it again (`reconcile
		// --as rerun`), which needs the request's files.
		return err
	}
	s := out.Sent
	for _, ext := range []string{bridge.ExtManifest, bridge.ExtPayload} {
		if err := c.folder.Remove(bridge.RequestPath(s.Host, c.home.Config.ID, s.ID, ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// keepIn keeps the verified answer out in the home, durably, as Ack says,
// in the record as it is now (the caller holds the records' lock), unless
// the home keeps a settled answer of the request already: it then keeps
// that one and returns its manifest.
func (c *Client) keepIn(rec sentRecord, out *Outcome) (final []byte, err error) {
	s := out.Sent
	if c.keptAlready(&rec, out) {
		// Acked again (a second `result --ack`, an MCP read): nothing to
		// write, and on Windows the kept output, open in out, could not
		// be renamed over. Its name may not be durable yet (a process
		// that kept it died before the directory's fsync below): made so
		// before an ack names it.
		return nil, syncRequests(c.home.Path("requests"))
	}
	kept, beside := c.keptIn(&rec)
	if kept != nil && !bytes.Equal(kept, out.Manifest) {
		opens := false
		if st := resultStatus(kept); st != "" && st != bridge.StatusUncertain {
			if opens, err = c.keptOpens(s, &rec, kept); err != nil {
				return nil, err
			}
		}
		if opens {
			// Kept as final once acked: another answer read earlier
			// (the uncertain one a human has settled since, acked late
			// by a `run` that was printing it) never replaces it. A
			// kept copy that no longer opens (its output damaged, or
			// signed by a host key revoked since: a thief's) is no
			// answer, and the one read from the folder replaces it. Made
			// durable first, as above.
			return kept, syncRequests(c.home.Path("requests"))
		}
	}
	// out is to be kept (the first answer kept, or one replacing an
	// uncertain one or one that no longer opens): checked again against
	// the host's keys as they stand now, not as they stood when out was
	// read (the host removed, or the key that signed it revoked, in
	// between), by the kept copies' rule: a key whose overlap ended since
	// still vouches for an answer read before.
	if err := c.stillVouched(s, out); err != nil {
		err = fmt.Errorf("keep result %s: %w", s.ID, err)
		switch {
		case errors.Is(err, trust.ErrUnknownPeer), errors.Is(err, trust.ErrEveryKeyRevoked), errors.Is(err, bcrypto.ErrBadSignature), errors.Is(err, bcrypto.ErrUnknownKey):
			return nil, bridge.WithHint(err, "the host's keys changed since this answer was read (the host removed, or the key that signed it revoked): it was not kept, and the home keeps what it had; `bridge result %s` reads the answer as it stands now", s.ID)
		case errors.Is(err, bridge.ErrWrongRecipient):
			// The keys were read afresh: the box key the answer is sealed
			// to is no longer this agent's.
			return nil, bridge.WithHint(err, "the answer is sealed to a box key of this agent that a rotation retired and has since destroyed (docs/KEYS.md): it cannot be opened here again, and was not kept")
		}
		return nil, err
	}
	rec.Result, rec.Output = out.Manifest, nil
	if out.size <= inlineOutputMax {
		rec.Output = make([]byte, out.size)
		if _, err := out.output.ReadAt(rec.Output, 0); err != nil && !(errors.Is(err, io.EOF) && out.size == 0) {
			return nil, fmt.Errorf("keep result %s: %w", s.ID, err)
		}
	} else if c.outputIsKept(s.ID, out) {
		// Kept already, by an older layout's ack (its manifest in
		// requests/<id>.result): only the record changes. Renamed over,
		// it could not be on Windows while out holds it open.
	} else if err := c.writePrivate(s.ID+"."+bridge.ExtOutput, true, true, func(w io.Writer) error {
		_, err := io.Copy(w, io.NewSectionReader(out.output, 0, out.size))
		return err
	}); err != nil {
		return nil, err
	}
	if err := c.writeRecord(rec, true); err != nil {
		return nil, err
	}
	if err := syncRequests(c.home.Path("requests")); err != nil {
		return nil, err
	}
	// A kept copy beside the record is of an earlier answer (an uncertain
	// one, settled or run again since), or of this one in an older
	// layout, once the record holds this one's: the record's stands.
	// Removed only now that the record's new name is on disk (a crash
	// could otherwise keep the removals and lose the rename: the old
	// record, its copies gone), and at best: one left (a crash, or a file
	// Windows will not delete while it is open) is never read, and the
	// next ack removes it.
	var stale []string
	if beside {
		stale = append(stale, bridge.ExtResult)
	}
	if rec.Output != nil {
		stale = append(stale, bridge.ExtOutput)
	}
	for _, ext := range stale {
		// One unlink each: os.Remove would try a missing name again as a
		// directory, and these are mostly missing.
		_ = syscall.Unlink(c.home.Path("requests", s.ID+"."+ext))
	}
	return nil, nil
}

// unrevokedHostKeys is every signing key of host this home has not revoked
// (current, in overlap, or past it), or why the host's record does not
// read (the host removed, every key of it revoked, a damaged record).
func (c *Client) unrevokedHostKeys(host string) ([][]byte, error) {
	p, _, err := c.home.Peer(host)
	if err != nil {
		return nil, err
	}
	var keys [][]byte
	for _, k := range p.Keys {
		if p.State(k, time.Now()) != trust.KeyRevoked {
			keys = append(keys, k.SignPub)
		}
	}
	return keys, nil
}

// stillVouched checks the result manifest of out again with the host's
// keys as they stand: any not revoked (unrevokedHostKeys), as for a kept
// copy.
func (c *Client) stillVouched(s *Sent, out *Outcome) error {
	// One read of the host's record (not resultCheck's and this one's: on
	// every first ack, bridge run's path).
	hostKeys, err := c.unrevokedHostKeys(s.Host)
	if err != nil {
		return err
	}
	own, err := c.home.OwnKeys()
	if err != nil {
		return err
	}
	check := bridge.ResultCheck{Host: s.Host, HostKeys: hostKeys, Agent: c.home.Config.ID, RequestSHA256: s.ManifestSHA256}
	for _, k := range own {
		check.AgentBoxKids = append(check.AgentBoxKids, k.Identity.BoxKid())
	}
	if out.Earlier {
		check.RequestSHA256 = "" // an earlier send's answer, bound to its own manifest
	}
	_, err = bridge.OpenResult(out.Manifest, s.ID, check)
	return err
}

// keptOpens reports whether the kept copy whose manifest is kept, with
// rec, the request's record, still opens as `result` would open it: every
// chunk authenticated as it streams by, the output never held in memory
// (up to 512 MiB; gc checks every kept answer it would ack again).
// An error is one that says nothing of the copy (the disk's, not a
// verification's: bridge.Reason knows no code for it): the caller stops
// rather than take the copy for one that does not open.
func (c *Client) keptOpens(s *Sent, rec *sentRecord, kept []byte) (bool, error) {
	// Not resultCheck: a host no longer trusted (removed, every key
	// revoked) leaves a kept copy that does not open, not an error that
	// would stop every gc for good (openKept takes the host's keys itself).
	// Any other failure to read the host's record is the home's, and says
	// nothing of the copy.
	if _, _, err := c.home.Peer(s.Host); errors.Is(err, trust.ErrUnknownPeer) || errors.Is(err, trust.ErrEveryKeyRevoked) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	own, err := c.home.OwnKeys()
	if err != nil {
		return false, err
	}
	check := bridge.ResultCheck{Host: s.Host, Agent: c.home.Config.ID, RequestSHA256: s.ManifestSHA256}
	for _, k := range own {
		check.AgentBoxKids = append(check.AgentBoxKids, k.Identity.BoxKid())
	}
	out, err := c.openKept(s, rec, kept, check, own, true)
	switch {
	case err == nil:
		out.Close()
		return true, nil
	case errors.Is(err, fs.ErrNotExist) || bridge.Reason(err) != "error":
		return false, nil
	}
	return false, bridge.WithHint(fmt.Errorf("read the answer kept for %s: %w", s.ID, err),
		"the home's copy of the answer could not be read: fix what the error names (a file of another user; anything but a file at %s: remove it); while the host's result is still in the folder, `bridge result %s --ack` then keeps that copy again", c.home.Path("requests", s.ID+"."+bridge.ExtOutput), s.ID)
}

// keptIn is the result manifest rec's home keeps for its request: in rec,
// or in requests/<id>.result (a home of an older layout); nil if none.
// beside says whether a requests/<id>.result may be there, for keepIn to
// remove: read and found, or not looked for (the record holds one; a
// crash may have left the older copy beside it). The first ack of a
// request, the common case, then costs one failed open, not an open and
// an unlink.
func (c *Client) keptIn(rec *sentRecord) (kept []byte, beside bool) {
	if rec.Result != nil {
		return rec.Result, true
	}
	data, err := os.ReadFile(c.home.Path("requests", rec.ID+"."+bridge.ExtResult))
	if err != nil {
		return nil, !errors.Is(err, fs.ErrNotExist)
	}
	return data, true
}

// keptAlready reports whether out is the very copy the home keeps, read
// from it and verified: the record holds its manifest and the same output
// bytes, or its output is the kept requests/<id>.output itself. An answer
// read from the folder, with a kept copy beside it of the same size, is
// kept again: the kept one may be damaged (that is why the folder's was
// read), and the ack lets the host collect the folder's (red team of
// 43e0d59).
func (c *Client) keptAlready(rec *sentRecord, out *Outcome) bool {
	if !bytes.Equal(rec.Result, out.Manifest) {
		return false
	}
	if m, ok := out.output.(memOutput); ok {
		return rec.Output != nil && bytes.Equal(rec.Output, m.b.Bytes())
	}
	return rec.Output == nil && c.outputIsKept(rec.ID, out)
}

// outputIsKept reports whether out's output is the kept
// requests/<id>.output itself, the file open in out (keptResult).
func (c *Client) outputIsKept(id string, out *Outcome) bool {
	f, ok := out.output.(*os.File)
	if !ok {
		return false
	}
	have, err := f.Stat()
	if err != nil {
		return false
	}
	fi, err := os.Stat(c.home.Path("requests", id+"."+bridge.ExtOutput))
	return err == nil && os.SameFile(have, fi) && fi.Size() == out.size
}

// placeAck publishes this agent's ack of the result hashing to resSHA for
// request id to host, unless one that names it is there already. One
// that does not open with this home's key (torn by a power cut, junk) or
// names another result (of an earlier answer: an uncertain one, settled
// or run again since) is replaced: else the host would never collect.
func (c *Client) placeAck(host, id, resSHA string, opts ...syncsafe.PublishOption) error {
	rel := bridge.RequestPath(host, c.home.Config.ID, id, bridge.ExtAck)
	ack, err := bridge.SignAck(c.home.Identity(), bridge.Ack{ID: id, Agent: c.home.Config.ID, Host: host, ResultSHA256: resSHA, Created: time.Now().Unix()})
	if err != nil {
		return err
	}
	err = c.folder.Publish(rel, bridge.WriteBytes(ack), opts...)
	if errors.Is(err, syncsafe.ErrExists) {
		if c.ackNames(host, id, resSHA) {
			return nil
		}
		err = c.folder.PublishReplace(rel, bridge.WriteBytes(ack), opts...)
	}
	return err
}

// ackNames reports whether the folder holds an ack of request id to host,
// signed with this home's key, that names the result hashing to resSHA.
func (c *Client) ackNames(host, id, resSHA string) bool {
	old, err := c.folder.ReadFile(bridge.RequestPath(host, c.home.Config.ID, id, bridge.ExtAck), bcrypto.KindAck.MaxSize())
	if err != nil {
		return false
	}
	a, err := bridge.OpenAck(old, id, host, c.home.Config.ID, [][]byte{c.home.Identity().SignPublic()})
	return err == nil && a.ResultSHA256 == resSHA
}

// recordsBusy is err, lockRecords' failure while changing the record of
// request id, with what to do.
func (c *Client) recordsBusy(id string, err error) error {
	return bridge.WithHint(fmt.Errorf("request %s: %w", id, err),
		"another call or process of this agent holds its request records (an ack, a keyed submit of a large input): run the command again. If nothing else of this agent runs, check that %s is a file of yours (`ls -l`): a command run as another user (sudo) can leave it so", c.home.Path("requests", recordsLock))
}

// ackPlacing is called just before Ack places its ack (a variable: a test
// checks that the records' lock is held then).
var ackPlacing = func() {}

// syncRequests makes the names in the home's requests directory durable
// (a variable: a test looks at what is there when it runs).
var syncRequests = syncsafe.SyncDir

// changeRecord calls change with the record of request s as it is
// (recordOf), under the records' lock (lockRecords): change writes it.
func (c *Client) changeRecord(s *Sent, change func(rec *sentRecord) error) error {
	unlock, err := c.lockRecords()
	if err != nil {
		return c.recordsBusy(s.ID, err)
	}
	defer unlock()
	rec, err := c.recordOf(s)
	if err != nil {
		return err
	}
	return change(&rec)
}

// recordOf is the record of request s to write again: the one in the home
// (not what a keyed retry filled in for one call only), or, lost or torn,
// one made of s and its manifest in the folder. Any other failure to read
// it is an error: written over, the record would lose what it holds.
func (c *Client) recordOf(s *Sent) (sentRecord, error) {
	old, err := c.readSent(s.ID)
	switch {
	case err == nil:
		return *old, nil
	case errors.Is(err, errNoRecord) || errors.Is(err, errTornRecord):
		return sentRecord{Sent: *s, Manifest: c.sentManifest(s.ID)}, nil
	}
	return sentRecord{}, err
}

// Forget stops this home from waiting for request id, which has no answer:
// it leaves Outstanding (`bridge status`, `bridge wait --all`) unless an
// answer comes all the same. It is the user's decision, never inferred: an
// agent cannot tell from the folder whether a host that was out of reach
// ran a request, so one past its expiry may still be answered. A cancel is
// what withdraws it from the host (`bridge cancel --forget` sends both).
func (c *Client) Forget(id string) error {
	s, err := c.Sent(id)
	if err != nil {
		return err
	}
	return c.changeRecord(s, func(rec *sentRecord) error {
		if c.acked(rec) {
			return fmt.Errorf("request %s: its answer is acked here; nothing to forget", id)
		}
		rec.Forgotten = time.Now().Unix()
		// A cache as the record is until an ack (Remember): lost, the
		// request is outstanding again.
		return c.writeRecord(*rec, false)
	})
}

// Cancel publishes a signed cancel for a request this agent sent.
func (c *Client) Cancel(id string) error {
	s, err := c.Sent(id)
	if err != nil {
		return err
	}
	data, err := bridge.SignCancel(c.home.Identity(), bridge.Cancel{ID: id, Agent: c.home.Config.ID, Host: s.Host, Created: time.Now().Unix()})
	if err != nil {
		return err
	}
	rel := bridge.RequestPath(s.Host, c.home.Config.ID, id, bridge.ExtCancel)
	err = c.folder.Publish(rel, bridge.WriteBytes(data))
	if errors.Is(err, syncsafe.ErrExists) {
		// An earlier cancel of ours stands. Anything else at the name
		// (a folder writer's junk, a cut-short copy) would be refused by
		// the host, and the op would go on: it is replaced.
		old, rerr := c.folder.ReadFile(rel, bcrypto.KindCancel.MaxSize())
		if rerr == nil {
			if _, oerr := bridge.OpenCancel(old, id, s.Host, c.home.Config.ID, [][]byte{c.home.Identity().SignPublic()}); oerr == nil {
				return nil
			}
		}
		err = c.folder.PublishReplace(rel, bridge.WriteBytes(data))
	}
	return err
}

// GC removes this agent's own files the host no longer needs: acks of
// results the host has collected, and cancels and request files of requests
// whose result this agent holds, or that it forgot (Forget) once no host
// would start or answer them on sight. It never touches the host's files.
// It also acks again, in acked, each settled answer this home keeps whose
// result the host still holds while the folder has no ack of it that
// opens: one a power cut on this machine lost or tore (an ack is written
// without an fsync), which would keep the host's copy until its retention.
func (c *Client) GC(dryRun bool) (removed, acked []string, err error) {
	sent, err := c.List()
	if err != nil {
		return nil, nil, err
	}
	removed, acked = []string{}, []string{}
	var failed []error
	defer func() {
		if err == nil {
			err = errors.Join(failed...)
		}
	}()
	for _, s := range sent {
		// A kept uncertain result is not settled: its request's files
		// stay, for a human's rerun on the host.
		kept := c.keptStatus(s.ID)
		if kept == bridge.StatusUncertain {
			continue
		}
		_, resErr := c.folder.Lstat(bridge.ResultPath(s.Host, c.home.Config.ID, s.ID, bridge.ExtResult))
		var exts []string
		if kept == "" && s.Forgotten != 0 && time.Now().After(time.Unix(s.Expires, 0).Add(2*bridge.DefaultSkew)) && !c.Started(s.ID) {
			// Forgotten here and withdrawn, and past the time any host
			// would start it or answer it on sight (its clock may lag by
			// up to the skew): its manifest and payload only make a host
			// refuse them again at each start. Its cancel stays: a host
			// that recorded it before it went out of reach acts on that
			// (red team). Not while an answer is there (it is
			// outstanding again), a file at its name, or its progress.
			if _, err := c.folder.Lstat(bridge.ResultPath(s.Host, c.home.Config.ID, s.ID, bridge.ExtResult)); errors.Is(err, fs.ErrNotExist) {
				exts = append(exts, bridge.ExtManifest, bridge.ExtPayload)
			}
		}
		if kept != "" {
			exts = append(exts, bridge.ExtManifest, bridge.ExtPayload, bridge.ExtCancel)
			if errors.Is(resErr, fs.ErrNotExist) {
				exts = append(exts, bridge.ExtAck) // the host collected the result after the ack
			} else if resErr == nil {
				// One that fails (a directory at its name, a file
				// Windows holds open) does not stop the rest.
				if rel, err := c.ackAgain(&s, dryRun); err != nil {
					failed = append(failed, err)
				} else if rel != "" {
					acked = append(acked, rel)
				}
			}
		}
		for _, ext := range exts {
			rel := bridge.RequestPath(s.Host, c.home.Config.ID, s.ID, ext)
			if _, err := c.folder.Lstat(rel); err != nil {
				continue
			}
			removed = append(removed, rel)
			if !dryRun {
				if err := c.folder.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return removed, acked, err
				}
			}
		}
	}
	return removed, acked, nil
}

// ackAgain publishes the ack of the settled answer this home keeps for
// request s when the folder holds none that opens and names it (GC), and
// returns its name ("" when the one there stands, or when the kept copy no
// longer opens: acked, the host could collect the only copy that does);
// a dry run only names it. Without an fsync, as Ack's; the sync client is
// told. Under the records' lock, as Ack places its ack: an Ack of another
// process meanwhile is not undone.
func (c *Client) ackAgain(s *Sent, dryRun bool) (string, error) {
	needs := func() (sha string, ok bool, err error) {
		kept, rec, err := c.keptManifestAndRecord(s.ID)
		if err != nil {
			return "", false, nil
		}
		sha = bridge.SHA256Hex(kept)
		if c.ackNames(s.Host, s.ID, sha) {
			return sha, false, nil
		}
		ok, err = c.keptOpens(s, rec, kept)
		return sha, ok, err
	}
	if _, ok, err := needs(); !ok {
		return "", err // the common case, without the lock
	}
	rel := bridge.RequestPath(s.Host, c.home.Config.ID, s.ID, bridge.ExtAck)
	if dryRun {
		return rel, nil
	}
	unlock, err := c.lockRecords()
	if err != nil {
		return "", c.recordsBusy(s.ID, err)
	}
	defer unlock()
	sha, ok, err := needs()
	if !ok {
		return "", err
	}
	// The kept copy's name may not be durable (a process that kept it
	// died before its directory's fsync, which is why no ack went out):
	// made so before an ack names it.
	if err := syncRequests(c.home.Path("requests")); err != nil {
		return "", err
	}
	return rel, c.placeAck(s.Host, s.ID, sha, syncsafe.WithoutSync())
}

// keptManifest is the manifest of the result this agent acked for request
// id: in its record, or in requests/<id>.result in a home from before.
func (c *Client) keptManifest(id string) ([]byte, error) {
	data, _, err := c.keptManifestAndRecord(id)
	return data, err
}

// keptManifestAndRecord is keptManifest with the record it read (nil if
// missing or torn), which holds a small kept output (SPEC §10).
func (c *Client) keptManifestAndRecord(id string) ([]byte, *sentRecord, error) {
	rec, _ := c.readSent(id)
	if rec != nil && rec.Result != nil {
		return rec.Result, rec, nil
	}
	data, err := os.ReadFile(c.home.Path("requests", id+"."+bridge.ExtResult))
	return data, rec, err
}

// keptStatus is the status of the result this agent keeps for request id
// ("" if it keeps none). The copy was verified when it was kept.
func (c *Client) keptStatus(id string) string {
	data, err := c.keptManifest(id)
	if err != nil {
		return ""
	}
	return resultStatus(data)
}

// resultStatus is the status a result manifest this home keeps says, or "".
func resultStatus(data []byte) string {
	env, err := bcrypto.Parse(bcrypto.KindResult, data)
	if err != nil {
		return ""
	}
	var res bridge.Result
	if bcrypto.DecodeBody(env.Body(), &res) != nil {
		return ""
	}
	return res.Status
}

// checkPayloadFile checks that f holds exactly the payload p pins, reading
// it as a stream.
func checkPayloadFile(f io.ReaderAt, p bridge.Payload) error {
	h := sha256.New()
	n, err := io.Copy(h, io.NewSectionReader(f, 0, p.Len+1)) // one byte more: a longer copy is refused
	if err != nil {
		return err
	}
	if n < p.Len {
		return fmt.Errorf("%w: %d of %d bytes", bridge.ErrPending, n, p.Len)
	}
	if n != p.Len || hex.EncodeToString(h.Sum(nil)) != p.SHA256 {
		return bridge.ErrHashMismatch
	}
	return nil
}

// ErrEarlierHostKey: a result verifies under none of the host's keys this
// home holds, the home knows the host only from a later key generation on,
// and the request was made before that generation came into use: signed by
// an earlier key (or forged), it cannot be checked here. It wraps
// bcrypto.ErrBadSignature too.
var ErrEarlierHostKey = errors.New("signed by none of the host's keys this home holds")

// whyBadSignature says what is true of a result whose signature verified
// under none of the host's keys valid now: signed by a key of the host's
// that this home holds but no longer accepts (its overlap after a rotation
// ended, or revoked here), or possibly by an earlier key this home never
// held, or simply a bad signature. None of them says to send the request
// again: the host may have run it (a folder writer who spoils a result
// must not get a second run out of the agent).
func (c *Client) whyBadSignature(s *Sent, id string, data []byte, err error) error {
	p, _, perr := c.home.Peer(s.Host)
	env, eerr := bcrypto.Parse(bcrypto.KindResult, data)
	if perr != nil || eerr != nil || len(p.Keys) == 0 {
		return err
	}
	const noResend = "whether it ran cannot be told from here: `bridge ls` on the host shows it; send it again only if it did not run"
	now := time.Now()
	for _, k := range p.Keys {
		st := p.State(k, now)
		if st == trust.KeyValid || env.Verify(0, k.SignPub) != nil {
			continue
		}
		if st == trust.KeyRevoked {
			return bridge.WithHint(fmt.Errorf("result %s: %w: signed by host %q's key of generation %d, which is revoked here", id, err, p.Name, k.Seq), "%s", noResend)
		}
		return bridge.WithHint(fmt.Errorf("result %s: %w: signed by host %q's key of generation %d, whose overlap after its rotation ended %s: no longer accepted, as whoever holds an old key could sign one now",
			id, err, p.Name, k.Seq, time.Unix(k.ValidUntil, 0).UTC().Format(time.DateTime+" UTC")),
			"an answer read before then is kept in the home once acked; this one was not: %s", noResend)
	}
	if first := p.Keys[0]; first.Seq > 0 && c.madeBeforeHeldKeys(p, s) {
		return bridge.WithHint(fmt.Errorf("result %s: %w: %w: host %q's keys this home holds begin at its generation %d, and the request was made before the host took it up "+
			"(the home was made from an agent secret exported after that rotation, or paired since); signed by an earlier key (or forged), the result cannot be checked here",
			id, ErrEarlierHostKey, err, p.Name, first.Seq),
			"a home that held the host's earlier key reads it (the one the secret came from, while the host's overlap lasts); %s", noResend)
	}
	return err
}

// madeBeforeHeldKeys reports whether request s was made before the first
// host key this home holds came into use, so that its answer may be signed
// by an earlier key: by the time of the host's rotation statement to that
// key when it is in the folder (verified by that key's own signature),
// else by when this home began to trust the host.
func (c *Client) madeBeforeHeldKeys(p *trust.Peer, s *Sent) bool {
	first := p.Keys[0]
	data, err := c.folder.ReadFile(bridge.HostDir(p.ID)+"/"+bridge.RotationName(first.Seq), bcrypto.KindRotation.MaxSize())
	if err == nil {
		if env, err := bcrypto.Parse(bcrypto.KindRotation, data); err == nil && env.Verify(1, first.SignPub) == nil {
			var r bcrypto.Rotation
			if bcrypto.DecodeBody(env.Body(), &r) == nil && r.ID == p.ID && r.Seq == first.Seq {
				return s.Created < r.Created
			}
		}
	}
	return s.Created < p.Trusted
}
