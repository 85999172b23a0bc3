package main

import (
	"bytes"

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

// rest returns out with only the output the stream has not printed.
func (s *streamer) rest(out *agent.Outcome) *agent.Outcome {
	if s.next == 1 {
		return out // nothing streamed: the result holds it all
	}
	s.poll() // chunks that arrived with the result
	if !bytes.HasPrefix(out.Stdout, s.out.Bytes()) || !bytes.HasPrefix(out.Stderr, s.errb.Bytes()) {
		s.g.note("warning: the streamed output differs from the verified result (the host's redaction or output cap, or a stream cut short); the result follows in full")
		return out
	}
	cp := *out
	cp.Stdout, cp.Stderr = out.Stdout[s.out.Len():], out.Stderr[s.errb.Len():]
	return &cp
}
