package host

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// A message the agent acked is collected after the grace; one it did not
// ack stays until the retention.
func TestMessagesCollectedOnceAcked(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	acked, err := Send(p.host, p.agent.Config.ID, "read me")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := Send(p.host, p.agent.Config.ID, "not yet")
	if err != nil {
		t.Fatal(err)
	}
	items, err := p.client.Inbox()
	if err != nil {
		t.Fatal(err)
	}
	var read []agent.InboxItem
	for _, it := range items {
		if it.ID == acked.ID {
			read = append(read, it)
		}
	}
	if len(read) != 1 {
		t.Fatalf("inbox: %+v", items)
	}
	if err := p.client.MarkSeen(read, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	rep, err := GC(p.host, GCOptions{Grace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	var collected []string
	for _, it := range rep.Items {
		if it.What == "message" {
			collected = append(collected, it.ID+"/"+it.Why)
		}
	}
	if !slices.Equal(collected, []string{acked.ID + "/acked"}) {
		t.Fatalf("collected %v; want only %s, acked", collected, acked.ID)
	}
	if _, err := os.Stat(filepath.Join(p.toAgent(), kept.ID+"."+bridge.ExtMessage)); err != nil {
		t.Fatalf("the unacked message was removed: %v", err)
	}
	// What stays is told, as results are (a new user's finding: the kept
	// summary left messages out): the unacked one, until its retention.
	rep, err = GC(p.host, GCOptions{Grace: time.Nanosecond, Retention: time.Hour, DryRun: true, Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(rep.Kept, func(k GCKept) bool { return k.What == keptMessage })
	if i < 0 || rep.Kept[i].Count != 1 || rep.Kept[i].Until == nil || time.Until(*rep.Kept[i].Until) < 50*time.Minute {
		t.Fatalf("kept: %+v; want one inbox message, until about an hour from now", rep.Kept)
	}
}
