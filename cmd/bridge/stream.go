package main

import (
	"bytes"
	"io"

	"github.com/syncbridge/bridge/bridge/agent"
)

// streamer prints an op's output while it runs, from the host's verified
// progress chunks (as `bridge logs -f` does), for `run` and `wait`. The
// verified result wins (CLI.md, `bridge run`): when it arrives, only what
// the stream has not shown is printed; if the stream is not a prefix of the
// result's output, a warning says so and the result is printed whole.
type streamer struct {
	g          *Globals
	cl         *agent.Client
	id         string
	next       int
	prev       string
	out, errb  bytes.Buffer // what was printed
	onFirst    func()       // called before the first byte is printed
	incomplete bool         // a chunk said bytes were dropped from the stream
}

func newStreamer(g *Globals, cl *agent.Client, id string, onFirst func()) *streamer {
	return &streamer{g: g, cl: cl, id: id, next: 1, onFirst: onFirst}
}

// poll prints the chunks that arrived since the last poll.
func (s *streamer) poll() {
	chunks, _ := s.cl.Progress(s.id, s.next, s.prev)
	for _, ch := range chunks {
		if (len(ch.Stdout) > 0 || len(ch.Stderr) > 0) && s.onFirst != nil {
			s.onFirst()
			s.onFirst = nil
		}
		s.g.stdout.Write(ch.Stdout)
		s.g.stderr.Write(ch.Stderr)
		s.out.Write(ch.Stdout)
		s.errb.Write(ch.Stderr)
		s.incomplete = s.incomplete || ch.Dropped > 0
		s.next, s.prev = ch.Seq+1, ch.ChunkHash()
	}
}

// skip returns how many bytes of the result's stdout and stderr the
// stream has printed already: 0, 0 when nothing streamed, or when the
// stream is not a prefix of the verified output (then a warning says the
// result follows in full). The output is read through once to compare,
// as it is kept (in a file of the home, not in memory).
func (s *streamer) skip(out *agent.Outcome) (int, int) {
	if s.next == 1 {
		return 0, 0 // nothing streamed: the result holds it all
	}
	s.poll() // chunks that arrived with the result
	po, pe := &prefixOf{want: s.out.Bytes()}, &prefixOf{want: s.errb.Bytes()}
	if err := out.WriteOutput(po, pe); err != nil || !po.ok() || !pe.ok() {
		s.g.note("warning: the streamed output differs from the verified result (the host's redaction or output cap, or a stream cut short); the result follows in full")
		return 0, 0
	}
	return s.out.Len(), s.errb.Len()
}

// prefixOf checks that what is written to it begins with want.
type prefixOf struct {
	want []byte
	n    int
	bad  bool
}

func (p *prefixOf) Write(b []byte) (int, error) {
	if p.n < len(p.want) && !p.bad {
		k := min(len(b), len(p.want)-p.n)
		p.bad = !bytes.Equal(b[:k], p.want[p.n:p.n+k])
		p.n += k
	}
	return len(b), nil
}

func (p *prefixOf) ok() bool { return !p.bad && p.n == len(p.want) }

// skipWriter drops the first skip bytes written to it.
type skipWriter struct {
	w    io.Writer
	skip int
}

func (s *skipWriter) Write(b []byte) (int, error) {
	n := len(b)
	if s.skip > 0 {
		k := min(s.skip, len(b))
		s.skip -= k
		b = b[k:]
	}
	if len(b) == 0 {
		return n, nil
	}
	if _, err := s.w.Write(b); err != nil {
		return 0, err
	}
	return n, nil
}
