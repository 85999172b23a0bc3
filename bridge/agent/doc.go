// Package agent is the agent's side of a bridge: a client of the synced
// folder that submits requests, waits for their signed results, reads the
// host's catalog, inbox and live progress, cancels, and acks. It never runs
// anything locally, and it never writes outside its own to-host tree and
// its home.
//
// Entry points: [OpenClient], then [Client.Submit] and [Client.Wait] (what
// `bridge run` does), [Client.Ack] once the result is kept.
// [Client.HostLiveness] judges the host's signed liveness stamp (serving,
// stopped, silent, or refusing this agent's key), and [Client.Wait] ends
// with a [*NotAcceptedError] when a fresh stamp refuses the key.
//
// An [Outcome] holds the op's output in Stdout and Stderr, or, with
// [Client.StreamOutput] set (as the CLI does), gives it only through
// [Outcome.WriteOutput], which decrypts it from a verified private copy as it
// writes: the output is then never in memory whole. [Outcome.Close] releases
// that copy.
//
// # Security
//
// A result is accepted only when the host's signature verifies under a key
// the agent trusts for that host, it is bound to the exact manifest this
// agent sent (remembered in the home), and its output matches the signed
// pin. Status, Wait, Result, Progress and HostLiveness only read the folder
// (invariant 10); Result copies the output it verifies to a file of the home
// without a name.
package agent
