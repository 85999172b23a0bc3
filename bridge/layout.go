package bridge

import (
	"path"
	"strconv"
)

// Folder layout (SPEC §5). Every name the protocol uses comes from these pure
// functions; nothing else builds paths into the synced folder.
//
//	bridge.folder                               marker (syncsafe.MarkerName)
//	hosts/<host>/host.bundle                    host identity          (host writes)
//	hosts/<host>/rotate-<seq>.rotation          host key rotations     (host writes)
//	hosts/<host>/to-host/<agent>/agent.bundle   agent identity         (agent writes)
//	hosts/<host>/to-host/<agent>/rotate-<seq>.rotation                 (agent writes)
//	hosts/<host>/to-host/<agent>/<id>.manifest|.payload|.cancel|.ack   (agent writes)
//	hosts/<host>/to-agent/<agent>/<id>.result|.output                  (host writes)
//	hosts/<host>/to-agent/<agent>/<id>.message  inbox messages         (host writes)
//	hosts/<host>/to-agent/<agent>/<id>.progress-<n>  output while it runs (host writes)
//	hosts/<host>/to-agent/<agent>/ops.catalog   the ops this agent may run (host writes)
//	hosts/<host>/to-agent/<agent>/host.liveness when the host last ran, signed (host writes)
const (
	hostsDir        = "hosts"
	toHostDir       = "to-host"
	toAgentDir      = "to-agent"
	hostBundleName  = "host.bundle"
	catalogName     = "ops.catalog"
	AgentBundleName = "agent.bundle"
)

// HostsRoot is the folder's directory of hosts: hosts/<host> each.
const HostsRoot = hostsDir

// File kinds under to-host (agent writes) and to-agent (host writes).
const (
	ExtManifest = "manifest"
	ExtPayload  = "payload"
	ExtCancel   = "cancel"
	ExtAck      = "ack"
	ExtResult   = "result"
	ExtOutput   = "output"
	ExtMessage  = "message"
)

// HostDir is the tree of one host.
func HostDir(host string) string { return path.Join(hostsDir, host) }

// HostBundlePath is where a host publishes its bundle.
func HostBundlePath(host string) string { return path.Join(hostsDir, host, hostBundleName) }

// CatalogPath is where a host publishes, for one agent, the signed catalog
// of the ops that agent may run.
func CatalogPath(host, agent string) string { return path.Join(ToAgentDir(host, agent), catalogName) }

// ToHostRoot is the directory that holds one host's agent directories.
func ToHostRoot(host string) string { return path.Join(hostsDir, host, toHostDir) }

// ToHostDir is the directory one agent writes for one host.
func ToHostDir(host, agent string) string { return path.Join(hostsDir, host, toHostDir, agent) }

// ToAgentRoot is the directory that holds one host's directories for its
// agents.
func ToAgentRoot(host string) string { return path.Join(hostsDir, host, toAgentDir) }

// ToAgentDir is the directory one host writes for one agent.
func ToAgentDir(host, agent string) string { return path.Join(hostsDir, host, toAgentDir, agent) }

// AgentBundlePath is where an agent publishes its bundle for a host.
func AgentBundlePath(host, agent string) string {
	return path.Join(ToHostDir(host, agent), AgentBundleName)
}

// RequestPath names a file of a request under to-host (ext: manifest,
// payload, cancel, ack).
func RequestPath(host, agent, id, ext string) string {
	return path.Join(ToHostDir(host, agent), id+"."+ext)
}

// ResultPath names a file of a result under to-agent (ext: result, output).
func ResultPath(host, agent, id, ext string) string {
	return path.Join(ToAgentDir(host, agent), id+"."+ext)
}

// RotationName is the file name of the rotation statement with sequence seq.
func RotationName(seq uint64) string { return "rotate-" + strconv.FormatUint(seq, 10) + ".rotation" }

// ParseToHostName splits a file name found under to-host into request id and
// kind. Anything else (sync-client temps, conflict copies, litter) is not ours.
func ParseToHostName(name string) (id, ext string, ok bool) {
	return parseIDName(name, ExtManifest, ExtPayload, ExtCancel, ExtAck)
}

// ParseToAgentName is ParseToHostName for to-agent.
func ParseToAgentName(name string) (id, ext string, ok bool) {
	return parseIDName(name, ExtResult, ExtOutput, ExtMessage)
}

// parseIDName splits "<32 lower-case hex>.<ext>" for one of exts. By hand,
// not by regular expression: a rescan parses every name in the folder
// (SPEC §5 gives the patterns; TestLayoutNames checks both agree).
func parseIDName(name string, exts ...string) (id, ext string, ok bool) {
	if len(name) < 34 || name[32] != '.' || !ValidID(name[:32]) {
		return "", "", false
	}
	for _, e := range exts {
		if name[33:] == e {
			return name[:32], e, true
		}
	}
	return "", "", false
}

// ValidID reports whether s has the form of a request id.
func ValidID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
