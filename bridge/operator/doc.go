// Package operator holds the host operator's commands that act on a host's
// home without the daemon's code: approve and deny (an order the running
// daemon carries out, or its next start), pending (what waits for a human,
// with the kept input an approval is bound to), the ledger's listing and
// its request references (AGENT/ID), policy check and explain, and the
// presets of `policy init`. It reads the ledger only as a snapshot (a
// running daemon is not disturbed) and writes only orders, in the home,
// never the folder.
//
// The formats it shares with the daemon (package host, which imports it;
// operator never imports host):
//
//   - The orders in the home's control directory ([Order], [WriteOrder]):
//     written by this package (approve, deny) and by host's commands that
//     find a daemon running (reconcile, gc); read and removed by the
//     daemon's control loop. Audit lines of key actions travel as orders
//     of host's own (control/audit-*.json).
//   - The kept approval inputs ([ApprovalInputPath]) and manifests
//     ([KeptManifestPath]): written by the daemon, read here.
//   - serve.lock's pid ([DaemonRunning]): written by the daemon, read here.
//
// Reconcile and gc stay in host: with no daemon running they settle and
// collect with the daemon's own code. A new command that decides about a
// request leaves an order too: the daemon needs a case for it in its
// control loop and, if the request's state changes, an event of the
// lifecycle table (host's lifecycle.go, DESIGN §6) and its row in DESIGN.
package operator
