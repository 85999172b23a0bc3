package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/trust"
)

// TestKeyedRetryFromRestoredAgentHome: an agent home restored from the files
// KEYS.md says to keep (no record of the requests it sent) retries a keyed
// request that the host answered already. The host refuses the new send as
// a replay and never runs it; the agent must take the earlier send's answer
// at once, not wait for an answer that never comes (a new user waited ten
// minutes).
func TestKeyedRetryFromRestoredAgentHome(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	first := p.run(t, agent.SubmitOptions{Host: "laptop", Op: "count", Key: "k1"})
	if err := p.client.Ack(first); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(t.TempDir(), "restored")
	must(t, os.MkdirAll(filepath.Join(dir, trust.PeersDir), 0o700))
	files := []string{"config.json", trust.IdentityName, trust.BundleName, bridge.IdempotencySecretName}
	peers, _ := filepath.Glob(p.agent.Path(trust.PeersDir, "*.json"))
	for _, f := range peers {
		files = append(files, filepath.Join(trust.PeersDir, filepath.Base(f)))
	}
	for _, f := range files {
		data, err := os.ReadFile(p.agent.Path(f))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, f), data, 0o600))
	}
	home, err := trust.OpenHome(dir)
	must(t, err)
	c, err := agent.OpenClient(home)
	must(t, err)
	defer c.Close()
	s, err := c.Submit(agent.SubmitOptions{Host: "laptop", Op: "count", Key: "k1"})
	must(t, err)
	if s.ID != first.Receipt.ID {
		t.Fatalf("the restored home's keyed id %s, the first %s", s.ID, first.Receipt.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := c.Wait(ctx, s.ID, nil)
	if err != nil {
		t.Fatalf("the retry's wait: %v", err)
	}
	if !out.Earlier || out.Receipt.Status != bridge.StatusDone || string(out.Stdout) != string(first.Stdout) {
		t.Fatalf("the retry got %s (earlier send %v) %q, want the first answer", out.Receipt.Status, out.Earlier, out.Stdout)
	}
	must(t, c.Ack(out))
	settleRescans(t, p.daemon)
	if n := testkit.Count(t, countFile, "run"); n != 1 {
		t.Fatalf("the op ran %d times", n)
	}
}

// A keyed retry restores its manifest when another writer's version took
// its name (a sync client's conflict resolution kept the other side's, an
// rclone --resync, a planted directory): without it the request would never
// be answered. The op runs once.
func TestKeyedRetryRestoresAnOverwrittenManifest(t *testing.T) {
	t.Parallel()
	for _, clobber := range []string{"junk", "directory"} {
		t.Run(clobber, func(t *testing.T) {
			p := newPair(t, testPolicy)
			countFile := filepath.Join(t.TempDir(), "count")
			s, err := p.client.Submit(agent.SubmitOptions{Host: "laptop", Op: "count", Key: "k1"})
			must(t, err)
			rel := filepath.Join(p.folder, bridge.RequestPath(p.host.Config.ID, p.agent.Config.ID, s.ID, bridge.ExtManifest))
			must(t, os.Remove(rel))
			if clobber == "junk" {
				must(t, os.WriteFile(rel, []byte("another writer's version"), 0o644))
			} else {
				must(t, os.MkdirAll(filepath.Join(rel, "x"), 0o755))
			}
			again, err := p.client.Submit(agent.SubmitOptions{Host: "laptop", Op: "count", Key: "k1"})
			must(t, err)
			if again.ID != s.ID {
				t.Fatalf("the retry's id %s, the first %s", again.ID, s.ID)
			}
			p.start(t, map[string]string{"COUNT_FILE": countFile})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := p.client.Wait(ctx, s.ID, nil)
			if err != nil {
				t.Fatalf("the keyed retry was never answered: %v", err)
			}
			if out.Receipt.Status != bridge.StatusDone {
				t.Fatalf("answer: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
			}
			settleRescans(t, p.daemon)
			if n := testkit.Count(t, countFile, "run"); n != 1 {
				t.Fatalf("the op ran %d times", n)
			}
		})
	}
}
