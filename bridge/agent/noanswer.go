package agent

import (
	"fmt"
	"time"

	"github.com/syncbridge/bridge/bridge"
)

// NoAnswerAfter is how long past a request's expiry this agent waits for
// an answer before it concludes none will come, when none is in the folder
// and the host never said it started: the host answers a request it sees
// past its expiry `expired` only within its clock skew after the expiry,
// by its own clock, and refuses it without an answer later (SPEC §8); its
// clock may run up to the skew behind this one. An op the host started in
// time says so within seconds (its progress), and its answer comes however
// late.
const NoAnswerAfter = 2 * bridge.DefaultSkew

// NoAnswerError ends the wait for a request no answer will come for
// (NoAnswerAfter). It never started on the host, unless an answer was
// published and then collected before this agent read it (the host's
// `--retention`).
type NoAnswerError struct {
	Expires time.Time
}

func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("no answer will come: it is past its expiry (%s) by more than %s with none, and the host never said it started",
		e.Expires.Local().Format(time.DateTime), NoAnswerAfter)
}

// noAnswer reports whether no answer will come for s, which has none in
// the folder.
func (c *Client) noAnswer(s *Sent) bool {
	return s.Expires > 0 && time.Now().After(time.Unix(s.Expires, 0).Add(NoAnswerAfter)) && !c.Started(s.ID)
}

// SettleNoAnswer records that no answer will come for request id (the
// wait ended with a *NoAnswerError), so that it is no longer outstanding
// (Outstanding, `bridge wait --all`), and GC may remove its files from the
// folder. It refuses a request that has an answer after all, or may still
// get one.
func (c *Client) SettleNoAnswer(id string) error {
	s, err := c.Sent(id)
	if err != nil {
		return err
	}
	if out, err := c.Result(id); err == nil {
		out.Close()
		return fmt.Errorf("request %s has an answer", id)
	}
	if !c.noAnswer(s) {
		return fmt.Errorf("request %s may still get an answer", id)
	}
	rec := sentRecord{Sent: *s}
	if old, err := c.readSent(id); err == nil {
		rec = *old
	} else {
		rec.Manifest = c.sentManifest(id)
	}
	rec.NoAnswer = time.Now().Unix()
	// A cache as the record is until an ack (Remember): lost, the request
	// is outstanding again, and settled again by the next wait.
	return c.writeRecord(rec, false)
}
