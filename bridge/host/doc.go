// Package host is the host daemon, `bridge serve`: it watches the agents'
// request trees, admits complete and authentic requests, runs what the
// policy allows, and publishes sealed, signed results. It also holds the
// operator's tools that act on a host's home: approve and deny, reconcile,
// gc, the audit log, doctor, ledger repair, the user service.
//
// Entry points: [NewDaemon], then [Daemon.Open], [Daemon.Run] and
// [Daemon.Close].
//
// # The request lifecycle
//
// Every change of a request's state goes through one table (lifecycle.go;
// the same table is in docs/DESIGN.md §6): each event (delivery, refusal,
// approval, cancel, start, exit, drain, crash, repair, revocation, expiry)
// names the states it may leave and the one it enters. An answer is
// published before its ledger step, and never unless the ledger can take
// that step; a step the ledger refuses after an answer is out stops the
// daemon instead of being logged and forgotten. Whatever answers or moves
// a request owns its key first (queue.go), so no two paths act on one
// request at once.
//
// # Security
//
// The ledger and every private file live in the host's home, outside the
// synced folder. An id runs at most once (the ledger decides, and when its
// record is lost, what else remembers the id holds it for a human); an op
// that started is answered done, failed only if its process never started,
// cancelled or uncertain; nothing signed by a revoked key starts.
package host
