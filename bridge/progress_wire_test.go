package bridge

import (
	"bytes"
	"errors"
	"io"
	"testing"

	bcrypto "github.com/syncbridge/bridge/crypto"
)

// A chunk whose sealed header claims lengths whose sum overflows is refused
// as malformed, never allocated (each length is checked alone first).
func TestProgressChunkHugeLengths(t *testing.T) {
	me, err := bcrypto.GenerateIdentity(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []chunkHeader{
		{V: 1, StdoutLen: 1 << 62, StderrLen: 1 << 62},
		{V: 1, StdoutLen: 1<<63 - 1, StderrLen: 1},
		{V: 1, StdoutLen: MaxProgressData + 1},
		{V: 1, StdoutLen: -1},
	} {
		var ct bytes.Buffer
		pin, err := sealPayload(&ct, me.BoxPublic(), h, []io.Reader{bytes.NewReader([]byte("x"))}, nil)
		if err != nil {
			t.Fatal(err)
		}
		chunk := &Progress{V: 1, AgentBoxKid: me.BoxKid(), Key: pin.Key, Data: ct.Bytes()}
		if _, err := OpenChunk(chunk, nil, me); !errors.Is(err, bcrypto.ErrMalformed) {
			t.Errorf("header %+v: %v, want ErrMalformed", h, err)
		}
	}
}

// A chunk sealed and signed by SealProgress opens with OpenProgress and
// OpenChunk, and one that names another predecessor is refused.
func TestProgressRoundTrip(t *testing.T) {
	host, _ := bcrypto.GenerateIdentity(nil)
	agent, _ := bcrypto.GenerateIdentity(nil)
	id := NewRequestID()
	p := Progress{ID: id, Host: host.SignKid(), Agent: agent.SignKid(), Seq: 1, StdoutTotal: 3}
	data, err := SealProgress(p, []byte("out"), []byte("e"), host, agent.BoxPublic())
	if err != nil {
		t.Fatal(err)
	}
	c := ProgressCheck{ID: id, Host: host.SignKid(), Agent: agent.SignKid(), Seq: 1, HostKeys: [][]byte{host.SignPublic()}}
	got, err := OpenProgress(data, c)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := OpenChunk(got, data, agent)
	if err != nil || string(ch.Stdout) != "out" || string(ch.Stderr) != "e" || ch.ChunkHash() != SHA256Hex(data) {
		t.Fatalf("chunk %+v, %v", ch, err)
	}
	c.Prev = SHA256Hex([]byte("another"))
	if _, err := OpenProgress(data, c); !errors.Is(err, ErrBrokenChain) {
		t.Fatalf("a chunk naming another predecessor: %v, want ErrBrokenChain", err)
	}
	if _, err := SealProgress(p, make([]byte, MaxProgressData+1), nil, host, agent.BoxPublic()); err == nil {
		t.Fatal("a chunk over the cap was sealed")
	}
}
