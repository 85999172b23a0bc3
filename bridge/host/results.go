package host

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/runner"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// Results: sealed into private copies in the home first, then published
// into the folder, re-published when lost or replaced, never two for one id.

// publishResult seals the result, keeps the pair as the private copies
// under results/ (fsynced; the output first, the manifest last, so a
// manifest copy implies a complete pair), then publishes it into the folder
// from them without an fsync (DESIGN §4): a power cut that loses or tears
// the folder's copy leaves the private one, which recovery (adopt) or the
// next look (duplicate) publishes again, and an agent takes a torn result
// for one still arriving. The pair is sealed into staged files in the home
// first; a crash before they are kept leaves nothing in the folder, and the
// request is where the ledger has it. If copies exist from an earlier
// attempt, they are published instead of new ones: one id has one result.
// It returns the result manifest's SHA-256 and its status.
func (o *outbox) publishResult(j *job, rc bridge.Receipt, stdout, stderr runner.Output) (string, string, error) {
	dir := o.home.Path("results", j.agent)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	resCopy := filepath.Join(dir, j.req.ID+"."+bridge.ExtResult)
	manifest, err := os.ReadFile(resCopy)
	if err == nil {
		status, err := o.publishCopies(j.agent, j.req.ID)
		return bridge.SHA256Hex(manifest), status, err
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", "", err
	}
	replyKey, ok := j.keys.boxPub(j.req.ReplyBoxKid)
	if !ok {
		return "", "", fmt.Errorf("result %s: the reply key is not the agent's", j.req.ID)
	}
	// Sealed straight into the staged output, as the output is read: the
	// output is never in memory whole, sealed or not. The staged files are
	// named by the id (not temps the start-up sweep removes): a crash before
	// they are kept leaves them for recovery to verify and keep
	// (promoteStaged), or remove if a power cut cut them short.
	o.probe.Unsynced(stagedPath(dir, j.req.ID, bridge.ExtOutput), stagedPath(dir, j.req.ID, bridge.ExtResult))
	out, err := os.OpenFile(stagedPath(dir, j.req.ID, bridge.ExtOutput), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return "", "", err
	}
	kept := false
	defer func() {
		out.Close()
		if !kept {
			os.Remove(out.Name()) // renamed once kept
		}
	}()
	bw := resultWriters.Get().(*bufio.Writer)
	bw.Reset(out)
	defer func() {
		bw.Reset(nil)
		resultWriters.Put(bw)
	}()
	manifest, err = bridge.SealResult(bw, bridge.NewResult{
		Host: o.own().current, HostID: o.me, AgentBoxPub: replyKey, Request: j.req, RequestSHA: j.sha,
		Receipt: rc, StdoutFrom: stdout.Reader(), StdoutLen: stdout.Len(), StderrFrom: stderr.Reader(), StderrLen: stderr.Len(),
		Created: o.opt.Now(),
	})
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return "", "", err
	}
	res, err := os.OpenFile(stagedPath(dir, j.req.ID, bridge.ExtResult), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return "", "", err
	}
	defer func() {
		res.Close()
		if !kept {
			os.Remove(res.Name())
		}
	}()
	if _, err := res.Write(manifest); err != nil {
		return "", "", err
	}
	if err := o.keepCopies(dir, j.req.ID, out, res); err != nil {
		return "", "", err
	}
	kept = true
	o.crashPoint("kept")
	// A failed publish is tried again from the copies (adopt), never with
	// a second result.
	status, err := o.publishPair(j.agent, j.req.ID, manifest, filepath.Join(dir, j.req.ID+"."+bridge.ExtOutput))
	return bridge.SHA256Hex(manifest), status, err
}

// resultWriters buffer the sealed output as it is written (256 KiB: a
// large output goes in few writes), one per result being written, kept
// between results rather than made and dropped each time.
var resultWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 256<<10) }}

