// Package doctor checks a home the way `bridge doctor` reports it: the
// folder and its marker, the home outside the folder and private, keys and
// peers, the Syncthing nudge and the results route, rclone's bisync state.
// [CheckHome] returns [Finding]s; the host adds its own checks (the ledger,
// the policy, containment) in package host, and the command line prints
// them.
package doctor
