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
	p := newPair(t, testPolicy)
	own, err := p.agent.OwnKeys()
	if err != nil {
		t.Fatal(err)
	}
	me := own[0].Identity
	for _, h := range []chunkHeader{
		{V: 1, StdoutLen: 1 << 62, StderrLen: 1 << 62},
		{V: 1, StdoutLen: 1<<63 - 1, StderrLen: 1},
		{V: 1, StdoutLen: maxProgressData + 1},
		{V: 1, StdoutLen: -1},
	} {
		var ct bytes.Buffer
		pin, err := sealPayload(&ct, me.BoxPublic(), h, []io.Reader{bytes.NewReader([]byte("x"))}, nil)
		if err != nil {
			t.Fatal(err)
		}
		chunk := &Progress{V: 1, AgentBoxKid: me.BoxKid(), Key: pin.Key, Data: ct.Bytes()}
		if _, err := p.client.openChunk(chunk, own); !errors.Is(err, bcrypto.ErrMalformed) {
			t.Errorf("header %+v: %v, want ErrMalformed", h, err)
		}
	}
}