// keepCopies makes the staged output and manifest (files of dir) the
// private copies of a result: both fsynced, the output renamed first, the
// manifest last, and one fsync of the directory for the two. The two
// files' fsyncs run at once: the agent's wait is on them (the publish
// comes after), and a disk takes two flushes in flight in less time than
// one after the other (BENCHMARKS "Session 29").
func (o *outbox) keepCopies(dir, id string, out, res *os.File) error {
	outSynced := make(chan error, 1)
	go func() { outSynced <- out.Sync() }()
	err := res.Sync()
	if oerr := <-outSynced; err == nil {
		err = oerr
	}
	if err != nil {
		return err
	}
	o.probe.Synced(out.Name(), res.Name())
	if err := os.Rename(out.Name(), filepath.Join(dir, id+"."+bridge.ExtOutput)); err != nil {
		return err
	}
	o.crashPoint("kept-output") // the output kept, its manifest still staged: promoteStaged takes the pair so
	if err := os.Rename(res.Name(), filepath.Join(dir, id+"."+bridge.ExtResult)); err != nil {
		return err
	}
	return syncsafe.SyncDir(dir)
}

// stagedPath is the name of a result's staged output or manifest in dir.
func stagedPath(dir, id, ext string) string {
	return filepath.Join(dir, id+"."+ext+".staged")
}

// promoteStaged makes a result that a crash left staged (sealed, not yet
// kept, so never published) the private copies, when it is complete and
// this host's own answer to the request the ledger admitted (requestSHA):
// recovery then adopts it as any kept result. A crash between keepCopies'
// two renames leaves the output kept and the manifest staged: the kept
// output, if it is the one the manifest pins, completes the pair. A staged
// pair that does not check out (cut short by a power cut) is removed. It
// reports whether copies were kept.
func (o *outbox) promoteStaged(agent, id, requestSHA string) bool {
	dir := o.home.Path("results", agent)
	outPath, resPath := stagedPath(dir, id, bridge.ExtOutput), stagedPath(dir, id, bridge.ExtResult)
	if _, err := os.Lstat(outPath); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Lstat(resPath); err == nil {
			outPath = filepath.Join(dir, id+"."+bridge.ExtOutput) // renamed already: kept
		}
	}
	manifest, err := os.ReadFile(resPath) // the home's own file, as publishResult reads its copy
	if errors.Is(err, fs.ErrNotExist) {
		os.Remove(stagedPath(dir, id, bridge.ExtOutput))
		return false
	}
	ok := err == nil
	var res *bridge.Result
	if ok {
		res, err = o.openOwnResult(manifest, agent, id)
		ok = err == nil && res.RequestSHA256 == requestSHA
	}
	if ok {
		ok = stagedOutputMatches(outPath, &res.Payload)
	}
	if ok {
		for _, p := range []string{outPath, resPath} {
			if err := syncFile(p); err != nil {
				ok = false
			}
		}
	}
	if ok && renameIfNot(outPath, filepath.Join(dir, id+"."+bridge.ExtOutput)) == nil &&
		os.Rename(resPath, filepath.Join(dir, id+"."+bridge.ExtResult)) == nil && syncsafe.SyncDir(dir) == nil {
		o.log.Info("recover: kept the result a crash left staged", "agent", agent, "id", id)
		return true
	}
	o.log.Warn("recover: a staged result did not check out; removed", "agent", agent, "id", id, "err", err)
	os.Remove(stagedPath(dir, id, bridge.ExtOutput)) // a kept output stays: it was never published without its manifest
	os.Remove(resPath)
	return false
}

// renameIfNot renames from to to, unless they are the same path.
func renameIfNot(from, to string) error {
	if from == to {
		return nil
	}
	return os.Rename(from, to)
}

// stagedOutputMatches reports whether the file at path holds exactly the
// sealed output p pins (length and SHA-256).
func stagedOutputMatches(path string, p *bridge.Payload) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	want := p.Digest()
	return err == nil && n == p.Len && bytes.Equal(h.Sum(nil), want[:])
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ownResult verifies a result manifest as one this host signed for agent
// and id, and returns its status.
func (o *outbox) ownResult(data []byte, agent, id string) (string, error) {
	res, err := o.openOwnResult(data, agent, id)
	if err != nil {
		return "", err
	}
	return res.Status, nil
}

