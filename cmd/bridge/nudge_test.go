package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/syncbridge/bridge/bridge"
)

// A command that exits right after its last write has sent that write's
// nudge when it returns: bridge submit, as a process per request, used to
// exit before the nudge's 2 ms coalescing ran out.
func TestShortCommandSendsItsNudge(t *testing.T) {
	var mu sync.Mutex
	var subs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		subs = append(subs, r.URL.Query()["sub"]...)
		mu.Unlock()
	}))
	defer srv.Close()
	_, h, a := pairedHomes(t)
	t.Setenv("BRIDGE_SYNCTHING_API", srv.URL)
	t.Setenv("BRIDGE_SYNCTHING_KEY", "k")
	t.Setenv("BRIDGE_SYNCTHING_FOLDER", "bridge")
	var out strings.Builder
	if code := realMain([]string{"--home", a.Dir, "submit", "--no-check", "echo", "msg=hi"}, strings.NewReader(""), &out, io.Discard); code != 0 {
		t.Fatalf("submit exited %d: %s", code, out.String())
	}
	id := strings.TrimSpace(out.String())
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(subs, bridge.RequestPath(h.Config.ID, a.Config.ID, id, bridge.ExtManifest)) {
		t.Fatalf("submit returned before its nudge was sent: %v", subs)
	}
}
