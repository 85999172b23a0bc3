package syncthing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// Ping sends the API key only to what answers as Syncthing does: a
// server that is not Syncthing (one that answers anything with 200) gets
// no key and does not turn doctor green (the red team of e587665). One
// that imitates Syncthing's answers on purpose is DESIGN's port squatter.
func TestNudgerPingSendsTheKeyOnlyToWhatAnswersAsSyncthing(t *testing.T) {
	var keys atomic.Int64
	squatter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != "" {
			keys.Add(1)
		}
		w.WriteHeader(http.StatusOK) // answers anything with 200
	}))
	defer squatter.Close()
	n, err := NewNudger(squatter.URL, "SECRETKEY", "bridge", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "not Syncthing") {
		t.Fatalf("a squatter: %v", err)
	}
	if keys.Load() != 0 {
		t.Fatal("the key was sent to what is not Syncthing")
	}
	syncthing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/rest/noauth/health":
			w.Write([]byte(`{"status": "OK"}`))
		case r.URL.Path == "/rest/system/ping" && r.Header.Get("X-API-Key") == "SECRETKEY":
			w.Write([]byte(`{"ping": "pong"}`))
		default:
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	defer syncthing.Close()
	if n, err = NewNudger(syncthing.URL, "SECRETKEY", "bridge", nil); err != nil {
		t.Fatal(err)
	}
	if err := n.Ping(context.Background()); err != nil {
		t.Fatalf("Syncthing: %v", err)
	}
	if n, _ = NewNudger(syncthing.URL, "WRONG", "bridge", nil); n.Ping(context.Background()) == nil {
		t.Fatal("a wrong key answered as fine")
	}
}