// openOwnResult is ownResult returning the whole manifest body.
func (o *outbox) openOwnResult(data []byte, agent, id string) (*bridge.Result, error) {
	var res bridge.Result
	if err := bridge.OpenBody(bcrypto.KindResult, data, o.own().signPubs(), &res); err != nil {
		return nil, err
	}
	if res.ID != id || res.Agent != agent || res.Host != o.me {
		return nil, fmt.Errorf("result %s: %w", id, bridge.ErrNameMismatch)
	}
	return &res, nil
}

// errNewerResult: the folder holds a result this host signed for the same
// request that is newer than the one about to be published (a home restored
// from a backup holds the older): it is never replaced.
var errNewerResult = errors.New("the folder holds a newer result of this host for the request")

// publishCopies publishes the private copies of a result (output, then
// manifest) where the folder does not already hold them. The host owns
// these names (SPEC §5), and the private copy is the one result of the id:
// what stands there otherwise is replaced, whether a folder writer's junk,
// a damaged copy, or an earlier result of this host that a human has since
// settled (an uncertain run, a request whose record was lost).
func (o *outbox) publishCopies(agent, id string) (string, error) {
	dir := o.home.Path("results", agent)
	manifest, err := os.ReadFile(filepath.Join(dir, id+"."+bridge.ExtResult))
	if err != nil {
		return "", err
	}
	// The copies' names are durable before the folder's unflushed pair
	// names them: a keep whose directory fsync failed (the answer then
	// tried again from the copies) left them in place without it.
	if err := syncsafe.SyncDir(dir); err != nil {
		return "", err
	}
	return o.publishPair(agent, id, manifest, filepath.Join(dir, id+"."+bridge.ExtOutput))
}

