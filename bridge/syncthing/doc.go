// Package syncthing is the bridge's client of a local Syncthing's REST API:
// the nudge that asks Syncthing to send a file the moment it is published
// ([Nudger]), the check that results can reach the agent
// ([Nudger.ResultsRoute]), and `bridge syncthing setup` ([Setup]), which
// finds the API key and the folders and shares a host's results directory as
// a folder of its own. The settings live in the home ([LoadConfig],
// [SaveConfig]); nothing here reads or writes the synced folder's files.
//
// Unlike the wire package, this one talks to a process and starts
// goroutines (a nudge is sent in the background, coalesced); a home holds a
// Nudger through the trust.Nudger interface.
package syncthing
