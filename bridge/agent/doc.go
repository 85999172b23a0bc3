// Package agent is the agent's side of a bridge: a client of the synced
// folder that submits requests, waits for their signed results, reads the
// host's catalog, inbox and live progress, cancels, and acks. It never runs
// anything locally, and it never writes outside its own to-host tree and
// its home.
//
// Entry points: [OpenClient], then [Client.Submit] and [Client.Wait] (what
// `bridge run` does), [Client.Ack] once the result is kept.
//
// # Security
//
// A result is accepted only when the host's signature verifies under a key
// the agent trusts for that host, it is bound to the exact manifest this
// agent sent (remembered in the home), and its output matches the signed
// pin. Status, Wait, Result and Progress only read the folder (invariant 10).
package agent
