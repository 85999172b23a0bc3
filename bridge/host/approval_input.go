package host

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/syncsafe"
)

// keepApprovalInput copies the request's input from its spool into the
// home. A failure is logged, not fatal: the approval still binds the hash,
// and `bridge pending` says the input is not kept.
func (o *outbox) keepApprovalInput(j *job, stdin io.ReadSeeker) {
	if _, err := stdin.Seek(0, io.SeekStart); err != nil {
		o.log.Warn("keep the input of a request awaiting approval", "key", j.key, "err", err)
		return
	}
	dir := o.home.Path(operator.ApprovalsDir, j.agent)
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		err = syncsafe.WriteFileAtomicFrom(operator.ApprovalInputPath(o.home, j.agent, j.req.ID), func(w io.Writer) error {
			_, err := io.Copy(w, stdin)
			return err
		})
	}
	if err != nil {
		o.log.Warn("keep the input of a request awaiting approval", "key", j.key, "err", err)
	}
}

// dropApprovalInput removes the kept input of the request at key, if any.
func (o *outbox) dropApprovalInput(key string) {
	agent, id, _ := strings.Cut(key, "/")
	if err := os.Remove(operator.ApprovalInputPath(o.home, agent, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		o.log.Warn("remove the kept input of a request no longer awaiting approval", "key", key, "err", err)
	}
}

// sweepApprovalInputs removes kept inputs whose request no longer waits
// for approval (a crash between a decision and the removal).
func (c *collector) sweepApprovalInputs() {
	agents, err := os.ReadDir(c.home.Path(operator.ApprovalsDir))
	if err != nil {
		return
	}
	for _, a := range agents {
		files, _ := os.ReadDir(c.home.Path(operator.ApprovalsDir, a.Name()))
		for _, f := range files {
			id, ok := strings.CutSuffix(f.Name(), ".stdin")
			if !ok {
				continue
			}
			// A copy is kept just before its request is recorded as
			// waiting: one younger than a minute may be on its way.
			if fi, err := f.Info(); err != nil || time.Since(fi.ModTime()) < time.Minute {
				continue
			}
			if e, err := c.ledger.Get(a.Name() + "/" + id); err == nil && e.State == ledger.StateAwaitingApproval {
				continue
			}
			c.out.dropApprovalInput(a.Name() + "/" + id)
		}
	}
}
