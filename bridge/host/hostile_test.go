package host

// The hostile-input battery: a table of malformed, forged and abusive inputs
// at the folder level, each planted in the shared folder (or submitted
// through the real client) while one real daemon serves. For every case the
// daemon must run nothing the case does not declare, must record why (an
// audit line naming the file, a signed result with the expected reason code,
// or for names outside the protocol's patterns an "ignoring" note in its
// log), and must stay alive: after each batch a valid request completes.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// Every op of this policy first appends its request id to COUNT_FILE, so
// each execution is attributed to the case that caused it.
const hostilePolicy = `
[defaults]
env = ["PATH", "COUNT_FILE"]

[ops.ok]
argv = ["sh", "-c", 'echo "$0" >> "$COUNT_FILE"; echo ok', "{request_id}"]

[ops.str]
argv = ["sh", "-c", 'echo "$0" >> "$COUNT_FILE"; printf "%s" "$1"', "{request_id}", "{s}"]
[ops.str.args.s]
type = "string"
pattern = "[a-zA-Z0-9 ]{0,64}"

[ops.lit]
argv = ["sh", "-c", 'echo "$0" >> "$COUNT_FILE"; printf "%s" "$1"', "{request_id}", "{v}"]
[ops.lit.args.v]
type = "string"
pattern = "[ -~]{1,64}"
max_len = 16

[ops.num]
argv = ["sh", "-c", 'echo "$0" >> "$COUNT_FILE"', "{request_id}", "{n}"]
[ops.num.args.n]
type = "int"

[ops.flag]
argv = ["sh", "-c", 'echo "$0" >> "$COUNT_FILE"', "{request_id}", "{b}"]
[ops.flag.args.b]
type = "bool"

[ops.color]
argv = ["sh", "-c", 'echo "$0" >> "$COUNT_FILE"', "{request_id}", "{c}"]
[ops.color.args.c]
type = "enum"
values = ["red", "green"]

[ops.file]
argv = ["sh", "-c", 'echo "$0" >> "$COUNT_FILE"; printf "%s" "$1"', "{request_id}", "{p}"]
[ops.file.args.p]
type = "path"
root = "ROOT"

[ops.envy]
argv = ["sh", "-c", 'echo "$0" >> "$COUNT_FILE"; printf "%s\n" "$1"; env', "{request_id}", "{v}"]
[ops.envy.args.v]
type = "string"
pattern = "[ -~]{1,64}"

[ops.big]
argv = ["sh", "-c", 'echo "$0" >> "$COUNT_FILE"; yes xxxxxxxxx | head -c 10000', "{request_id}"]
max_output = "1KiB"

[ops.nap]
argv = ["sh", "-c", 'echo "$0" >> "$COUNT_FILE"; sleep 30', "{request_id}"]
timeout = "1s"

[ops.gate]
argv = ["sh", "-c", 'echo "$0" >> "$COUNT_FILE"', "{request_id}"]
approve = true

[ops.theirs]
argv = ["sh", "-c", 'echo "$0" >> "$COUNT_FILE"', "{request_id}"]

[agents.cloud-1]
ops = ["ok", "str", "lit", "num", "flag", "color", "file", "envy", "big", "nap", "gate"]

[agents.other]
ops = ["theirs"]
`

// What a case must end in.
type wantKind int

const (
	wantAudit   wantKind = iota // an audit line (events) naming marker, with reason
	wantResult                  // a signed result for id with status and reason
	wantIgnored                 // an "ignoring a file that is not ours" log line naming marker
	wantSilent                  // nothing to see: outside the watched tree (SPEC §5)
	wantErr                     // the input was refused at the API with reason
	wantSkip                    // cannot be expressed here; note says why
)

var wantKindNames = map[wantKind]string{wantAudit: "audit", wantResult: "result", wantIgnored: "ignored",
	wantSilent: "silent", wantErr: "api-error", wantSkip: "skipped"}

type hostileWant struct {
	kind   wantKind
	id     string   // request id whose executions are counted (and whose result is read)
	others []string // further ids planted by the case, which must never run
	marker string   // wantAudit: in the line's file, or equal to its id; wantIgnored: in the log line
	events []string // wantAudit: accepted events (default refused, waiting)
	status string   // wantResult
	reason string   // wantAudit, wantResult, wantErr
	runs   int      // executions of id the case declares (0 unless it is a valid request)
	check  func(*agent.Outcome) error
	err    error  // wantErr: what the API returned
	note   string // wantSkip, wantSilent: why
}

type hostileCase struct {
	name  string
	plant func(t *testing.T, h *hostileEnv) hostileWant
}

// hostileEnv is the pair under attack plus what the cases need.
type hostileEnv struct {
	p          *pair
	agent2     *trust.Home // a second trusted agent ("other")
	hostBundle *bcrypto.Bundle
	other      *bcrypto.Identity // a host nobody trusts
	otherB     *bcrypto.Bundle
	evil       *bcrypto.Identity // a key nobody trusts
	countFile  string
	log        *testkit.LockedBuffer
	stopped    chan struct{} // closed when the daemon's Run returns
}

func (h *hostileEnv) dir() string { return h.p.toHost() }

func (h *hostileEnv) dir2() string {
	return filepath.Join(h.p.folder, bridge.ToHostDir(h.p.host.Config.ID, h.agent2.Config.ID))
}

func (h *hostileEnv) put(t *testing.T, name string, data []byte) {
	t.Helper()
	putIn(t, h.dir(), name, data)
}

