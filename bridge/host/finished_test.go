package host

import (
	"hash/fnv"
	"testing"

	"github.com/syncbridge/bridge/bridge"
)

// TestFinishedShareHash: a rescan checks the finished requests whose key
// hashes to its turn; fnv32a must be FNV-1a exactly as hash/fnv computes
// it, so that every key falls in one share and each is checked once every
// `shares` rescans.
func TestFinishedShareHash(t *testing.T) {
	for i := range 1000 {
		key := bridge.NewRequestID()[:i%33] + "/" + bridge.NewRequestID()
		h := fnv.New32a()
		h.Write([]byte(key))
		if got, want := fnv32a(key), h.Sum32(); got != want {
			t.Fatalf("fnv32a(%q) = %d, want %d", key, got, want)
		}
	}
	if got := fnv32a(""); got != 2166136261 {
		t.Fatalf("fnv32a(\"\") = %d, want the offset basis", got)
	}
}
