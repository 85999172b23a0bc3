package agent

import (
	"fmt"
	"slices"
	"testing"
)

// The agent's record of seen messages keeps the newest maxInboxSeen ids,
// not every id it ever saw.
func TestInboxSeenIsBounded(t *testing.T) {
	defer func(n int) { maxInboxSeen = n }(maxInboxSeen)
	maxInboxSeen = 5
	h := newHomes(t)
	var items []InboxItem
	for i := range 8 {
		items = append(items, InboxItem{ID: fmt.Sprintf("%032x", i)})
	}
	for _, it := range items {
		if err := h.client.MarkSeen([]InboxItem{it}, false); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for _, it := range items[3:] {
		want = append(want, it.ID)
	}
	if got := h.client.inboxState().Seen; !slices.Equal(got, want) {
		t.Fatalf("seen = %v, want the newest five %v", got, want)
	}
}