// publishPair is publishCopies of a result manifest and the file holding
// its sealed output, a private copy: kept, fsynced, before this publishes it
// without an fsync (syncsafe.WithoutSync).
func (o *outbox) publishPair(agent, id string, manifest []byte, outSrc string) (string, error) {
	status, err := o.ownResult(manifest, agent, id)
	if err != nil {
		return "", fmt.Errorf("private result copy: %w", err)
	}
	resPath, outPath := bridge.ResultPath(o.me, agent, id, bridge.ExtResult), bridge.ResultPath(o.me, agent, id, bridge.ExtOutput)
	if err := o.resultDir(agent); err != nil {
		return "", err
	}
	replace := false
	existing, err := o.folder.ReadFile(resPath, bcrypto.KindResult.MaxSize())
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err == nil && bytes.Equal(existing, manifest):
		// Published already; make sure the output is intact too.
		if o.outputIntact(manifest, outPath) {
			return status, nil
		}
		return status, o.publishFile(outPath, outSrc, true, syncsafe.WithoutSync())
	case err == nil:
		if old, verr := o.openOwnResult(existing, agent, id); verr != nil && !bytes.ContainsFunc(existing, func(r rune) bool { return r != 0 }) {
			// Nothing or zeros: what a power cut leaves of a pair
			// published without a flush, not a folder writer's file.
			if o.firstTime("torn:" + resPath) { // a folder writer may put zeros there again and again
				o.log.Info("publishing a result again over a copy cut short (a power cut?)", "agent", agent, "id", id)
			}
		} else if verr != nil {
			o.refuseFile(resPath, fmt.Errorf("replacing a file at a result name that this host did not sign: %w", verr))
		} else if mine, _ := o.openOwnResult(manifest, agent, id); mine != nil && o.newerOwn(old, mine, existing) {
			if o.outputIntact(existing, outPath) {
				// A newer answer of this host that the ledger does not
				// know: the ledger is behind it (a home restored from a
				// backup), and the catch-up records it.
				if o.firstTime("newer:" + resPath) {
					o.log.Error("not replacing a newer result of this host with an older one (was this home restored from a backup?)", "agent", agent, "id", id,
						"folder", old.Status, "home", mine.Status)
				}
				return "", fmt.Errorf("publish result %s: %w", id, errNewerResult)
			}
			// One whose output is gone: nobody can use it, and the
			// ledger's answer is what stands. The agent was told a
			// rerun's answer would come: tell it that this one stands
			// after all.
			o.audit.log(AuditEvent{Event: "record-lost", Agent: agent, ID: id, Status: status,
				Detail: "a newer " + old.Status + " result of this host lost its output; the ledger's answer is published again"})
			o.log.Error("a newer result of this host lost its output, and the ledger does not know it (was this home restored from a backup?): publishing the ledger's answer again",
				"agent", agent, "id", id, "lost", old.Status, "published", status)
			if status == bridge.StatusUncertain {
				o.notify(agent, bridge.Note{Event: bridge.EventRerunLost, Request: id, Supersedes: bridge.SHA256Hex(manifest),
					Text: fmt.Sprintf("the answer of the rerun of request %s was lost on the host; the uncertain answer stands: ask the human", id)})
			}
		} else if o.folderLine(bridge.ToHostDir(o.me, agent) + "/" + id) { // a folder writer's replay: within the budget
			o.audit.log(AuditEvent{Event: "replaced", Agent: agent, ID: id, Status: status, Detail: "an earlier " + old.Status + " result of this host, since settled"})
		}
		replace = true
	default: // not a regular file, too large: not ours either
		if err := o.clearName(resPath, err); err != nil {
			return "", err
		}
	}
	// The output's name too may hold what a folder writer planted there
	// (a directory cannot be renamed over).
	if fi, err := o.folder.Lstat(outPath); err == nil && !fi.Mode().IsRegular() {
		if err := o.clearName(outPath, fmt.Errorf("%w: %v", syncsafe.ErrNotRegular, fi.Mode().Type())); err != nil {
			return "", err
		}
	}
	// One nudge for both files (the output is held until the manifest
	// lands, syncsafe.WithoutDirSync): Syncthing sends an index update at
	// most every 250 ms, so a second scan right after the first would wait
	// that long (docs/CLI.md, Syncthing nudge).
	// An output without its manifest is ours and referenced by nothing, so
	// it may be replaced.
	// Neither file is fsynced, nor their directory: the private copies
	// are, and until the ledger is done a crash publishes both again from
	// them (adopt); after, a look that finds them lost or torn does
	// (duplicate, the result checks of the rescans).
	// But a pair that replaces another result (a human's settlement, a
	// rerun's answer, a folder writer's junk) is flushed: the finished
	// cache may vouch for the pair it replaces by its stamps, and a power
	// cut that lost the renames would bring that one back unseen.
	noSync := []syncsafe.PublishOption{syncsafe.WithoutSync()}
	if replace {
		noSync = nil
	} else {
		o.probe.Unsynced(filepath.Join(o.folder.Path(), filepath.FromSlash(outPath)), filepath.Join(o.folder.Path(), filepath.FromSlash(resPath)))
	}
	if err := o.publishFile(outPath, outSrc, true, append([]syncsafe.PublishOption{syncsafe.WithoutDirSync()}, noSync...)...); err != nil {
		return "", err
	}
	o.crashPoint("published-output")
	if err := o.publishBytes(resPath, manifest, replace, noSync...); err != nil {
		return "", err
	}
	o.crashPoint("published")
	return status, nil
}

// outputIntact reports whether the folder's output file matches the pin in
// the result manifest (streamed: outputs can be large).
func (o *outbox) outputIntact(manifest []byte, rel string) bool {
	env, err := bcrypto.Parse(bcrypto.KindResult, manifest)
	if err != nil {
		return false
	}
	var res bridge.Result
	if bcrypto.DecodeBody(env.Body(), &res) != nil {
		return false
	}
	return syncsafe.Settle(o.folder, rel, res.Payload.Len, res.Payload.Digest(), io.Discard) == nil
}

