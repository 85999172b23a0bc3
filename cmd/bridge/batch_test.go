package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// bridgeIn runs the command line in this process and returns its exit code,
// standard output and standard error.
func bridgeIn(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := realMain(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// pairedCLIHomes is pairedHomes with each home trusting the other, and
// the agent's home directory and the folder.
func pairedCLIHomes(t *testing.T) (agentHome, folder string) {
	folder, h, a := pairedHomes(t)
	if _, err := h.Trust(a.BundleText(), "cloud-1"); err != nil {
		t.Fatal(err)
	}
	return a.Dir, folder
}

// A batch of 10,000 on standard input with malformed lines among them:
// each bad line is refused with its number, the rest are sent once each,
// and the same batch sent again (every good line keyed) sends nothing new.
// Under the race detector 1,500 (test.sh runs the 10,000 without it): still
// more than the reader's 64 KiB buffer, refilled while lines are worked on,
// and the line over the longest a batch takes.
func TestSubmitBatchTenThousand(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a system suite: -short leaves it out (docs/TESTING.md, \"Running\")")
	}
	agentHome, folder := pairedCLIHomes(t)
	n := 10000
	if raceBuild {
		n = 1500
	}
	var in strings.Builder
	bad := map[int]string{}
	for i := 1; i <= n; i++ {
		switch {
		case i%1000 == 7:
			in.WriteString(`{"op": "echo", "args": {"msg": "cut short` + "\n")
			bad[i] = "not a request"
		case i%1000 == 500:
			in.WriteString(`{"op": "echo", "arg": {"msg": "misspelt"}}` + "\n")
			bad[i] = `unknown field "arg"`
		case i == n/4:
			in.WriteString(`{"args": {}}` + "\n")
			bad[i] = `no "op"`
		case i == 2*n/5:
			in.WriteString(`{"op": "echo", "ttl": "forever"}` + "\n")
			bad[i] = `ttl "forever"`
		case i == 3*n/5:
			in.WriteString(`{"op": "echo", "stdin": "` + strings.Repeat("x", maxBatchLine) + `"}` + "\n")
			bad[i] = "longer than"
		case i == 4*n/5:
			in.WriteString("   \n") // blank: no request, and no refusal
		default:
			fmt.Fprintf(&in, `{"op": "echo", "args": {"msg": "m%d"}, "key": "k%d"}`+"\n", i, i)
		}
	}
	good := n - len(bad) - 1

	send := func() map[int]string {
		code, out, errOut := bridgeIn(t, in.String(), "--home", agentHome, "--json", "submit", "--batch")
		if code != exitUsage {
			t.Fatalf("exit %d, want %d (the first refused line's)\n%s", code, exitUsage, errOut)
		}
		ids := map[int]string{}
		refused := map[int]string{}
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var v struct {
				Line  int    `json:"line"`
				ID    string `json:"id"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				t.Fatalf("not a JSON line: %q", sc.Text())
			}
			if v.Error != "" {
				refused[v.Line] = v.Error
			} else {
				ids[v.Line] = v.ID
			}
		}
		for line, why := range bad {
			if !strings.Contains(refused[line], why) {
				t.Errorf("line %d refused with %q, want %q", line, refused[line], why)
			}
			if !strings.Contains(errOut, fmt.Sprintf("bridge: error: line %d: ", line)) {
				t.Errorf("standard error does not name line %d", line)
			}
		}
		if len(refused) != len(bad) || len(ids) != good {
			t.Fatalf("%d refused, %d sent; want %d and %d", len(refused), len(ids), len(bad), good)
		}
		return ids
	}
	first := send()
	manifests := func() int {
		count := 0
		filepath.WalkDir(folder, func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(p, ".manifest") {
				count++
			}
			return nil
		})
		return count
	}
	distinct := map[string]bool{}
	for _, id := range first {
		distinct[id] = true
	}
	if len(distinct) != good || manifests() != good {
		t.Fatalf("%d distinct ids, %d manifests in the folder, for %d good lines", len(distinct), manifests(), good)
	}
	again := send()
	for line, id := range first {
		if again[line] != id {
			t.Fatalf("line %d: %s, then %s on the second send", line, id, again[line])
		}
	}
	if got := manifests(); got != good {
		t.Fatalf("%d manifests after the batch was sent again, want %d: something was sent twice", got, good)
	}
}
