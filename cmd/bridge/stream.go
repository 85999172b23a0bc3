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

// rest returns how many bytes of the result's stdout and stderr the stream
// has printed already, so that printing the result skips them; 0 and 0,
// after a warning, when the stream is not a prefix of the result. The
// result's output is read once to compare (the client streams it, never
// holding it whole), and once more to print.
func (s *streamer) rest(out *agent.Outcome) (skipOut, skipErr int) {
	if s.next == 1 {
		return 0, 0 // nothing streamed: the result holds it all
	}
	s.poll() // chunks that arrived with the result
	po, pe := &prefixCheck{want: s.out.Bytes()}, &prefixCheck{want: s.errb.Bytes()}
	if err := out.WriteOutput(po, pe); err != nil || !po.ok() || !pe.ok() {
		s.g.note("warning: the streamed output differs from the verified result (the host's redaction or output cap, or a stream cut short); the result follows in full")
		return 0, 0
	}
	return s.out.Len(), s.errb.Len()
}

// prefixCheck is a writer that checks that what is written begins with
// want, and discards it.
type prefixCheck struct {
	want    []byte
	n       int
	differs bool
}

func (c *prefixCheck) Write(b []byte) (int, error) {
	if k := min(len(b), len(c.want)-c.n); k > 0 {
		c.differs = c.differs || !bytes.Equal(b[:k], c.want[c.n:c.n+k])
		c.n += k
	}
	return len(b), nil
}

func (c *prefixCheck) ok() bool { return !c.differs && c.n == len(c.want) }

// skipWriter drops the first skip bytes written to it.
type skipWriter struct {
	w    io.Writer
	skip int
}

func (s *skipWriter) Write(b []byte) (int, error) {
	k := min(len(b), s.skip)
	s.skip -= k
	if _, err := s.w.Write(b[k:]); err != nil {
		return 0, err
	}
	return len(b), nil
}