func (o *outbox) publishFile(rel, src string, replace bool, opts ...syncsafe.PublishOption) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	write := func(w io.Writer) error {
		_, err := io.Copy(w, f)
		return err
	}
	opts = append(opts, syncsafe.WithMode(0o644))
	if replace {
		return o.folder.PublishReplace(rel, write, opts...)
	}
	return o.folder.Publish(rel, write, opts...)
}

// publishBytes is publishFile of bytes in memory (a result manifest).
func (o *outbox) publishBytes(rel string, data []byte, replace bool, opts ...syncsafe.PublishOption) error {
	write := func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
	opts = append(opts, syncsafe.WithMode(0o644))
	if replace {
		return o.folder.PublishReplace(rel, write, opts...)
	}
	return o.folder.Publish(rel, write, opts...)
}

// supersededSuffix names the private copies of an uncertain answer that a
// human's rerun set aside (results/<agent>/<id>.result.superseded and
// .output.superseded) until the collection removes them.
const supersededSuffix = ".superseded"

// restoreSuperseded puts back the private copies of an uncertain answer
// that a rerun set aside, when the ledger holds that very answer again: the
// rerun was lost (a crash before its record, a ledger restored from a
// backup), and without the copies nothing could publish the answer again
// (invariant 4). The agent, told that a rerun was ordered, is told that it
// was lost and that the uncertain answer stands. It reports whether it did.
func (o *outbox) restoreSuperseded(ent ledger.Entry) bool {
	if ent.State != ledger.StateUncertain || ent.ResultSHA256 == "" {
		return false
	}
	dir := o.home.Path("results", ent.Agent)
	res, out := filepath.Join(dir, ent.ID+"."+bridge.ExtResult), filepath.Join(dir, ent.ID+"."+bridge.ExtOutput)
	if _, err := os.Lstat(res); !errors.Is(err, fs.ErrNotExist) {
		return false // kept as it should be (or unreadable: not ours to mend)
	}
	manifest, err := os.ReadFile(res + supersededSuffix)
	if err != nil || bridge.SHA256Hex(manifest) != ent.ResultSHA256 {
		return false
	}
	r, err := o.openOwnResult(manifest, ent.Agent, ent.ID)
	if err != nil {
		return false
	}
	// The output that goes with it: set aside too, or still kept (a
	// reconcile cut short between its two renames). Only one whose bytes
	// the manifest pins is put back with it, output first, the manifest
	// last: the manifest says the pair is complete (hasSealedResult).
	switch {
	case stagedOutputMatches(out+supersededSuffix, &r.Payload):
		if os.Rename(out+supersededSuffix, out) != nil {
			return false
		}
	case !stagedOutputMatches(out, &r.Payload):
		return false
	}
	if os.Rename(res+supersededSuffix, res) != nil {
		return false
	}
	syncsafe.SyncDir(dir)
	o.audit.log(AuditEvent{Event: "record-lost", Agent: ent.Agent, ID: ent.ID, Status: bridge.StatusUncertain,
		Detail: "a human's settlement or rerun of this uncertain request is not in the ledger (cut short, or a ledger restored from a backup): the uncertain answer stands"})
	o.log.Warn("a settlement or rerun of an uncertain request was lost: its uncertain answer stands", "key", ent.Key,
		"hint", "run `bridge reconcile "+ent.Key+" --as done|failed|rerun` again if it still applies")
	o.notify(ent.Agent, bridge.Note{Event: bridge.EventRerunLost, Request: ent.ID, Supersedes: ent.ResultSHA256,
		Text: fmt.Sprintf("the rerun of request %s was lost on the host; the uncertain answer stands: ask the human", ent.ID)})
	return true
}