func putIn(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// deliver puts a request's payload, then its manifest, as a sync client would.
func (h *hostileEnv) deliver(t *testing.T, id string, m, pl []byte) {
	t.Helper()
	h.put(t, id+".payload", pl)
	h.put(t, id+".manifest", m)
}

// spec describes a request to craft; zero fields give a valid request.
type spec struct {
	id       string
	op       string
	args     map[string]string
	header   any    // replaces the Call
	plain    []byte // replaces the whole plaintext (framing included) when not nil
	stdin    []byte
	signer   *bcrypto.Identity
	agentID  string
	to       *bcrypto.Bundle // the host named in the manifest (default: ours)
	sealTo   []byte          // the box key the payload is sealed to (default: to's)
	created  time.Time
	expires  time.Time
	mutate   func([]byte) []byte   // edits the sealed payload
	repin    bool                  // pin (and sign) the edited payload
	req      func(*bridge.Request) // last edits of the manifest body
	body     func([]byte) []byte   // edits of the encoded body, before signing
	raw      func([]byte) []byte   // edits of the signed file
	noRecall bool                  // do not remember it in the agent's home
}

// seal crafts a request exactly as spec says, bypassing SealRequest's own
// checks, and returns its id, manifest and payload.
func (h *hostileEnv) seal(t *testing.T, s spec) (string, []byte, []byte) {
	t.Helper()
	agentID := h.p.agent.Identity()
	if s.id == "" {
		s.id = bridge.NewRequestID()
	}
	if s.signer == nil {
		s.signer = agentID
	}
	if s.agentID == "" {
		s.agentID = h.p.agent.Config.ID
	}
	if s.to == nil {
		s.to = h.hostBundle
	}
	if s.sealTo == nil {
		s.sealTo = s.to.BoxPub
	}
	if s.created.IsZero() {
		s.created = time.Now()
	}
	if s.expires.IsZero() {
		s.expires = s.created.Add(time.Hour)
	}
	plain := s.plain
	if plain == nil {
		hdr := s.header
		if hdr == nil {
			args := s.args
			if args == nil {
				args = map[string]string{}
			}
			hdr = bridge.Call{V: 1, Op: s.op, Args: args}
		}
		body, err := bcrypto.EncodeBody(hdr)
		if err != nil {
			t.Fatal(err)
		}
		plain = binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		plain = append(append(plain, body...), s.stdin...)
	}
	var ct bytes.Buffer
	w, wrapped, err := bcrypto.NewSealer(&ct, s.sealTo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	payload := ct.Bytes()
	pin := bridge.Payload{Len: int64(len(payload)), SHA256: bridge.SHA256Hex(payload), Key: wrapped}
	if s.mutate != nil {
		payload = s.mutate(bytes.Clone(payload))
		if s.repin {
			pin.Len, pin.SHA256 = int64(len(payload)), bridge.SHA256Hex(payload)
		}
	}
	r := bridge.Request{V: 1, ID: s.id, Agent: s.agentID, AgentKid: s.signer.SignKid(), Host: s.to.ID, HostBoxKid: s.to.BoxKid(),
		ReplyBoxKid: agentID.BoxKid(), Created: s.created.Unix(), Expires: s.expires.Unix(), Payload: pin}
	if s.req != nil {
		s.req(&r)
	}
	body, err := bcrypto.EncodeBody(&r)
	if err != nil {
		t.Fatal(err)
	}
	if s.body != nil {
		body = s.body(body)
	}
	m, err := bcrypto.Sign(bcrypto.KindRequest, body, s.signer)
	if err != nil {
		t.Fatal(err)
	}
	if s.raw != nil {
		m = s.raw(bytes.Clone(m))
	}
	if bridge.ValidID(s.id) && !s.noRecall {
		op := s.op
		if err := h.p.client.Remember(&agent.Sent{V: 1, ID: s.id, Host: h.hostBundle.ID, HostName: "laptop", Op: op, Args: s.args,
			ManifestSHA256: bridge.SHA256Hex(m), Created: r.Created, Expires: r.Expires}, m); err != nil {
			t.Fatal(err)
		}
	}
	return s.id, m, payload
}

// request crafts and delivers a request whose answer must be a signed
// result with status and reason.
func (h *hostileEnv) request(t *testing.T, s spec, status, reason string) hostileWant {
	t.Helper()
	id, m, pl := h.seal(t, s)
	h.deliver(t, id, m, pl)
	return hostileWant{kind: wantResult, id: id, status: status, reason: reason}
}

func (h *hostileEnv) rejected(t *testing.T, s spec, reason string) hostileWant {
	t.Helper()
	return h.request(t, s, bridge.StatusRejected, reason)
}

// refused delivers a crafted request whose manifest must be refused.
func (h *hostileEnv) refused(t *testing.T, s spec, reason string) hostileWant {
	t.Helper()
	id, m, pl := h.seal(t, s)
	h.deliver(t, id, m, pl)
	return hostileWant{kind: wantAudit, id: id, marker: id, reason: reason}
}

// badArg submits op with args through the real client: the policy must
// refuse it as bad-argument.
func (h *hostileEnv) badArg(t *testing.T, op string, args map[string]string) hostileWant {
	t.Helper()
	return h.rejected(t, spec{op: op, args: args}, "bad-argument")
}

// doneRequest delivers a valid "ok" request and waits for its result.
func (h *hostileEnv) doneRequest(t *testing.T) (string, []byte, []byte) {
	t.Helper()
	id, m, pl := h.seal(t, spec{op: "ok"})
	h.deliver(t, id, m, pl)
	if out := h.p.wait(t, id); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("setup request %s: %s %s", id, out.Receipt.Status, out.Receipt.Reason)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to record done", func() bool { return h.p.entry(t, id).State == ledger.StateDone })
	return id, m, pl
}

// nameTrick plants a valid manifest under a name outside the protocol's
// patterns (its payload at the proper name): the daemon must ignore it.
func (h *hostileEnv) nameTrick(t *testing.T, name func(id string) string) hostileWant {
	t.Helper()
	id, m, pl := h.seal(t, spec{op: "ok"})
	h.put(t, id+".payload", pl)
	h.put(t, name(id), m)
	return hostileWant{kind: wantIgnored, id: id, marker: id[4:31]}
}

func flip(i int) func([]byte) []byte {
	return func(b []byte) []byte {
		if i < 0 {
			i += len(b)
		}
		b[i] ^= 0x01
		return b
	}
}

func bundleWithKeys(t *testing.T, signer *bcrypto.Identity, signPub, boxPub []byte) string {
	t.Helper()
	body, err := bcrypto.EncodeBody(bcrypto.Bundle{V: 1, Role: "agent", Name: "evil", ID: signer.SignKid(),
		SignPub: signPub, BoxPub: boxPub, Created: time.Now().Unix()})
	if err != nil {
		t.Fatal(err)
	}
	signed, err := bcrypto.Sign(bcrypto.KindBundle, body, signer)
	if err != nil {
		t.Fatal(err)
	}
	return bcrypto.BundleText(signed)
}

// apiErr is the want of an input the API refuses.
func apiErr(err error, reason string) hostileWant {
	return hostileWant{kind: wantErr, err: err, reason: reason}
}

func hostileCases() []hostileCase {
	return []hostileCase{
		// Forged.
		{"forged/signature-bit-flipped", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", raw: flip(-1)}, "bad-signature")
		}},
		{"forged/signed-by-untrusted-key", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", signer: h.evil}, "bad-signature")
		}},
		{"forged/body-edited-after-signing", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", raw: func(m []byte) []byte {
				i := bytes.Index(m, []byte(`"sha256":"`)) + len(`"sha256":"`)
				if m[i] == '0' {
					m[i] = '1'
				} else {
					m[i] = '0'
				}
				return m
			}}, "bad-signature")
		}},
		{"forged/attacker-bundle-swapped-into-folder", func(t *testing.T, h *hostileEnv) hostileWant {
			// The folder's agent.bundle is not where the host's trust comes from.
			b, err := h.evil.SignBundle(bcrypto.Bundle{Role: "agent", Name: "cloud-1", ID: h.evil.SignKid()})
			if err != nil {
				t.Fatal(err)
			}
			h.put(t, bridge.AgentBundleName, b)
			return h.refused(t, spec{op: "ok", signer: h.evil}, "bad-signature")
		}},
		{"forged/bundle-sign-key-31-bytes", func(t *testing.T, h *hostileEnv) hostileWant {
			_, err := h.p.host.Trust(bundleWithKeys(t, h.evil, h.evil.SignPublic()[:31], h.evil.BoxPublic()), "evil")
			return apiErr(err, "bad-key")
		}},
		{"forged/bundle-box-key-33-bytes", func(t *testing.T, h *hostileEnv) hostileWant {
			_, err := h.p.host.Trust(bundleWithKeys(t, h.evil, h.evil.SignPublic(), append(h.evil.BoxPublic(), 0)), "evil")
			return apiErr(err, "bad-key")
		}},
		{"forged/bundle-box-key-low-order", func(t *testing.T, h *hostileEnv) hostileWant {
			_, err := h.p.host.Trust(bundleWithKeys(t, h.evil, h.evil.SignPublic(), make([]byte, 32)), "evil")
			return apiErr(err, "bad-key")
		}},
		{"forged/cancel-signed-by-untrusted-key", func(t *testing.T, h *hostileEnv) hostileWant {
			id := bridge.NewRequestID()
			c, err := bridge.SignCancel(h.evil, bridge.Cancel{ID: id, Agent: h.p.agent.Config.ID, Host: h.hostBundle.ID, Created: time.Now().Unix()})
			if err != nil {
				t.Fatal(err)
			}
			h.put(t, id+".cancel", c)
			return hostileWant{kind: wantAudit, marker: id + ".cancel", reason: "bad-signature"}
		}},
		{"forged/cancel-under-another-id", func(t *testing.T, h *hostileEnv) hostileWant {
			id, stem := bridge.NewRequestID(), bridge.NewRequestID()
			c, err := bridge.SignCancel(h.p.agent.Identity(), bridge.Cancel{ID: id, Agent: h.p.agent.Config.ID, Host: h.hostBundle.ID, Created: time.Now().Unix()})
			if err != nil {
				t.Fatal(err)
			}
			h.put(t, stem+".cancel", c)
			return hostileWant{kind: wantAudit, marker: stem + ".cancel", reason: "name-mismatch"}
		}},

		// Replayed.
		{"replay/same-bytes-after-done-result-lost", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, pl := h.doneRequest(t)
			for _, ext := range []string{bridge.ExtResult, bridge.ExtOutput} {
				os.Remove(filepath.Join(h.p.toAgent(), id+"."+ext))
			}
			os.Remove(filepath.Join(h.dir(), id+".manifest"))
			os.Remove(filepath.Join(h.dir(), id+".payload"))
			h.deliver(t, id, m, pl)
			return hostileWant{kind: wantAudit, id: id, marker: id, events: []string{"republished"}, runs: 1}
		}},
		{"replay/same-id-other-content-after-done", func(t *testing.T, h *hostileEnv) hostileWant {
			id, _, _ := h.doneRequest(t)
			_, m, pl := h.seal(t, spec{id: id, op: "ok", created: time.Now().Add(-time.Second), noRecall: true})
			os.Remove(filepath.Join(h.dir(), id+".manifest"))
			os.Remove(filepath.Join(h.dir(), id+".payload"))
			h.deliver(t, id, m, pl)
			return hostileWant{kind: wantAudit, id: id, marker: id, reason: "replay", runs: 1}
		}},
		{"replay/same-id-other-content-while-pending", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, _ := h.seal(t, spec{op: "ok"})
			h.put(t, id+".manifest", m)
			testkit.WaitFor(t, 5*time.Second, "the manifest to be seen", func() bool { return h.p.entry(t, id).State == ledger.StatePending })
			_, m2, pl2 := h.seal(t, spec{id: id, op: "ok", created: time.Now().Add(-time.Second), noRecall: true})
			os.Remove(filepath.Join(h.dir(), id+".manifest"))
			h.deliver(t, id, m2, pl2)
			return hostileWant{kind: wantAudit, id: id, marker: id, reason: "replay"}
		}},

		// Times.
		{"time/expired", func(t *testing.T, h *hostileEnv) hostileWant {
			// Within the skew the agent may still wait: a signed answer.
			now := time.Now()
			return h.request(t, spec{op: "ok", created: now.Add(-2 * time.Hour), expires: now.Add(-time.Minute)}, bridge.StatusExpired, "expired")
		}},
		{"time/expired-long-ago", func(t *testing.T, h *hostileEnv) hostileWant {
			// Beyond the skew (the ledger may have forgotten the id): refused
			// without an entry or a result, so it can never be answered twice.
			now := time.Now()
			return h.refused(t, spec{op: "ok", created: now.Add(-2 * time.Hour), expires: now.Add(-time.Hour)}, "expired")
		}},
		{"time/created-beyond-skew", func(t *testing.T, h *hostileEnv) hostileWant {
			now := time.Now()
			return h.rejected(t, spec{op: "ok", created: now.Add(time.Hour), expires: now.Add(2 * time.Hour)}, "not-yet-valid")
		}},
		{"time/created-beyond-a-validity", func(t *testing.T, h *hostileEnv) hostileWant {
			// Refused without an entry: one would have to be kept until long
			// after any retention.
			created := time.Now().Add(bridge.MaxValidity + 2*time.Hour)
			return h.refused(t, spec{op: "ok", created: created, expires: created.Add(time.Hour)}, "not-yet-valid")
		}},
		{"time/validity-over-7-days", func(t *testing.T, h *hostileEnv) hostileWant {
			now := time.Now()
			return h.rejected(t, spec{op: "ok", created: now, expires: now.Add(bridge.MaxValidity + time.Hour)}, "malformed")
		}},
		{"time/expires-beyond-year-9999", func(t *testing.T, h *hostileEnv) hostileWant {
			// Rejected and recorded (the id stays taken) with an expiry the
			// ledger can write; the battery reopens the ledger at its end.
			now := time.Now()
			return h.rejected(t, spec{op: "ok", created: now, expires: time.Unix(1<<40, 0)}, "malformed")
		}},
		{"time/expires-equals-created", func(t *testing.T, h *hostileEnv) hostileWant {
			now := time.Now()
			return h.refused(t, spec{op: "ok", created: now, expires: now}, "malformed")
		}},

		// Addressing.
		{"addr/another-host", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", to: h.otherB}, "wrong-recipient")
		}},
		{"addr/host-box-key-not-held", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", req: func(r *bridge.Request) { r.HostBoxKid = h.otherB.BoxKid() }}, "wrong-recipient")
		}},
		{"addr/payload-sealed-to-another-key", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "ok", sealTo: h.otherB.BoxPub}, "unauthenticated")
		}},
		{"addr/reply-key-not-the-agents", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", req: func(r *bridge.Request) { r.ReplyBoxKid = h.evil.BoxKid() }}, "unknown-key")
		}},
		{"addr/reply-key-of-another-trusted-agent", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", req: func(r *bridge.Request) { r.ReplyBoxKid = h.agent2.Identity().BoxKid() }}, "unknown-key")
		}},
		{"addr/manifest-in-another-agents-directory", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, pl := h.seal(t, spec{op: "ok"})
			putIn(t, h.dir2(), id+".payload", pl)
			putIn(t, h.dir2(), id+".manifest", m)
			return hostileWant{kind: wantAudit, id: id, marker: h.agent2.Config.ID + "/" + id + ".manifest", reason: "bad-signature"}
		}},
		{"addr/agent-field-not-its-directory", func(t *testing.T, h *hostileEnv) hostileWant {
			// agent 2 signs a request that names agent 1, in its own directory.
			id, m, pl := h.seal(t, spec{op: "ok", signer: h.agent2.Identity(), noRecall: true})
			putIn(t, h.dir2(), id+".payload", pl)
			putIn(t, h.dir2(), id+".manifest", m)
			return hostileWant{kind: wantAudit, id: id, marker: h.agent2.Config.ID + "/" + id + ".manifest", reason: "name-mismatch"}
		}},
		{"addr/file-stem-not-signed-id", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, pl := h.seal(t, spec{op: "ok"})
			stem := bridge.NewRequestID()
			h.deliver(t, stem, m, pl)
			return hostileWant{kind: wantAudit, id: id, others: []string{stem}, marker: stem, reason: "name-mismatch"}
		}},
		{"addr/untrusted-agent-directory", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, pl := h.seal(t, spec{op: "ok"})
			dir := filepath.Join(filepath.Dir(h.dir()), h.evil.SignKid())
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			putIn(t, dir, id+".payload", pl)
			putIn(t, dir, id+".manifest", m)
			return hostileWant{kind: wantSilent, id: id, note: "directories of untrusted agents are not watched"}
		}},

		// Declared sizes.
		{"size/declared-body-length-4GiB", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", raw: func(m []byte) []byte {
				binary.BigEndian.PutUint32(m[4:8], 0xffffffff)
				return m
			}}, "too-large")
		}},
		{"size/manifest-file-1GiB-sparse", func(t *testing.T, h *hostileEnv) hostileWant {
			id := bridge.NewRequestID()
			f, err := os.Create(filepath.Join(h.dir(), id+".manifest"))
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("BRQ1"))
			f.Truncate(1 << 30)
			f.Close()
			return hostileWant{kind: wantAudit, marker: id, reason: "too-large"}
		}},
		{"size/payload-len-over-cap", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", req: func(r *bridge.Request) { r.Payload.Len = bcrypto.SealedSize(5 << 30) }}, "too-large")
		}},
		{"size/payload-len-not-a-sealed-length", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", req: func(r *bridge.Request) { r.Payload.Len = bcrypto.ChunkSize + 16 + 5 }}, "malformed")
		}},
		{"size/payload-len-negative", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", req: func(r *bridge.Request) { r.Payload.Len = -1 }}, "malformed")
		}},
		{"size/payload-file-2GiB-sparse", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, _ := h.seal(t, spec{op: "ok"})
			f, err := os.Create(filepath.Join(h.dir(), id+".payload"))
			if err != nil {
				t.Fatal(err)
			}
			f.Truncate(2 << 30)
			f.Close()
			h.put(t, id+".manifest", m)
			return hostileWant{kind: wantAudit, id: id, marker: id + ".payload", reason: "hash-mismatch"}
		}},

		// Envelope.
		{"envelope/unknown-version-magic", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", raw: func(m []byte) []byte { m[3] = '2'; return m }}, "unknown-version")
		}},
		{"envelope/garbage", func(t *testing.T, h *hostileEnv) hostileWant {
			id := bridge.NewRequestID()
			h.put(t, id+".manifest", []byte("#!/bin/sh\nrm -rf ~\n"))
			return hostileWant{kind: wantAudit, marker: id, reason: "malformed"}
		}},
		{"envelope/empty-file", func(t *testing.T, h *hostileEnv) hostileWant {
			id := bridge.NewRequestID()
			h.put(t, id+".manifest", nil)
			return hostileWant{kind: wantAudit, marker: id, reason: "truncated"}
		}},
		{"envelope/cut-short", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", raw: func(m []byte) []byte { return m[:len(m)-20] }}, "truncated")
		}},
		{"envelope/trailing-bytes", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", raw: func(m []byte) []byte { return append(m, '\n') }}, "malformed")
		}},
		{"envelope/body-not-canonical-signed", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", body: func(b []byte) []byte { return bytes.Replace(b, []byte(`,"id"`), []byte(`, "id"`), 1) }}, "malformed")
		}},
		{"envelope/body-unknown-member-signed", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", body: func(b []byte) []byte {
				return append(b[:len(b)-1], []byte(`,"op":"ok"}`)...)
			}}, "malformed")
		}},
		{"envelope/body-v2-signed", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.refused(t, spec{op: "ok", req: func(r *bridge.Request) { r.V = 2 }}, "unknown-version")
		}},
		{"envelope/signed-id-not-lower-hex", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, pl := h.seal(t, spec{op: "ok", req: func(r *bridge.Request) { r.ID = strings.ToUpper(r.ID) }})
			h.deliver(t, id, m, pl)
			return hostileWant{kind: wantAudit, id: id, marker: id, reason: "malformed"}
		}},

		// File types where a regular file belongs.
		{"type/manifest-symlink", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, pl := h.seal(t, spec{op: "ok"})
			outside := filepath.Join(t.TempDir(), "m")
			putIn(t, filepath.Dir(outside), "m", m)
			h.put(t, id+".payload", pl)
			if err := os.Symlink(outside, filepath.Join(h.dir(), id+".manifest")); err != nil {
				t.Fatal(err)
			}
			return hostileWant{kind: wantAudit, id: id, marker: id + ".manifest", reason: "not-regular"}
		}},
		{"type/manifest-fifo", func(t *testing.T, h *hostileEnv) hostileWant {
			id := bridge.NewRequestID()
			if err := syscall.Mkfifo(filepath.Join(h.dir(), id+".manifest"), 0o644); err != nil {
				t.Fatal(err)
			}
			return hostileWant{kind: wantAudit, marker: id + ".manifest", reason: "not-regular"}
		}},
		{"type/manifest-directory", func(t *testing.T, h *hostileEnv) hostileWant {
			id := bridge.NewRequestID()
			if err := os.Mkdir(filepath.Join(h.dir(), id+".manifest"), 0o755); err != nil {
				t.Fatal(err)
			}
			return hostileWant{kind: wantAudit, marker: id + ".manifest", reason: "not-regular"}
		}},
		{"type/manifest-socket", func(t *testing.T, h *hostileEnv) hostileWant {
			id := bridge.NewRequestID()
			if err := syscall.Mknod(filepath.Join(h.dir(), id+".manifest"), syscall.S_IFSOCK|0o644, 0); err != nil {
				t.Fatal(err)
			}
			return hostileWant{kind: wantAudit, marker: id + ".manifest", reason: "not-regular"}
		}},
		{"type/payload-symlink", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, pl := h.seal(t, spec{op: "ok"})
			outside := filepath.Join(t.TempDir(), "p")
			putIn(t, filepath.Dir(outside), "p", pl)
			if err := os.Symlink(outside, filepath.Join(h.dir(), id+".payload")); err != nil {
				t.Fatal(err)
			}
			h.put(t, id+".manifest", m)
			return hostileWant{kind: wantAudit, id: id, marker: id + ".payload", reason: "not-regular"}
		}},
		{"type/payload-fifo", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, _ := h.seal(t, spec{op: "ok"})
			if err := syscall.Mkfifo(filepath.Join(h.dir(), id+".payload"), 0o644); err != nil {
				t.Fatal(err)
			}
			h.put(t, id+".manifest", m)
			return hostileWant{kind: wantAudit, id: id, marker: id + ".payload", reason: "not-regular"}
		}},
		{"type/payload-directory", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, _ := h.seal(t, spec{op: "ok"})
			if err := os.Mkdir(filepath.Join(h.dir(), id+".payload"), 0o755); err != nil {
				t.Fatal(err)
			}
			h.put(t, id+".manifest", m)
			return hostileWant{kind: wantAudit, id: id, marker: id + ".payload", reason: "not-regular"}
		}},
		{"type/payload-socket", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, _ := h.seal(t, spec{op: "ok"})
			if err := syscall.Mknod(filepath.Join(h.dir(), id+".payload"), syscall.S_IFSOCK|0o644, 0); err != nil {
				t.Fatal(err)
			}
			h.put(t, id+".manifest", m)
			return hostileWant{kind: wantAudit, id: id, marker: id + ".payload", reason: "not-regular"}
		}},

		// Payload bytes.
		{"payload/absent", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, _ := h.seal(t, spec{op: "ok"})
			h.put(t, id+".manifest", m)
			return hostileWant{kind: wantAudit, id: id, marker: id + ".payload", reason: "pending"}
		}},
		{"payload/half-arrived", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, pl := h.seal(t, spec{op: "ok"})
			h.deliver(t, id, m, pl[:len(pl)/2])
			return hostileWant{kind: wantAudit, id: id, marker: id + ".payload", reason: "pending"}
		}},
		{"payload/another-requests-payload", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, _ := h.seal(t, spec{op: "ok"})
			id2, _, pl2 := h.seal(t, spec{op: "ok"})
			h.deliver(t, id, m, pl2)
			return hostileWant{kind: wantAudit, id: id, others: []string{id2}, marker: id + ".payload", reason: "hash-mismatch"}
		}},
		{"payload/one-byte-appended", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, pl := h.seal(t, spec{op: "ok"})
			h.deliver(t, id, m, append(pl, 0))
			return hostileWant{kind: wantAudit, id: id, marker: id + ".payload", reason: "hash-mismatch"}
		}},
		{"payload/bit-flip-not-repinned", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, pl := h.seal(t, spec{op: "ok"})
			h.deliver(t, id, m, flip(10)(pl))
			return hostileWant{kind: wantAudit, id: id, marker: id + ".payload", reason: "hash-mismatch"}
		}},
		{"payload/bit-flip-in-chunk-repinned", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "ok", mutate: flip(10), repin: true}, "unauthenticated")
		}},
		{"payload/bit-flip-in-tag-repinned", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "ok", mutate: flip(-1), repin: true}, "unauthenticated")
		}},
		{"payload/bit-flip-in-wrapped-key", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "ok", req: func(r *bridge.Request) { r.Payload.Key = flip(40)(bytes.Clone(r.Payload.Key)) }}, "unauthenticated")
		}},
		{"payload/cut-at-chunk-boundary-repinned", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "ok", stdin: bytes.Repeat([]byte("s"), 100_000), repin: true,
				mutate: func(b []byte) []byte { return b[:bcrypto.ChunkSize+16] }}, "truncated")
		}},
		{"payload/chunks-reordered-repinned", func(t *testing.T, h *hostileEnv) hostileWant {
			const c = bcrypto.ChunkSize + 16
			return h.rejected(t, spec{op: "ok", stdin: bytes.Repeat([]byte("r"), 150_000), repin: true,
				mutate: func(b []byte) []byte {
					out := append(append(append([]byte{}, b[c:2*c]...), b[:c]...), b[2*c:]...)
					return out
				}}, "unauthenticated")
		}},

		// The sealed call header.
		{"call/header-length-2GiB", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{plain: append(binary.BigEndian.AppendUint32(nil, 0x7fffffff), "{}"...)}, "too-large")
		}},
		{"call/header-shorter-than-declared", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{plain: append(binary.BigEndian.AppendUint32(nil, 100), `{"v":1}`...)}, "malformed")
		}},
		{"call/empty-plaintext", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{plain: []byte{}}, "malformed")
		}},
		{"call/unknown-field", func(t *testing.T, h *hostileEnv) hostileWant {
			type callPlus struct {
				V    int               `json:"v"`
				Op   string            `json:"op"`
				Args map[string]string `json:"args"`
				Env  map[string]string `json:"env"`
			}
			return h.rejected(t, spec{op: "ok", header: callPlus{1, "ok", map[string]string{}, map[string]string{"LD_PRELOAD": "/tmp/x.so"}}}, "malformed")
		}},
		{"call/v2", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "ok", header: bridge.Call{V: 2, Op: "ok", Args: map[string]string{}}}, "unknown-version")
		}},
		{"call/args-null", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "ok", header: bridge.Call{V: 1, Op: "ok"}}, "malformed")
		}},
		{"call/op-name-path", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "../ok", header: bridge.Call{V: 1, Op: "../ok", Args: map[string]string{}}}, "malformed")
		}},
		{"call/op-name-uppercase", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "OK", header: bridge.Call{V: 1, Op: "OK", Args: map[string]string{}}}, "malformed")
		}},
		{"call/arg-named-like-env-var", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "ok", header: bridge.Call{V: 1, Op: "ok", Args: map[string]string{"PATH": "/tmp/evil"}}}, "malformed")
		}},
		{"call/value-not-utf8", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "lit", header: json.RawMessage("{\"v\":1,\"op\":\"lit\",\"args\":{\"v\":\"a\xffb\"}}")}, "malformed")
		}},

		// The policy.
		{"policy/unknown-op", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "rm"}, "not-allowed")
		}},
		{"policy/op-of-another-agent", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.rejected(t, spec{op: "theirs"}, "not-allowed")
		}},
		{"policy/unknown-argument", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "ok", map[string]string{"x": "1"})
		}},
		{"policy/missing-required-argument", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "str", nil)
		}},
		{"policy/argument-named-ld_preload", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "lit", map[string]string{"v": "a", "ld_preload": "/tmp/x.so"})
		}},
		{"policy/needs-approval", func(t *testing.T, h *hostileEnv) hostileWant {
			// It waits for a human (nothing runs until `bridge approve`).
			id, m, pl := h.seal(t, spec{op: "gate"})
			h.deliver(t, id, m, pl)
			return hostileWant{kind: wantAudit, id: id, marker: id, events: []string{"awaiting-approval"}}
		}},

		// Argument values.
		{"arg/string-leading-dash", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "lit", map[string]string{"v": "--upload-pack=x"})
		}},
		{"arg/string-substitution-outside-pattern", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "str", map[string]string{"s": "$(id)"})
		}},
		{"arg/string-substitution-literal", func(t *testing.T, h *hostileEnv) hostileWant {
			w := h.request(t, spec{op: "lit", args: map[string]string{"v": "$(id)`id`;x"}}, bridge.StatusDone, "")
			w.runs = 1
			w.check = func(o *agent.Outcome) error {
				if string(o.Stdout) != "$(id)`id`;x" {
					return fmt.Errorf("the value came out as %q", o.Stdout)
				}
				return nil
			}
			return w
		}},
		{"arg/string-newline", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "lit", map[string]string{"v": "a\nb"})
		}},
		{"arg/string-nul", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "lit", map[string]string{"v": "a\x00b"})
		}},
		{"arg/string-bidi-override", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "lit", map[string]string{"v": "a\u202eb"})
		}},
		{"arg/string-over-max-len", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "lit", map[string]string{"v": strings.Repeat("a", 17)})
		}},
		{"arg/int-leading-zeros", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "num", map[string]string{"n": "007"})
		}},
		{"arg/int-plus-sign", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "num", map[string]string{"n": "+1"})
		}},
		{"arg/int-exponent", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "num", map[string]string{"n": "1e3"})
		}},
		{"arg/int-leading-space", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "num", map[string]string{"n": " 1"})
		}},
		{"arg/int-overflow", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "num", map[string]string{"n": "9223372036854775808"})
		}},
		{"arg/int-negative-below-min", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "num", map[string]string{"n": "-1"})
		}},
		{"arg/bool-uppercase", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "flag", map[string]string{"b": "TRUE"})
		}},
		{"arg/bool-digit", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "flag", map[string]string{"b": "1"})
		}},
		{"arg/enum-case-variant", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "color", map[string]string{"c": "Red"})
		}},
		{"arg/enum-not-a-member", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "color", map[string]string{"c": "purple"})
		}},
		{"arg/path-dotdot", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "file", map[string]string{"p": "../.."})
		}},
		{"arg/path-absolute-outside-root", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "file", map[string]string{"p": "/etc/passwd"})
		}},
		{"arg/path-symlink-inside-root-pointing-out", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.badArg(t, "file", map[string]string{"p": "escape/passwd"})
		}},
		{"env/value-with-assignment", func(t *testing.T, h *hostileEnv) hostileWant {
			w := h.request(t, spec{op: "envy", args: map[string]string{"v": "FOO=bar"}}, bridge.StatusDone, "")
			w.runs = 1
			w.check = func(o *agent.Outcome) error {
				lines := strings.Split(strings.TrimSpace(string(o.Stdout)), "\n")
				if lines[0] != "FOO=bar" {
					return fmt.Errorf("the value came out as %q", lines[0])
				}
				// The policy passes PATH and COUNT_FILE; sh itself exports
				// PWD (and some shells SHLVL, OLDPWD, _). Nothing else.
				allowed := map[string]bool{"PATH": true, "COUNT_FILE": true, "PWD": true, "OLDPWD": true, "SHLVL": true, "_": true,
					"BRIDGE_REQUEST_ID": true, "BRIDGE_IDEMPOTENCY_KEY": true}
				var names []string
				for _, l := range lines[1:] {
					k, _, _ := strings.Cut(l, "=")
					names = append(names, k)
					if !allowed[k] {
						return fmt.Errorf("the op saw the variables %v", names)
					}
				}
				if !strings.Contains(strings.Join(names, ","), "COUNT_FILE") {
					return fmt.Errorf("the op did not see COUNT_FILE: %v", names)
				}
				return nil
			}
			return w
		}},

		// Execution under the policy's limits.
		{"exec/output-over-max_output", func(t *testing.T, h *hostileEnv) hostileWant {
			w := h.request(t, spec{op: "big"}, bridge.StatusDone, "")
			w.runs = 1
			w.check = func(o *agent.Outcome) error {
				rc := o.Receipt
				if !rc.StdoutTruncated || rc.StdoutTotal != 10000 || len(o.Stdout) > 1024+64 || !bytes.Contains(o.Stdout, []byte("bytes omitted")) || rc.ExitCode != 0 {
					return fmt.Errorf("truncated %v, total %d, kept %d bytes, exit %d", rc.StdoutTruncated, rc.StdoutTotal, len(o.Stdout), rc.ExitCode)
				}
				return nil
			}
			return w
		}},
		{"exec/timeout", func(t *testing.T, h *hostileEnv) hostileWant {
			w := h.request(t, spec{op: "nap"}, bridge.StatusDone, "timeout")
			w.runs = 1
			w.check = func(o *agent.Outcome) error {
				if !o.Receipt.TimedOut || o.Receipt.Signal == "" {
					return fmt.Errorf("timed_out %v, signal %q", o.Receipt.TimedOut, o.Receipt.Signal)
				}
				return nil
			}
			return w
		}},
		{"exec/fork-bomb-under-rlimits", func(t *testing.T, h *hostileEnv) hostileWant {
			return hostileWant{kind: wantSkip, note: "the policy has no rlimit keys (bridge/policy/doc.go): runner.Limits cannot be set from the policy"}
		}},

		// Names outside the protocol's patterns (SPEC §5): ignored, noted.
		{"name/double-dot", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return id + "..manifest" })
		}},
		{"name/in-a-subdirectory", func(t *testing.T, h *hostileEnv) hostileWant {
			id, m, pl := h.seal(t, spec{op: "ok"})
			sub := filepath.Join(h.dir(), "sub")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			putIn(t, sub, id+".payload", pl)
			putIn(t, sub, id+".manifest", m)
			return hostileWant{kind: wantSilent, id: id, note: "only one level is watched"}
		}},
		{"name/backslash", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return `sub\` + id + ".manifest" })
		}},
		{"name/uppercase-hex", func(t *testing.T, h *hostileEnv) hostileWant {
			w := h.nameTrick(t, func(id string) string { return strings.ToUpper(id) + ".manifest" })
			w.marker = strings.ToUpper(w.id)
			return w
		}},
		{"name/31-hex-digits", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return id[:31] + ".manifest" })
		}},
		{"name/33-hex-digits", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return id + "0.manifest" })
		}},
		{"name/leading-dot", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return "." + id + ".manifest" })
		}},
		{"name/trailing-space", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return id + ".manifest " })
		}},
		{"name/publish-temp", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return "~$" + id + ".manifest.tmp" })
		}},
		{"name/uppercase-extension", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return id + ".MANIFEST" })
		}},
		{"name/conflict-copy", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return id + ".sync-conflict-20260101-120000-ABCDEFG.manifest" })
		}},
		{"name/cyrillic-letter-in-id", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return "\u0430" + id[1:] + ".manifest" })
		}},
		{"name/cyrillic-letter-in-extension", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return id + ".manif\u0435st" })
		}},
		{"name/fullwidth-dot", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return id + "\uff0emanifest" })
		}},
		{"name/not-utf8", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return id + "\xff.manifest" })
		}},
		{"name/255-bytes", func(t *testing.T, h *hostileEnv) hostileWant {
			return h.nameTrick(t, func(id string) string { return strings.Repeat("0", 255-len(id)-len(".manifest")) + id + ".manifest" })
		}},
		{"name/nul", func(t *testing.T, h *hostileEnv) hostileWant {
			return hostileWant{kind: wantSkip, note: "a NUL cannot be in a file name on unix"}
		}},
	}
}

// TestHostileBattery plants every case of hostileCases while one daemon
// serves, in batches; after each batch a valid request must complete.
func TestHostileBattery(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "inside.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	p := newPair(t, strings.Replace(hostilePolicy, `"ROOT"`, fmt.Sprintf("%q", root), 1))
	h := &hostileEnv{p: p, countFile: filepath.Join(t.TempDir(), "count"), log: &testkit.LockedBuffer{}}
	var err error
	if h.agent2, err = trust.InitHome(filepath.Join(filepath.Dir(p.agentHome), "agent2"), "agent", "cloud-2", p.folder); err != nil {
		t.Fatal(err)
	}
	if _, err := p.host.Trust(h.agent2.BundleText(), "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.agent2.Trust(p.host.BundleText(), "laptop"); err != nil {
		t.Fatal(err)
	}
	if _, h.hostBundle, err = p.agent.Peer(p.host.Config.ID); err != nil {
		t.Fatal(err)
	}
	if h.evil, err = bcrypto.GenerateIdentity(nil); err != nil {
		t.Fatal(err)
	}
	if h.other, err = bcrypto.GenerateIdentity(nil); err != nil {
		t.Fatal(err)
	}
	ob, err := h.other.SignBundle(bcrypto.Bundle{Role: "host", Name: "other", ID: h.other.SignKid()})
	if err != nil {
		t.Fatal(err)
	}
	if h.otherB, err = bcrypto.ParseBundle(ob); err != nil {
		t.Fatal(err)
	}
	h.startDaemon(t)

	cases := hostileCases()
	if len(cases) < 60 {
		t.Fatalf("only %d cases", len(cases))
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.name] {
			t.Fatalf("case %q twice", c.name)
		}
		seen[c.name] = true
	}
	type row struct {
		name, kind, got string
		ok              bool
	}
	rows := make([]row, len(cases))
	wants := make([]hostileWant, len(cases))
	var probes []string
	const batch = 16
	for start := 0; start < len(cases); start += batch {
		end := min(start+batch, len(cases))
		for i := start; i < end; i++ {
			wants[i] = cases[i].plant(t, h)
			rows[i] = row{name: cases[i].name, kind: wantKindNames[wants[i].kind]}
		}
		// Poll every case of the batch until each has its outcome or the
		// batch's time is up.
		done := make([]bool, len(cases))
		began := time.Now()
		deadline := began.Add(10 * time.Second)
		for {
			audit := h.auditEvents(t)
			logText := h.log.String()
			pending := 0
			for i := start; i < end; i++ {
				if done[i] {
					continue
				}
				got, ok, final := h.judge(t, wants[i], audit, logText)
				rows[i].got, rows[i].ok = got, ok
				if final {
					done[i] = true
				} else {
					pending++
				}
			}
			if pending == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for i := start; i < end; i++ {
			if !rows[i].ok {
				t.Errorf("%s: want %s, got %s", cases[i].name, describe(wants[i]), rows[i].got)
			}
		}
		// The daemon is alive and still serves.
		select {
		case <-h.stopped:
			t.Fatalf("the daemon stopped after cases %d..%d", start, end-1)
		default:
		}
		out := p.run(t, agent.SubmitOptions{Op: "ok"})
		if out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != "ok\n" {
			t.Fatalf("valid request after cases %d..%d: %s %s %q", start, end-1, out.Receipt.Status, out.Receipt.Reason, out.Stdout)
		}
		probes = append(probes, out.Receipt.ID)
		t.Logf("cases %d..%d judged and a valid request served in %s", start, end-1, time.Since(began).Round(time.Millisecond))
	}

	// Nothing ran but what the cases declare and the probes.
	settleRescans(t, p.daemon)
	runs := map[string]int{}
	for _, id := range testkit.Lines(t, h.countFile) {
		runs[id]++
	}
	for _, id := range probes {
		if runs[id] != 1 {
			t.Errorf("probe %s ran %d times", id, runs[id])
		}
		delete(runs, id)
	}
	for i, w := range wants {
		if w.id != "" {
			if runs[w.id] != w.runs {
				t.Errorf("%s: ran %d times, want %d", cases[i].name, runs[w.id], w.runs)
				rows[i].ok = false
				rows[i].got += fmt.Sprintf("; ran %d times", runs[w.id])
			}
			delete(runs, w.id)
		}
		for _, o := range w.others {
			if runs[o] != 0 {
				t.Errorf("%s: %s ran %d times", cases[i].name, o, runs[o])
				rows[i].ok = false
			}
			delete(runs, o)
		}
	}
	for id, n := range runs {
		t.Errorf("an execution no case accounts for: %s ran %d times", id, n)
	}
	// Whatever the cases recorded, the ledger opens again: no hostile input
	// may leave a record that makes the next start refuse it as damaged.
	p.stop(t)
	if l, err := ledger.Open(p.host.Path("ledger")); err != nil {
		t.Errorf("the ledger after the hostile cases: %v", err)
	} else {
		l.Close()
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "%-48s %-9s %-4s %s\n", "case", "outcome", "ok", "recorded")
	for _, r := range rows {
		mark := "ok"
		if !r.ok {
			mark = "FAIL"
		}
		fmt.Fprintf(&sb, "%-48s %-9s %-4s %s\n", r.name, r.kind, mark, r.got)
	}
	t.Logf("%d hostile cases, %d probes:\n%s", len(cases), len(probes), sb.String())
}

func describe(w hostileWant) string {
	switch w.kind {
	case wantAudit:
		events := w.events
		if len(events) == 0 {
			events = []string{"refused", "waiting"}
		}
		return fmt.Sprintf("audit %s naming %s with reason %q", strings.Join(events, "|"), w.marker, w.reason)
	case wantResult:
		return fmt.Sprintf("result %s/%s", w.status, w.reason)
	case wantIgnored:
		return "an ignoring note naming " + w.marker
	case wantErr:
		return "an error with reason " + w.reason
	}
	return wantKindNames[w.kind]
}

// judge reports what a case shows so far, whether that is what it wants,
// and whether the outcome is final.
func (h *hostileEnv) judge(t *testing.T, w hostileWant, audit []AuditEvent, logText string) (got string, ok, final bool) {
	t.Helper()
	switch w.kind {
	case wantAudit:
		events := w.events
		if len(events) == 0 {
			events = []string{"refused", "waiting"}
		}
		var seen []string
		for _, e := range audit {
			if !strings.Contains(e.File, w.marker) && e.ID != w.marker {
				continue
			}
			for _, ev := range events {
				if e.Event == ev {
					if e.Reason == w.reason {
						return e.Event + " " + e.Reason, true, true
					}
					seen = append(seen, e.Event+" "+e.Reason)
				}
			}
		}
		if len(seen) == 0 {
			return "no audit line", false, false
		}
		return strings.Join(seen, ", "), false, false
	case wantResult:
		out, err := h.p.client.Result(w.id)
		if errors.Is(err, agent.ErrNoResult) {
			return "no result", false, false
		} else if err != nil {
			return "result refused: " + err.Error(), false, true
		}
		got = out.Receipt.Status + "/" + string(out.Receipt.Reason)
		if out.Receipt.Status != w.status || string(out.Receipt.Reason) != w.reason {
			return got, false, true
		}
		if w.check != nil {
			if err := w.check(out); err != nil {
				return got + ": " + err.Error(), false, true
			}
		}
		return got, true, true
	case wantIgnored:
		for _, l := range strings.Split(logText, "\n") {
			if strings.Contains(l, "ignoring a file that is not ours") && strings.Contains(l, w.marker) {
				kind := ""
				if i := strings.Index(l, "kind="); i >= 0 {
					kind = strings.Fields(l[i:])[0]
				}
				return "ignored " + kind, true, true
			}
		}
		return "no note in the daemon log", false, false
	case wantErr:
		if w.err == nil {
			return "accepted", false, true
		}
		return string(bridge.Reason(w.err)), string(bridge.Reason(w.err)) == w.reason, true
	default:
		return w.note, true, true
	}
}

func (h *hostileEnv) auditEvents(t *testing.T) []AuditEvent {
	t.Helper()
	data, err := os.ReadFile(h.p.host.Path("audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []AuditEvent
	for _, l := range bytes.Split(data, []byte("\n")) {
		var e AuditEvent
		if json.Unmarshal(l, &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// startDaemon is pair.start with the daemon's log captured (names outside
// the patterns are noted there) and a signal when Run returns.
func (h *hostileEnv) startDaemon(t *testing.T) {
	t.Helper()
	p := h.p
	env := map[string]string{"COUNT_FILE": h.countFile}
	d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true, Rescan: 500 * time.Millisecond, Grace: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(h.log, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Env: func(k string) (string, bool) {
			if v, ok := env[k]; ok {
				return v, true
			}
			return os.LookupEnv(k)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.daemon, p.cancel, p.done = d, cancel, make(chan error, 1)
	h.stopped = make(chan struct{})
	go func() {
		err := d.Run(ctx)
		close(h.stopped)
		p.done <- err
	}()
	t.Cleanup(func() { p.stop(t) })
}
