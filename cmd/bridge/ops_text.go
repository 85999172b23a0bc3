package main

import (
	"fmt"
	"strconv"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// How `bridge ops` and `bridge ls` say what an agent needs at a glance.

// stdinSummary: "none", or the mode, what the input is and its bound.
func stdinSummary(op *bridge.OpInfo) string {
	mode := op.StdinMode()
	if mode == bridge.StdinNone {
		return "none"
	}
	s := mode
	if op.StdinHint != "" {
		s += ", " + op.StdinHint
	}
	return fmt.Sprintf("%s, at most %s (send with --stdin=FILE, or --stdin=- for a pipe)", s, sizeText(op.MaxStdin))
}

// scopeSummary: the scope, the policy author's risk note, approval, and
// the ops that check or undo this one.
func scopeSummary(op *bridge.OpInfo) string {
	s := op.Scope
	if op.Risk != "" {
		s += " — " + op.Risk
	}
	if op.Approve {
		s += "; waits for a human's approval"
	}
	if op.DryRun != "" {
		s += "; dry run first: bridge run " + op.DryRun
	}
	if op.Undo != "" {
		s += "; undo: bridge run " + op.Undo
	}
	return s
}

// exitColumn is the outcome column of `bridge ls`: the op's exit code when
// it ran ("exit 1"), the reason when it was refused, "-" while it waits.
func exitColumn(st *agent.State) string {
	switch {
	case st.Reason == string(bridge.ReasonReconciled):
		return st.Reason // the op's run was cut off: no exit of its own to show
	case st.ExitCode != nil:
		return "exit " + strconv.Itoa(*st.ExitCode)
	case st.Reason != "":
		return st.Reason
	}
	return "-"
}

// Help is the detail of `bridge run --help`: the exit codes, since an op's
// own 64, 66 or 70 reads like bridge's in text mode.
func (c *RunCmd) Help() string {
	return `Exit status: the op's own exit code when it ran; otherwise bridge's:
  64 bad command line      65 bridge failed (config, folder, keys)
  66 refused: by the host, or here by its catalog before sending
  67 expired before it ran 68 uncertain: the host crashed while it ran (ask a human)
  69 cancelled             70 the host could not start the op
  71 the op timed out      75 gave up waiting (bridge wait ID)   130 interrupted
  77 not accepted: the host accepts none of this agent's keys (pair again)
  78 a clock is wrong: the host refused it as dated in its future (enable NTP)
  128+n the op was killed by signal n (137: SIGKILL)
An op may exit 64..78 or 128+ itself. To tell them apart, use --json (or BRIDGE_JSON=1):
"exit_code" is the op's, "bridge_exit_code" is what bridge exits with, and
"status" says whether it ran ("done") or not.

Standard input: --stdin=FILE sends FILE, --stdin=- sends this command's input.
Without --stdin, this command's input (< fix.patch, or a pipe) is read only for
an op whose input is required (bridge ops); for an optional one it is not read,
and a warning says so: a loop's list or the rest of a script stays where it is.

The op and arguments are checked against the host's catalog first, so a typo
is refused at once (exit 66, with a hint); --no-check sends anyway.

` + runExamples
}