// duplicate handles a request id the ledger already finished: it never runs
// again (invariant 4); its stored result is re-published if it is missing
// or was replaced.
func (d *Daemon) duplicate(ent ledger.Entry, keys *agentKeys) {
	d.out.restoreSuperseded(ent)
	if ent.State == ledger.StateUncertain {
		// A home restored from a backup may hold the uncertain answer that a
		// rerun has since replaced in the folder: the ledger catches up.
		if sha, status, ok := d.out.newerResult(ent); ok && sha != ent.ResultSHA256 {
			if j, err := d.reload(ent, keys); err == nil {
				d.catchUp(j, ent, sha, status)
			}
			return
		}
	}
	copyPath := d.home.Path("results", ent.Agent, ent.ID+"."+bridge.ExtResult)
	if want, err := os.ReadFile(copyPath); err == nil {
		have, err := d.folder.ReadFile(bridge.ResultPath(d.me, ent.Agent, ent.ID, bridge.ExtResult), bcrypto.KindResult.MaxSize())
		if err != nil || !bytes.Equal(have, want) || !d.out.outputIntact(want, bridge.ResultPath(d.me, ent.Agent, ent.ID, bridge.ExtOutput)) {
			if _, err := d.out.publishCopies(ent.Agent, ent.ID); err != nil {
				d.log.Warn("re-publish result", "key", ent.Key, "err", err)
				return
			}
			// A folder writer may remove results as fast as they come
			// back: its lines count against the agent directory's budget.
			if d.folderLine(bridge.ToHostDir(d.me, ent.Agent) + "/" + ent.ID) {
				d.audit.log(AuditEvent{Event: "republished", Agent: ent.Agent, ID: ent.ID})
			}
		}
	}
	d.markFinished(ent.Agent, ent.ID)
}

// newerOwn reports whether old, a result of this host in the folder (file
// bytes oldFile), is a newer answer to the same request than mine that the
// ledger does not know: the ledger is behind it (a home restored from a
// backup taken before it). One the ledger recorded is not (a rerun's answer
// carries an earlier time than the answer it replaces when the clock
// stepped back). Times are whole seconds: within the same second, only an
// uncertain entry can have been answered again since (a rerun, a
// settlement); a settled entry's answer is final, and anything else is a
// replay.
func (o *outbox) newerOwn(old, mine *bridge.Result, oldFile []byte) bool {
	if old.RequestSHA256 != mine.RequestSHA256 || old.Created < mine.Created {
		return false
	}
	ent, err := o.ledger.Get(mine.Agent + "/" + mine.ID)
	if err != nil || ent.ResultSHA256 == bridge.SHA256Hex(oldFile) {
		return false
	}
	return old.Created > mine.Created || ent.State == ledger.StateUncertain
}

// resultDir makes sure the agent's result directory, which this host
// owns, is a directory: a folder writer may have removed it, or put a file
// or a link at its name or at one of the host's own directories above it,
// which would stop every answer to the agent.
func (o *outbox) resultDir(agent string) error {
	dir := bridge.ToAgentDir(o.me, agent)
	if fi, err := o.folder.Lstat(dir); err == nil && fi.IsDir() {
		return nil
	}
	if err := o.ownDir(dir); err != nil {
		return err
	}
	// The op catalog lived there too.
	if err := o.publishForAgents(); err != nil {
		o.log.Warn("publish the op catalog", "err", err)
	}
	return nil
}

// ownDir makes sure dir, one of the host's own directories below
// hosts/<host>, is a directory reached without a link: whatever a folder
// writer put at its name or at one of the host's names above it (a file, a
// link) is cleared first.
func (o *outbox) ownDir(dir string) error {
	if fi, err := o.folder.Lstat(dir); err == nil && fi.IsDir() {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := 2; i <= len(parts); i++ { // from hosts/<host>: "hosts" is everyone's
		p := strings.Join(parts[:i], "/")
		fi, err := o.folder.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err == nil && !fi.IsDir() {
			if err := o.clearName(p, fmt.Errorf("%w: %v where the host keeps a directory", syncsafe.ErrNotRegular, fi.Mode().Type())); err != nil {
				return err
			}
			break
		}
	}
	return o.folder.MkdirAll(dir)
}

// clearName removes what stands at one of the host's own names in the
// folder and is not a file it wrote (a directory, a link, a huge file a
// folder writer planted), so that a result can be published there.
func (o *outbox) clearName(rel string, why error) error {
	o.refuseFile(rel, fmt.Errorf("replacing what stands at a result name: %w", why))
	if err := o.folder.RemoveAll(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
