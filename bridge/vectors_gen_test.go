package bridge

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge/policy"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// generateVectors rewrites fixtures/vectors from the test keys. Everything is
// derived from fixed seeds, so regenerating yields the same bytes.
func generateVectors(t *testing.T, k testKeys) {
	host := bundleOf(t, k.host, "host", "laptop")
	agent := bundleOf(t, k.agent, "agent", "cloud-1")
	stranger := bundleOf(t, k.stranger, "agent", "stranger")
	otherHost := bundleOf(t, k.otherHost, "host", "other")
	old, _ := filepath.Glob(filepath.Join(vectorDir, "*.txtar"))
	for _, p := range old {
		os.Remove(p)
	}
	seq := 0
	write := func(v *vector) {
		seq++
		if v.fields == nil {
			v.fields = map[string]string{}
		}
		if err := os.WriteFile(filepath.Join(vectorDir, v.name+".txtar"), v.archive(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sign := func(kind bcrypto.Kind, body []byte, ids ...*bcrypto.Identity) []byte {
		out, err := bcrypto.Sign(kind, body, ids...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	encode := func(v any) []byte {
		b, err := bcrypto.EncodeBody(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	created := vectorNow.Add(-time.Minute)
	// mkReq seals a request; tweak may change the inputs before sealing.
	mkReq := func(name string, tweak func(*NewRequest)) ([]byte, []byte, *Request) {
		n := NewRequest{
			ID: KeyedID(k.agentIdempotency, agent.ID, host.ID, "echo", nil, name), Agent: k.agent, AgentID: agent.ID, Host: host,
			Call:    Call{Op: "echo", Args: map[string]string{"msg": "hi"}},
			Created: created, Expires: created.Add(time.Hour), Rand: detRand("vector:" + name),
		}
		if tweak != nil {
			tweak(&n)
		}
		var payload bytes.Buffer
		m, r, err := SealRequest(&payload, n)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return m, payload.Bytes(), r
	}
	reqVector := func(name, expect, note string, m, p []byte, r *Request, extra map[string]string) {
		f := map[string]string{"name": r.ID + ".manifest", "agent-dir": agent.ID, "op": "echo", "stdin-len": "0"}
		for k, v := range extra {
			f[k] = v
		}
		write(&vector{name: "request-" + name, expect: expect, kind: "request", note: note, fields: f,
			files: map[string][]byte{"manifest.b64": m, "payload.b64": p}})
	}
	// resign re-signs a request body after a change to the decoded fields.
	resign := func(r *Request, by *bcrypto.Identity, change func(*Request)) []byte {
		c := *r
		change(&c)
		return sign(bcrypto.KindRequest, encode(&c), by)
	}
	flip := func(b []byte, i int) []byte {
		c := bytes.Clone(b)
		if i < 0 {
			i += len(c)
		}
		c[i] ^= 0x01
		return c
	}

	// Accepted requests.
	m, p, r := mkReq("ok", nil)
	reqVector("ok", "ok", "a plain request: echo msg=hi", m, p, r, nil)
	m, p, r = mkReq("ok-no-args", func(n *NewRequest) { n.Call = Call{Op: "status"} })
	reqVector("ok-no-args", "ok", "an op without arguments", m, p, r, map[string]string{"op": "status"})
	stdin := bytes.Repeat([]byte("0123456789abcdef"), 70000/16)
	m, p, r = mkReq("ok-stdin", func(n *NewRequest) { n.Stdin = bytes.NewReader(stdin) })
	reqVector("ok-stdin-two-chunks", "ok", "standard input that spans two 64 KiB chunks", m, p, r, map[string]string{"stdin-len": strconv.Itoa(len(stdin))})

	// Signature and key failures.
	m, p, r = mkReq("sig", nil)
	reqVector("bad-signature-flipped", "bad-signature", "last signature byte flipped", flip(m, -1), p, r, nil)
	reqVector("bad-signature-body", "bad-signature", "a body byte changed after signing", bytes.Replace(m, []byte(`"v":1`), []byte(`"v":2`), 1), p, r, nil)
	reqVector("signed-by-stranger", "bad-signature", "valid signature, but by a key the agent directory does not hold", resign(r, k.stranger, func(*Request) {}), p, r, nil)
	m, p, r = mkReq("stranger", func(n *NewRequest) { n.Agent = k.stranger; n.AgentID = stranger.ID })
	reqVector("untrusted-agent", "unknown-key", "from an agent directory nobody trusted", m, p, r, map[string]string{"agent-dir": stranger.ID})
	_, p, r = mkReq("reply", nil)
	reqVector("reply-key-not-agents", "unknown-key", "asks for the result to be sealed to someone else's key",
		resign(r, k.agent, func(c *Request) { c.ReplyBoxKid = stranger.BoxKid() }), p, r, nil)

	// Addressing and names.
	m, p, r = mkReq("other-host", func(n *NewRequest) { n.Host = otherHost })
	reqVector("wrong-host", "wrong-recipient", "addressed to another host", m, p, r, nil)
	_, p, r = mkReq("other-box", nil)
	reqVector("wrong-host-box-key", "wrong-recipient", "names a box key this host does not hold",
		resign(r, k.agent, func(c *Request) { c.HostBoxKid = otherHost.BoxKid() }), p, r, nil)
	m, p, r = mkReq("stem", nil)
	reqVector("name-mismatch", "name-mismatch", "the file name is not the signed id (a renamed or conflict-copied manifest)",
		m, p, r, map[string]string{"name": strings.Repeat("0", 32) + ".manifest"})
	reqVector("wrong-agent-dir", "unknown-key", "a valid manifest copied into another agent's directory",
		m, p, r, map[string]string{"agent-dir": stranger.ID})

	// Structure.
	m, p, r = mkReq("structure", nil)
	reqVector("truncated-manifest", "truncated", "manifest cut short: still arriving", m[:len(m)-10], p, r, nil)
	reqVector("header-only", "truncated", "only the first bytes arrived", m[:6], p, r, nil)
	reqVector("trailing-bytes", "malformed", "a byte after the signature", append(bytes.Clone(m), '\n'), p, r, nil)
	reqVector("bad-magic", "malformed", "not a request manifest", append([]byte("BRX1"), m[4:]...), p, r, nil)
	reqVector("result-magic", "malformed", "a result manifest where a request belongs", append([]byte("BRR1"), m[4:]...), p, r, nil)
	reqVector("unknown-version-magic", "unknown-version", "envelope version 2", append([]byte("BRQ2"), m[4:]...), p, r, nil)
	big := bytes.Clone(m)
	binary.BigEndian.PutUint32(big[4:8], 1<<20)
	reqVector("oversize-declared", "too-large", "declares a 1 MiB body", big, p, r, nil)
	body := encode(r)
	reqVector("unknown-field", "malformed", "an extra field, correctly signed",
		sign(bcrypto.KindRequest, append(body[:len(body)-1], []byte(`,"op":"rm"}`)...), k.agent), p, r, nil)
	reqVector("non-canonical-space", "malformed", "white space in the body, correctly signed",
		sign(bcrypto.KindRequest, bytes.Replace(body, []byte(`"v":1,`), []byte(`"v": 1,`), 1), k.agent), p, r, nil)
	reqVector("non-canonical-order", "malformed", "fields in another order, correctly signed",
		sign(bcrypto.KindRequest, bytes.Replace(bytes.Replace(body, []byte(`"v":1,`), nil, 1), []byte(`}`+"}"), []byte(`},"v":1}`), 1), k.agent), p, r, nil)
	reqVector("duplicate-field", "malformed", "the id field twice, correctly signed",
		sign(bcrypto.KindRequest, bytes.Replace(body, []byte(`"v":1,`), []byte(`"v":1,"v":1,`), 1), k.agent), p, r, nil)
	reqVector("unknown-version-body", "unknown-version", `"v":2 in the body, correctly signed`,
		resign(r, k.agent, func(c *Request) { c.V = 2 }), p, r, nil)
	reqVector("bad-id", "malformed", "an id that is not 32 hex digits",
		resign(r, k.agent, func(c *Request) { c.ID = "ABC" }), p, r, map[string]string{"name": "ABC.manifest"})
	reqVector("sealed-length-impossible", "malformed", "a payload length no plaintext seals to",
		resign(r, k.agent, func(c *Request) { c.Payload.Len = 5 }), p, r, nil)
	reqVector("wrapped-key-short", "malformed", "a wrapped key of 79 bytes",
		resign(r, k.agent, func(c *Request) { c.Payload.Key = c.Payload.Key[:79] }), p, r, nil)
	reqVector("payload-too-large", "too-large", "pins an 8 GiB payload",
		resign(r, k.agent, func(c *Request) { c.Payload.Len = bcrypto.SealedSize(8 << 30) }), p, r, nil)

	// Time.
	m, p, r = mkReq("expired", func(n *NewRequest) { n.Created = vectorNow.Add(-2 * time.Hour); n.Expires = vectorNow.Add(-time.Hour) })
	reqVector("expired", "expired", "expired an hour ago by its signed expiry", m, p, r, nil)
	m, p, r = mkReq("future", func(n *NewRequest) { n.Created = vectorNow.Add(time.Hour); n.Expires = vectorNow.Add(2 * time.Hour) })
	reqVector("future-created", "not-yet-valid", "created an hour ahead of the host clock (skew allows 10 minutes)", m, p, r, nil)
	m, p, r = mkReq("long", func(n *NewRequest) { n.Expires = created.Add(30 * 24 * time.Hour) })
	reqVector("validity-too-long", "malformed", "valid for 30 days; the cap is 7", m, p, r, nil)

	// Payload arrival and integrity.
	m, p, r = mkReq("payload", func(n *NewRequest) { n.Stdin = bytes.NewReader(stdin) })
	two := map[string]string{"stdin-len": strconv.Itoa(len(stdin))}
	reqVector("payload-partial", "pending", "payload still arriving: a prefix at the final name", m, p[:1000], r, two)
	reqVector("payload-empty", "pending", "payload present but empty (a placeholder, or a pre-sized temp)", m, nil, r, two)
	reqVector("payload-bit-flip", "hash-mismatch", "payload of the right length with one byte changed", m, flip(p, 70000), r, two)
	reqVector("payload-extended", "hash-mismatch", "payload with a byte appended", m, append(bytes.Clone(p), 0), r, two)
	m2, p2, _ := mkReq("payload-swap", nil)
	_ = m2
	reqVector("payload-swapped", "hash-mismatch", "the payload of another request under this manifest", m, append(p2, make([]byte, len(p)-len(p2))...), r, two)
	// A signer who pins a stream cut at a chunk boundary: the hash matches,
	// the stream construction still refuses it.
	cut := p[:bcrypto.SealedSize(bcrypto.ChunkSize)]
	reqVector("stream-truncated", "truncated", "the pinned ciphertext lacks its final chunk",
		resign(r, k.agent, func(c *Request) { c.Payload.Len = int64(len(cut)); c.Payload.SHA256 = SHA256Hex(cut) }), cut, r, two)
	_, p, r = mkReq("for-other", nil)
	var other bytes.Buffer
	_, wrapped, _ := bcrypto.NewSealer(&other, otherHost.BoxPub, detRand("for-other"))
	reqVector("key-wrapped-for-other-host", "unauthenticated", "the payload key is sealed to another host's key",
		resign(r, k.agent, func(c *Request) { c.Payload.Key = wrapped }), p, r, nil)
	// A payload whose sealed call header is not canonical.
	var odd bytes.Buffer
	s, wk, _ := bcrypto.NewSealer(&odd, host.BoxPub, detRand("odd-call"))
	hdr := []byte(`{"v":1,"op":"echo","args":{"msg":"hi"},"shell":"rm -rf /"}`)
	var n4 [4]byte
	binary.BigEndian.PutUint32(n4[:], uint32(len(hdr)))
	s.Write(n4[:])
	s.Write(hdr)
	s.Close()
	oddPin := odd.Bytes()
	reqVector("call-unknown-field", "malformed", "the sealed call carries an extra field",
		resign(r, k.agent, func(c *Request) {
			c.Payload = Payload{Len: int64(len(oddPin)), SHA256: SHA256Hex(oddPin), Key: wk}
		}), oddPin, r, nil)
	_, _, r = mkReq("bad-op", func(n *NewRequest) { n.Call = Call{Op: "echo", Args: map[string]string{"msg": "x"}} })
	var bad bytes.Buffer
	s, wk, _ = bcrypto.NewSealer(&bad, host.BoxPub, detRand("bad-op"))
	hdr = []byte(`{"v":1,"op":"../bin/sh","args":{}}`)
	binary.BigEndian.PutUint32(n4[:], uint32(len(hdr)))
	s.Write(n4[:])
	s.Write(hdr)
	s.Close()
	badPin := bad.Bytes()
	reqVector("call-bad-op-name", "malformed", "an op name outside the name rule",
		resign(r, k.agent, func(c *Request) {
			c.Payload = Payload{Len: int64(len(badPin)), SHA256: SHA256Hex(badPin), Key: wk}
		}), badPin, r, nil)

	// Results.
	m, _, r = mkReq("for-result", nil)
	mkRes := func(name string, tweak func(*NewResult)) ([]byte, []byte) {
		n := NewResult{
			Host: k.host, HostID: host.ID, AgentBoxPub: agent.BoxPub, Request: r, RequestSHA: SHA256Hex(m),
			Receipt: Receipt{Status: StatusDone, Op: "echo", Argv: []string{"/bin/echo", "hi"}, PolicySHA256: strings.Repeat("ab", 32),
				Started: vectorNow.UnixMilli(), Finished: vectorNow.UnixMilli() + 3, StdoutTotal: 3},
			Stdout: []byte("hi\n"), Created: vectorNow, Rand: detRand("result:" + name),
		}
		if tweak != nil {
			tweak(&n)
		}
		var out bytes.Buffer
		res, err := SealResult(&out, n)
		if err != nil {
			t.Fatal(err)
		}
		return res, out.Bytes()
	}
	resVector := func(name, expect, note string, res, out, req []byte) {
		write(&vector{name: "result-" + name, expect: expect, kind: "result", note: note,
			fields: map[string]string{"name": r.ID + ".result", "stdout": strconv.Quote("hi\n")},
			files:  map[string][]byte{"result.b64": res, "output.b64": out, "request.b64": req}})
	}
	res, out := mkRes("ok", nil)
	resVector("ok", "ok", "echo ran and printed hi", res, out, m)
	resVector("for-other-request", "wrong-request", "a genuine result bound to another manifest", res, out, append(bytes.Clone(m), 'x'))
	resVector("output-partial", "pending", "the output file is still arriving", res, out[:20], m)
	forged, _ := mkRes("forged", func(n *NewResult) { n.Host = k.agent })
	resVector("signed-by-agent", "bad-signature", "a result signed by the agent's own key", forged, out, m)
	res2, out2 := mkRes("stranger", func(n *NewResult) { n.AgentBoxPub = stranger.BoxPub })
	resVector("sealed-to-stranger", "wrong-recipient", "a result for another agent's key", res2, out2, m)
	// A receipt that disagrees with its manifest (status).
	res3, out3 := mkRes("mismatch", nil)
	env, _ := bcrypto.Parse(bcrypto.KindResult, res3)
	var rm Result
	bcrypto.DecodeBody(env.Body(), &rm)
	rm.Status = StatusFailed
	resVector("receipt-disagrees", "malformed", "manifest says failed, sealed receipt says done", sign(bcrypto.KindResult, encode(&rm), k.host), out3, m)

	// Bundles.
	bundleVector := func(name, expect, note, text, fp string) {
		write(&vector{name: "bundle-" + name, expect: expect, kind: "bundle", note: note,
			fields: map[string]string{"fingerprint": fp}, files: map[string][]byte{"bundle.txt": []byte(text + "\n")}})
	}
	hostSigned, _ := k.host.SignBundle(bcrypto.Bundle{Role: "host", Name: "laptop", ID: host.ID, Created: host.Created})
	bundleVector("host-ok", "ok", "a host bundle", bcrypto.BundleText(hostSigned), host.Fingerprint())
	agentSigned, _ := k.agent.SignBundle(bcrypto.Bundle{Role: "agent", Name: "cloud-1", ID: agent.ID, Created: agent.Created})
	bundleVector("agent-ok", "ok", "an agent bundle", bcrypto.BundleText(agentSigned), agent.Fingerprint())
	bundleVector("text-padding", "malformed", "base64 with a padding character", bcrypto.BundleText(hostSigned)+"=", "")
	bundleVector("text-prefix", "malformed", "wrong text prefix", strings.Replace(bcrypto.BundleText(hostSigned), "bridge-bundle-v1:", "bridge-bundle-v2:", 1), "")
	hb := *host
	lowOrder, _ := hex.DecodeString("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800")
	hb.BoxPub = lowOrder
	bundleVector("low-order-key", "bad-key", "a box key of low order, correctly self-signed", bcrypto.BundleText(sign(bcrypto.KindBundle, encode(&hb), k.host)), "")
	hb = *host
	hb.SignPub = hb.SignPub[:31]
	bundleVector("short-sign-key", "bad-key", "a 31-byte signing key", bcrypto.BundleText(sign(bcrypto.KindBundle, encode(&hb), k.host)), "")
	hb = *host
	bundleVector("forged", "bad-signature", "host keys, signed by a stranger", bcrypto.BundleText(sign(bcrypto.KindBundle, encode(&hb), k.stranger)), "")
	hbody := encode(host)
	bundleVector("unknown-field", "malformed", "an extra field, correctly signed",
		bcrypto.BundleText(sign(bcrypto.KindBundle, append(hbody[:len(hbody)-1], []byte(`,"admin":true}`)...), k.host)), "")

	// Rotations of the agent's key.
	next, _ := bcrypto.GenerateIdentity(detRand("key:agent-next"))
	rot := bcrypto.Rotation{Role: "agent", ID: agent.ID, Seq: 1, Created: vectorNow.Unix(), OldValidUntil: vectorNow.Add(7 * 24 * time.Hour).Unix()}
	rotVector := func(name, expect, note string, data []byte) {
		write(&vector{name: "rotation-" + name, expect: expect, kind: "rotation", note: note, files: map[string][]byte{"rotation.b64": data}})
	}
	good, err := bcrypto.SignRotation(k.agent, next, rot)
	if err != nil {
		t.Fatal(err)
	}
	rotVector("ok", "ok", "signed by the old and the new key", good)
	byStranger, _ := bcrypto.SignRotation(k.stranger, next, rot)
	rotVector("old-key-stranger", "bad-signature", "the first signature is not the trusted old key's", byStranger)
	rbody := encode(&bcrypto.Rotation{V: 1, Role: "agent", ID: agent.ID, Seq: 1, OldSignKid: k.agent.SignKid(),
		NewSignPub: next.SignPublic(), NewBoxPub: next.BoxPublic(), Created: rot.Created, OldValidUntil: rot.OldValidUntil})
	rotVector("no-possession", "bad-signature", "the second signature is not the new key's", sign(bcrypto.KindRotation, rbody, k.agent, k.stranger))
	rotVector("trailing", "malformed", "a byte after the second signature", append(bytes.Clone(good), 0))
	rotVector("one-signature", "truncated", "only the old key signed", good[:len(good)-64])
	zero := encode(&bcrypto.Rotation{V: 1, Role: "agent", ID: agent.ID, Seq: 0, OldSignKid: k.agent.SignKid(),
		NewSignPub: next.SignPublic(), NewBoxPub: next.BoxPublic(), Created: rot.Created, OldValidUntil: rot.OldValidUntil})
	rotVector("seq-zero", "malformed", "sequence 0 is the first key, never a rotation", sign(bcrypto.KindRotation, zero, k.agent, next))
	endless := encode(&bcrypto.Rotation{V: 1, Role: "agent", ID: agent.ID, Seq: 1, OldSignKid: k.agent.SignKid(),
		NewSignPub: next.SignPublic(), NewBoxPub: next.BoxPublic(), Created: 0, OldValidUntil: 0})
	rotVector("created-zero", "malformed", "created and old_valid_until 0: an overlap that would never end", sign(bcrypto.KindRotation, endless, k.agent, next))

	// Cancels and acks.
	id := r.ID
	cancel, _ := SignCancel(k.agent, Cancel{ID: id, Agent: agent.ID, Host: host.ID, Created: vectorNow.Unix()})
	write(&vector{name: "cancel-ok", expect: "ok", kind: "cancel", note: "the agent cancels its request", fields: map[string]string{"id": id}, files: map[string][]byte{"cancel.b64": cancel}})
	bogus, _ := SignCancel(k.stranger, Cancel{ID: id, Agent: agent.ID, Host: host.ID, Created: vectorNow.Unix()})
	write(&vector{name: "cancel-by-stranger", expect: "bad-signature", kind: "cancel", note: "someone else cancels the agent's request", fields: map[string]string{"id": id}, files: map[string][]byte{"cancel.b64": bogus}})
	ack, _ := SignAck(k.agent, Ack{ID: id, Agent: agent.ID, Host: host.ID, ResultSHA256: SHA256Hex(res), Created: vectorNow.Unix()})
	write(&vector{name: "ack-ok", expect: "ok", kind: "ack", note: "the agent holds the result", fields: map[string]string{"id": id}, files: map[string][]byte{"ack.b64": ack}})
	ackOther, _ := SignAck(k.agent, Ack{ID: id, Agent: agent.ID, Host: otherHost.ID, ResultSHA256: SHA256Hex(res), Created: vectorNow.Unix()})
	write(&vector{name: "ack-wrong-host", expect: "wrong-recipient", kind: "ack", note: "an ack meant for another host", fields: map[string]string{"id": id}, files: map[string][]byte{"ack.b64": ackOther}})
	ackAsCancel := append([]byte("BRC1"), ack[4:]...)
	write(&vector{name: "ack-as-cancel", expect: "bad-signature", kind: "cancel", note: "an ack relabelled as a cancel: domain separation refuses it", fields: map[string]string{"id": id}, files: map[string][]byte{"cancel.b64": ackAsCancel}})
	// Keyed request ids (SPEC §7.2) and the secret file they are keyed by
	// (SPEC §2.7).
	secretText := MarshalIdempotencySecret(k.agentIdempotency)
	keyedVector := func(name, expect, note, op string, args map[string]string, key string, secret []byte) {
		if args == nil {
			args = map[string]string{}
		}
		a, _ := json.Marshal(args)
		f := map[string]string{"agent": agent.ID, "host": host.ID, "op": op, "args": string(a), "key": key, "id": ""}
		if expect == "ok" {
			f["id"] = KeyedID(k.agentIdempotency, agent.ID, host.ID, op, args, key)
		}
		write(&vector{name: "keyed-id-" + name, expect: expect, kind: "keyed-id", note: note, fields: f,
			files: map[string][]byte{"secret.b64": secret}})
	}
	keyedVector("ok", "ok", "deploy env=production --key deploy-42", "deploy", map[string]string{"env": "production"}, "deploy-42", secretText)
	keyedVector("no-args", "ok", "an op without arguments: the count of pairs is 0", "status", nil, "k", secretText)
	keyedVector("args-in-byte-order", "ok", "two arguments, hashed in byte order of their names", "migrate",
		map[string]string{"to": "42", "db": "main"}, "m-1", secretText)
	keyedVector("empty-key-value", "ok", "an empty argument value is a field of length 0", "echo", map[string]string{"msg": ""}, "x", secretText)
	keyedVector("secret-padding", "malformed", "the secret's base64 with padding", "echo", nil, "x",
		[]byte(strings.TrimSuffix(string(secretText), "\n")+"=\n"))
	keyedVector("secret-no-newline", "malformed", "the secret line without its newline", "echo", nil, "x", bytes.TrimSuffix(secretText, []byte("\n")))
	keyedVector("secret-short", "malformed", "a secret of 31 bytes", "echo", nil, "x", MarshalIdempotencySecret(k.agentIdempotency[:31]))
	keyedVector("secret-identity-file", "malformed", "an identity file where the idempotency secret belongs", "echo", nil, "x",
		func() []byte { b, _ := k.agent.MarshalText(); return b }())
	// Agent secrets (SPEC §2.8): the test agent trusting the test host.
	secretVector := func(name, expect, note string, text string) {
		write(&vector{name: "agent-secret-" + name, expect: expect, kind: "agent-secret", note: note,
			fields: map[string]string{"agent": agent.ID, "host": host.ID},
			files:  map[string][]byte{"secret.b64": []byte(text)}})
	}
	as := AgentSecret{ID: agent.ID, Name: "cloud-1", Identity: k.agent, Idempotency: k.agentIdempotency,
		Hosts: []SecretHost{{ID: host.ID, Name: "laptop", SignPub: host.SignPub, BoxPub: host.BoxPub}}}
	goodSecret, err := as.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	secretVector("ok", "ok", "the agent, seq 0, trusting one host", goodSecret)
	secretVector("padding", "malformed", "base64 with padding", goodSecret+"=")
	raw, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(goodSecret, agentSecretPrefix))
	secretVector("trailing", "malformed", "a byte after the last host", agentSecretPrefix+base64.RawURLEncoding.EncodeToString(append(bytes.Clone(raw), 0)))
	secretVector("short", "malformed", "cut inside the host's box key", agentSecretPrefix+base64.RawURLEncoding.EncodeToString(raw[:len(raw)-1]))
	wrongID := bytes.Clone(raw)
	wrongID[0] ^= 1
	secretVector("wrong-id", "malformed", "at seq 0 the id must be the kid of the signing key", agentSecretPrefix+base64.RawURLEncoding.EncodeToString(wrongID))
	swapped := as
	swapped.Hosts = []SecretHost{{ID: host.ID, Name: "laptop", SignPub: otherHost.SignPub, BoxPub: otherHost.BoxPub}}
	forgedSecret, _ := swapped.MarshalText()
	secretVector("host-key-not-its-id", "malformed", "a host pinned at seq 0 with a key whose kid is not the host's id", forgedSecret)
	secretVector("identity-file", "malformed", "an identity file where the agent secret belongs",
		func() string { b, _ := k.agent.MarshalText(); return string(b) }())
	// Catalogs (SPEC §10a): one with every op field, one as a host wrote
	// it before the stdin field and the issue time (which must still
	// read), and refusals. A catalog with an issue time is v 2.
	catVector := func(name, expect, note string, c Catalog, stdin string, by *bcrypto.Identity, body func([]byte) []byte) {
		if c.V == 0 {
			c.V = 1
			if c.Issued != 0 {
				c.V = CatalogVersion
			}
		}
		b := encode(c)
		if body != nil {
			b = body(b)
		}
		write(&vector{name: "catalog-" + name, expect: expect, kind: "catalog", note: note,
			fields: map[string]string{"agent": c.Agent, "stdin": stdin}, files: map[string][]byte{"catalog.b64": sign(bcrypto.KindCatalog, b, by)}})
	}
	one, dflt := int64(1), "1"
	full := Catalog{Host: host.ID, Agent: agent.ID, Policy: strings.Repeat("ab", 32), Issued: vectorNow.UnixMilli(), Ops: []policy.OpInfo{
		{Name: "apply", Description: "apply a patch and print what it changed", Scope: "write", Timeout: "1m0s", MaxOutput: 4 << 20, MaxStdin: 1 << 20,
			Stdin: "required", StdinHint: "unified diff", DryRun: "apply-check", Undo: "restore", Args: []policy.ArgInfo{}},
		{Name: "apply-check", Scope: "read", Timeout: "1m0s", MaxOutput: 4 << 20, MaxStdin: 1 << 20, Stdin: "required", StdinHint: "unified diff", Args: []policy.ArgInfo{}},
		{Name: "cat", Scope: "read", Idempotent: true, Timeout: "10s", MaxOutput: 1 << 20, MaxStdin: 0, Stdin: "none",
			Args: []policy.ArgInfo{{Name: "file", Type: "path", Required: true, MustExist: true}}},
		{Name: "test", Scope: "execute", Risk: "runs the repository's tests", Timeout: "20m0s", MaxOutput: 8 << 20, MaxStdin: 1 << 20,
			Args: []policy.ArgInfo{{Name: "n", Type: "int", Default: &dflt, Min: &one}}},
	}}
	catVector("ok", "ok", "v 2: an issue time; stdin modes, a hint, risk, scope execute, dry_run and undo", full,
		"apply=required,apply-check=required,cat=none,test=optional", k.host, nil)
	noIssue := full
	noIssue.V, noIssue.Issued = CatalogVersion, 0
	catVector("v2-no-issued", "malformed", "v 2 without its issue time", noIssue, "", k.host, nil)
	v1Issued := full
	v1Issued.V = 1
	catVector("v1-issued", "malformed", "v 1 with an issue time (a v 1 catalog has none)", v1Issued, "", k.host, nil)
	v3 := full
	v3.V = 3
	catVector("v3", "unknown-version", "a version no release defines", v3, "", k.host, nil)
	oldCat := Catalog{Host: host.ID, Agent: agent.ID, Policy: strings.Repeat("cd", 32), Ops: []policy.OpInfo{
		{Name: "echo", Description: "print a message", Scope: "read", Timeout: "10m0s", MaxOutput: 4 << 20, MaxStdin: 1 << 20,
			Args: []policy.ArgInfo{{Name: "msg", Type: "string", Required: true, Pattern: "[a-z]{1,20}", MaxLen: 256}}},
		{Name: "status", Scope: "read", Timeout: "10m0s", MaxOutput: 4 << 20, MaxStdin: 0, Args: []policy.ArgInfo{}},
	}}
	catVector("old-no-stdin", "ok", "v 1, written before the stdin field and the issue time: optional when max_stdin > 0, none when 0", oldCat,
		"echo=optional,status=none", k.host, nil)
	catVector("bad-stdin-mode", "malformed", "a stdin mode no version defines, correctly signed", full, "", k.host,
		func(b []byte) []byte { return bytes.Replace(b, []byte(`"stdin":"none"`), []byte(`"stdin":"maybe"`), 1) })
	catVector("unknown-field", "malformed", "an extra op field, correctly signed", oldCat, "", k.host,
		func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"name":"status",`), []byte(`"name":"status","shell":true,`), 1)
		})
	catVector("signed-by-stranger", "bad-signature", "a catalog not signed by the host", full, "", k.stranger, nil)
	otherCat := full
	otherCat.Agent = stranger.ID
	catVector("for-other-agent", "wrong-recipient", "another agent's catalog", otherCat, "", k.host, nil)
	// Liveness stamps (SPEC §10c).
	liveVector := func(name, expect, note string, data []byte) {
		write(&vector{name: "liveness-" + name, expect: expect, kind: "liveness", note: note, files: map[string][]byte{"liveness.b64": data}})
	}
	lvStamp := LivenessStamp{Host: host.ID, Agent: agent.ID, State: LivenessServing, Time: vectorNow.Unix(), Interval: 300,
		Accepts: []string{agent.ID}, Policy: strings.Repeat("5a", 32)}
	signStamp := func(st LivenessStamp, id *bcrypto.Identity) []byte {
		out, err := SignLiveness(st, id)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	liveVector("ok", "ok", "the host serves and accepts the agent's first key", signStamp(lvStamp, k.host))
	lvStopped := lvStamp
	lvStopped.State, lvStopped.Accepts = LivenessStopped, nil
	liveVector("stopped-refusing", "ok", "a clean stop, accepting no key of the agent (accepts is [] on the wire)", signStamp(lvStopped, k.host))
	lvDraining := lvStamp
	lvDraining.State = LivenessDraining
	liveVector("draining", "ok", "a daemon told to stop while ops ran: they may finish, nothing new starts", signStamp(lvDraining, k.host))
	lvOther := lvStamp
	lvOther.Agent = stranger.ID
	liveVector("other-agent", "wrong-recipient", "another agent's stamp copied into this agent's directory", signStamp(lvOther, k.host))
	liveVector("forged", "bad-signature", "signed by someone lvOther than the host", signStamp(lvStamp, k.stranger))
	lvRaw := func(body string) []byte { return sign(bcrypto.KindLiveness, []byte(body), k.host) }
	lvBody := func(state, accepts string, interval int) string {
		return `{"v":1,"host":"` + host.ID + `","host_kid":"` + k.host.SignKid() + `","agent":"` + agent.ID + `","state":"` + state +
			`","time":` + strconv.FormatInt(vectorNow.Unix(), 10) + `,"interval":` + strconv.Itoa(interval) + `,"accepts":` + accepts +
			`,"agent_seq":0,"trusted":true,"policy_sha256":"` + strings.Repeat("5a", 32) + `"}`
	}
	liveVector("raw-ok", "ok", "the byte form spelled out", lvRaw(lvBody("serving", `["`+agent.ID+`"]`, 300)))
	liveVector("accepts-null", "malformed", "accepts as null, not []", lvRaw(lvBody("serving", "null", 300)))
	liveVector("accepts-unsorted", "malformed", "key ids out of order", lvRaw(lvBody("serving", `["`+stranger.ID+`","`+agent.ID+`"]`, 300)))
	if stranger.ID < agent.ID {
		t.Fatal("test keys: the stranger's id must sort after the agent's")
	}
	liveVector("bad-state", "malformed", "a state other than serving, draining or stopped", lvRaw(lvBody("asleep", "[]", 300)))
	liveVector("interval-zero", "malformed", "an interval of 0 would never go stale", lvRaw(lvBody("serving", "[]", 0)))
	liveVector("interval-too-long", "malformed", "an interval over an hour", lvRaw(lvBody("serving", "[]", 3601)))
	catalogAsStamp := append([]byte("BRL1"), sign(bcrypto.KindCatalog, []byte(lvBody("serving", "[]", 300)), k.host)[4:]...)
	liveVector("catalog-label", "bad-signature", "a body signed under the catalog's label: domain separation refuses it", catalogAsStamp)
	t.Logf("wrote %d vectors", seq)
}
