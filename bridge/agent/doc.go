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
// # Security
//
// A result is accepted only when the host's signature verifies under a key
// the agent trusts for that host, it is bound to the exact manifest this
// agent sent (remembered in the home), and its output matches the signed
// pin. Status, Wait, Result, Progress and HostLiveness only read the folder (invariant 10).
package agent
