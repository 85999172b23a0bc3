package host

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/doctor"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/policy"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// Doctor checks a host's home: the checks of CheckHome, then the daemon,
// the policy and the agents' clocks. It only reads.
func Doctor(h *trust.Home, opt doctor.Options) []doctor.Finding {
	opt.Defaults()
	out := doctor.CheckHome(h, opt)
	if pid, ok := operator.DaemonRunning(h); ok {
		out = append(out, doctor.Finding{Check: "daemon", Severity: doctor.SeverityOK, Message: fmt.Sprintf("bridge serve is running (pid %d)", pid)})
	} else {
		out = append(out, doctor.Finding{Check: "daemon", Severity: doctor.SeverityWarn, Message: "bridge serve is not running: requests wait",
			Fix: "bridge service install (or run `bridge serve` yourself)"})
	}
	out = append(out, containmentFinding(h))
	// What a running daemon serves when the file is gone or broken: the
	// policy it loaded before (reload.go keeps it).
	served := ""
	if _, ok := operator.DaemonRunning(h); ok {
		if sha, err := os.ReadFile(h.Path("inbox", "policy.sha256")); err == nil && len(sha) >= 12 {
			served = fmt.Sprintf("; the running `bridge serve` keeps serving the policy it loaded before (sha256 %.12s)", sha)
		}
	}
	if _, err := os.Stat(h.Path(trust.PolicyName)); err != nil {
		msg := "no policy: nothing may run"
		if served != "" {
			msg = "the policy file is gone" + served
		}
		out = append(out, doctor.Finding{Check: "policy", Severity: doctor.SeverityProblem, Message: msg, Fix: "write " + h.Path(trust.PolicyName) + " and check it with `bridge policy check`"})
	} else if p, err := policy.Load(h.Path(trust.PolicyName)); err != nil {
		fix := "bridge policy check (it names the file and line); `bridge serve` refuses to start until it loads"
		if served != "" {
			fix = "bridge policy check (it names the file and line); the daemon takes the file once it loads"
		}
		out = append(out, doctor.Finding{Check: "policy", Severity: doctor.SeverityProblem, Message: fmt.Sprintf("the policy does not load: %v%s", err, served), Fix: fix})
	} else {
		out = append(out, doctor.Finding{Check: "policy", Severity: doctor.SeverityOK, Message: fmt.Sprintf("the policy loads (sha256 %.12s)", p.SHA256)})
	}

	out = append(out, folderFindings(h)...)

	// Requests a human must settle, and ids a repair found without a record.
	entries, err := operator.LedgerEntries(h)
	if err != nil {
		out = append(out, doctor.Finding{Check: "ledger", Severity: doctor.SeverityProblem, Message: fmt.Sprintf("the ledger cannot be read: %v", err),
			Fix: "stop `bridge serve`, then run `bridge ledger repair`"})
		return out
	}
	out = append(out, doctor.Finding{Check: "ledger", Severity: doctor.SeverityOK, Message: fmt.Sprintf("the ledger reads back: %d requests", len(entries))})
	out = append(out, uncertainFindings(h, entries)...)
	if _, ok := operator.DaemonRunning(h); !ok {
		out = append(out, cutOffFindings(h, entries)...)
	}

	// Clock skew: an agent's created time against the host's first sight.
	// The sync delay adds to it, so only the smallest difference of recent
	// requests says something about the clocks.
	sort.Slice(entries, func(i, j int) bool { return entries[i].FirstSeen.After(entries[j].FirstSeen) })
	peers, _ := h.Peers()
	keys := map[string][][]byte{}
	for _, p := range peers {
		for _, k := range p.Keys {
			keys[p.ID] = append(keys[p.ID], k.SignPub)
		}
	}
	best := map[string]time.Duration{}
	seen := 0
	for _, e := range entries {
		if seen == 50 {
			break
		}
		data, err := os.ReadFile(h.Path("manifests", e.Agent, e.ID+"."+bridge.ExtManifest))
		if err != nil {
			continue
		}
		var req bridge.Request
		if bridge.OpenBody(bcrypto.KindRequest, data, keys[e.Agent], &req) != nil {
			continue
		}
		seen++
		diff := time.Unix(req.Created, 0).Sub(e.FirstSeen.Truncate(time.Second))
		if b, ok := best[e.Agent]; !ok || diff.Abs() < b.Abs() {
			best[e.Agent] = diff
		}
	}
	names := map[string]string{}
	for _, p := range peers {
		names[p.ID] = p.Name
	}
	for _, agent := range slices.Sorted(maps.Keys(best)) {
		diff := best[agent]
		who := names[agent]
		if who == "" {
			who = agent
		}
		switch {
		case diff > opt.MaxSkew:
			out = append(out, doctor.Finding{Check: "clock-skew", Severity: doctor.SeverityWarn,
				Message: fmt.Sprintf("agent %s's clock runs %s ahead of the host's", who, diff.Round(time.Second)),
				Fix:     "enable NTP on both machines (timedatectl set-ntp true); requests from too far ahead are refused"})
		case -diff > opt.MaxSkew+10*time.Minute:
			out = append(out, doctor.Finding{Check: "clock-skew", Severity: doctor.SeverityWarn,
				Message: fmt.Sprintf("agent %s's requests reach the host %s after they were made", who, (-diff).Round(time.Second)),
				Fix:     "a slow sync or a host clock ahead: check the sync client and NTP (timedatectl)"})
		default:
			out = append(out, doctor.Finding{Check: "clock-skew", Severity: doctor.SeverityOK, Message: fmt.Sprintf("agent %s's clock agrees with the host's", who)})
		}
	}
	return out
}

