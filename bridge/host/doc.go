// Package host is the host daemon, `bridge serve`: it watches the agents'
// request trees, admits complete and authentic requests, runs what the
// policy allows, and publishes sealed, signed results. It also holds the
// operator's tools that need the daemon's own code: reconcile and gc (with
// no daemon running they settle and collect as it would), the audit log,
// doctor, ledger repair, the user service. Approve, deny, pending, the
// ledger's listing and request references, policy check and explain and
// the presets are in package operator, whose orders the control loop
// carries out (host.go).
//
// Entry points: [NewDaemon], then [Daemon.Open], [Daemon.Run] and
// [Daemon.Close].
//
// # Rooms
//
// The Daemon holds the lifecycle: evaluate (evaluate.go: SPEC §8's checks
// as named steps, evaluationSteps), admit and run (admit.go, approval.go),
// answer, record and create (lifecycle.go), recover and adopt (recover.go,
// evidence.go), the watcher's batches (dispatch.go), the sweeps (sweep.go)
// and the control loop (host.go). Its
// own lock guards what runs (cancels, the runs waiting for a slot, the
// reconcile checks). What it hands work to are rooms, sharing only the base
// (base.go): home, folder, ledger, audit log, the log, the probe (only a
// test binary makes one: internal/probe), and the keys and policy in force
// (held by the base, replaced by the keyring and the policy watch). The
// base's log-once set and line budget have a lock of their own.
//
//   - outbox (outbox.go, results.go, liveness.go, catalog.go, inbox_host.go,
//     progress_host.go, the kept manifests in evaluate.go, the approval
//     inputs in approval_input.go): what the daemon writes into the folder
//     for the agents and the private copies it keeps; it decides nothing.
//     Its locks order the stamps' rounds and guard the catalogs.
//   - scheduler (queue.go; its slots' methods in admit.go): when a request's
//     key is worked on, and the ops' slots, under its lock and condition;
//     the agents' ceilings (ceilings.go) under a lock of their own.
//   - finishedSet (finished.go): what is known finished, acked or lost
//     beside the ledger, under its lock.
//   - refusals (refused.go): files refused for good, not read again until
//     they change, under its lock.
//   - keyring (trust.go), policyWatch (reload.go): keep the keys and the
//     policy in force in step with the home.
//   - collector (gc.go): what the agents no longer need, removed; it forgets
//     ledger entries only once they are final and past their expiry.
//
// Rooms read the ledger; only the Daemon moves an entry, through
// lifecycle.go. A room never calls back into the Daemon and never holds
// its lock while it calls another room: what follows from its work (a
// sweep after a policy change, a request to evaluate again) the Daemon
// does, or the scheduler queues.
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
