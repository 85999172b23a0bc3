// Package host is the host daemon, `bridge serve`: it watches the agents'
// request trees, admits complete and authentic requests, runs what the
// policy allows, and publishes sealed, signed results. It also holds the
// operator's tools that act on a host's home: approve and deny, reconcile,
// gc, the audit log, doctor, ledger repair, the user service.
//
// Entry points: [NewDaemon], then [Daemon.Open], [Daemon.Run] and
// [Daemon.Close].
//
// # Security
//
// The ledger and every private file live in the host's home, outside the
// synced folder. An id runs at most once (the ledger decides), and nothing
// from the folder is trusted before its signature verified.
package host