// uncertainFindings lists the requests held uncertain for a human (a run a
// crash or a stop interrupted, a request whose ledger record was lost), and
// the ids a ledger repair found without a record.
func uncertainFindings(h *trust.Home, entries []LedgerEntry) []doctor.Finding {
	names := operator.AgentNames(h)
	var crashed, lost []string
	for _, e := range entries {
		if e.State != ledger.StateUncertain {
			continue
		}
		if e.Reason == string(bridge.ReasonRecordLost) {
			lost = append(lost, operator.RefName(names, e))
		} else {
			crashed = append(crashed, operator.RefName(names, e))
		}
	}
	var out []doctor.Finding
	if len(crashed) > 0 {
		out = append(out, doctor.Finding{Check: "uncertain", Severity: doctor.SeverityWarn,
			Message: fmt.Sprintf("%s interrupted while running, and may or may not have had %s effect: %s", plural(len(crashed), "request"), theirOrIts(len(crashed)), fewOf(crashed)),
			Fix:     "check each on this machine, then `bridge reconcile AGENT/ID --as done|failed|rerun`"})
	}
	if len(lost) > 0 {
		out = append(out, doctor.Finding{Check: "record-lost", Severity: doctor.SeverityWarn,
			Message: fmt.Sprintf("%s lost to the ledger (a repair or a restored backup) and came back: held, not run: %s", plural(len(lost), "request"), fewOf(lost)),
			Fix:     "the host admitted each before: check whether it ran, then `bridge reconcile AGENT/ID --as done|failed|rerun`"})
	}
	if data, err := os.ReadFile(h.Path(lostName)); err == nil {
		if n := len(strings.Fields(string(data))); n > 0 {
			out = append(out, doctor.Finding{Check: "record-lost", Severity: doctor.SeverityOK,
				Message: fmt.Sprintf("a ledger repair found requests without a record (%d, listed in %s); none of them runs if it comes back", n, h.Path(lostName))})
		}
	}
	if len(out) == 0 {
		out = append(out, doctor.Finding{Check: "uncertain", Severity: doctor.SeverityOK, Message: "no request waits for a human to settle it"})
	}
	return out
}

// cutOffFindings names the requests the ledger has as running while no
// daemon runs: a daemon stopped hard (a second signal, a crash, a power
// cut) in their midst, or a drained stop that left an idempotent op (or
// one with a reconcile command) for the next start, which settles them.
// (A claimed request only waits to start.)
func cutOffFindings(h *trust.Home, entries []LedgerEntry) []doctor.Finding {
	names := operator.AgentNames(h)
	var cut []string
	for _, e := range entries {
		if e.State == ledger.StateRunning {
			cut = append(cut, operator.RefName(names, e))
		}
	}
	if len(cut) == 0 {
		return nil
	}
	return []doctor.Finding{{Check: "cut-off", Severity: doctor.SeverityWarn,
		Message: fmt.Sprintf("%s running when bridge serve stopped: %s", plural(len(cut), "request"), fewOf(cut)),
		Fix:     "start `bridge serve`: it settles them (an idempotent op runs again, an op with a reconcile command is checked, any other is held uncertain for `bridge reconcile`)"}}
}

// plural counts requests in English, with the verb of a sentence that
// begins with them: "1 request was", "2 requests were".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing + " was"
	}
	return fmt.Sprintf("%d %ss were", n, thing)
}

// fewOf names the first few of a list, and how many more there are.
func fewOf(refs []string) string {
	if len(refs) <= 5 {
		return strings.Join(refs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(refs[:5], ", "), len(refs)-5)
}

// theirOrIts is the possessive for n things.
func theirOrIts(n int) string {
	if n == 1 {
		return "its"
	}
	return "their"
}
