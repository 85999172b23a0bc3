package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
)

// WaitAll takes each answer once, as the folder's events bring it: the
// events reach it on the watch's goroutines and its own loop looks at the
// requests they name (the race detector runs this; the CLI scripts that
// wait for many ids do not run under it). Its full looks, for events lost,
// come on a backoff: the answers land just after one, once they are a
// second or more apart, and must all be taken before the next (a full look
// is a counted event: WaitAll ticks after each). An answer's file written
// again is not taken again; an id sent twice is waited for once, an id
// never sent is refused at once, and a request still unanswered when the
// wait is given up is what it returns.
func TestWaitAllTakesEachAnswerOnce(t *testing.T) {
	h := newHomes(t)
	h.client.fullLooksEvery = 10 * time.Second
	var sent []*Sent
	for range 20 {
		s, err := h.client.Submit(SubmitOptions{Op: "echo"})
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, s)
	}
	ids := []string{"0123456789abcdef0123456789abcdef"} // never sent
	for _, s := range sent {
		ids = append(ids, s.ID)
	}
	ids = append(ids, sent[0].ID) // twice

	var (
		mu    sync.Mutex
		got   = map[string]int{}
		bad   []string
		ticks []time.Duration // the time waited at each full look
	)
	ticked := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type end struct {
		left []string
		err  error
	}
	done := make(chan end, 1)
	go func() {
		left, err := h.client.WaitAll(ctx, ids, func(id string, out *Outcome, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				bad = append(bad, id)
				return
			}
			if out.Receipt.Status != bridge.StatusDone {
				t.Errorf("%s: status %s", id, out.Receipt.Status)
			}
			out.Close()
			got[id]++
		}, func(elapsed time.Duration) {
			mu.Lock()
			ticks = append(ticks, elapsed)
			mu.Unlock()
			select {
			case ticked <- struct{}{}:
			default:
			}
		})
		done <- end{left, err}
	}()
	nTicks := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ticks)
	}
	// Once the first full look is over, the next is 5 s or more away
	// (fullLooksEvery, randomised by half at most): time for the answers
	// to be taken by their events even on a loaded machine, where waiting
	// for full looks a second apart, as before, left as little as half a
	// second (seen once beside a red team's tests).
	select {
	case <-ticked:
	case <-time.After(60 * time.Second):
		t.Fatal("no full look within a minute")
	}
	// The watches are armed after the first full look: an answer before
	// them would wait for the next full look.
	waitUntil(t, "the watches armed", func() bool { return h.client.waits.watches.Load() > 0 })
	before := nTicks()
	for _, s := range sent[:len(sent)-1] {
		h.publishResult(t, s, bridge.StatusDone)
	}
	last := sent[len(sent)-1].ID
	waitUntil(t, "the answers published", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(sent)-1
	})
	if n := nTicks(); n != before {
		t.Errorf("the answers were taken by %d full looks, not by the folder's events", n-before)
	}
	// The answers' files written again, as a sync client may: events for
	// requests already answered. They are taken before the next full look.
	dir := filepath.Join(h.folder, bridge.ToAgentDir(sent[0].Host, h.agent.Config.ID))
	for _, s := range sent[:len(sent)-1] {
		p := filepath.Join(dir, s.ID+"."+bridge.ExtResult)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	again := nTicks()
	waitUntil(t, "the next full look", func() bool { return nTicks() > again })
	cancel()
	e := <-done
	if !errors.Is(e.err, context.Canceled) || !slices.Equal(e.left, []string{last}) {
		t.Errorf("given up: left %v, err %v; want [%s], context.Canceled", e.left, e.err, last)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range got {
		if n != 1 {
			t.Errorf("%s taken %d times, want once", id, n)
		}
	}
	if got[last] != 0 {
		t.Errorf("the unanswered %s was taken", last)
	}
	if !slices.Equal(bad, []string{ids[0]}) {
		t.Errorf("refused %v, want only the id never sent, %s", bad, ids[0])
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// WaitAll over requests to two hosts: the answer of one is given as it
// comes while the other's host has not answered, and the other's is given
// once its host answers (until now every test's home knew one host).
func TestWaitAllOverTwoHosts(t *testing.T) {
	h := newHomes(t)
	desk, err := trust.InitHome(filepath.Join(t.TempDir(), "desk"), "host", "desk", h.folder)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := desk.Trust(h.agent.BundleText(), "cloud-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.agent.Trust(desk.BundleText(), "desk"); err != nil {
		t.Fatal(err)
	}
	c, err := OpenClient(h.agent) // knows both hosts
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h.client = c
	toLaptop, err := c.Submit(SubmitOptions{Host: "laptop", Op: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	toDesk, err := c.Submit(SubmitOptions{Host: "desk", Op: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	h.publishResultWith(t, toLaptop, bridge.StatusDone, []byte("from the laptop\n"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var answers []string
	watches := c.waits.watches.Load()
	left, err := c.WaitAll(ctx, []string{toLaptop.ID, toDesk.ID}, func(id string, out *Outcome, err error) {
		if err != nil {
			t.Errorf("%s: %v", id, err)
			return
		}
		answers = append(answers, id+": "+string(out.Stdout))
		out.Close()
		cancel() // the laptop's answer is in: stop waiting for the desk's
	}, nil)
	if !errors.Is(err, context.Canceled) || !slices.Equal(left, []string{toDesk.ID}) || !slices.Equal(answers, []string{toLaptop.ID + ": from the laptop\n"}) {
		t.Fatalf("the first wait: left %v, %v; answers %q", left, err, answers)
	}
	// The laptop's answer came at the first look, before any watch was
	// armed: none was, for either host.
	if got := c.waits.watches.Load() - watches; got != 0 {
		t.Fatalf("the first wait armed %d watches", got)
	}
	// The desk answers while the second wait runs (published as the
	// laptop's answer, there already, is given): a watch of each host's
	// directory, or the next full look, brings it.
	hd := *h
	hd.host = desk
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	answers = nil
	left, err = c.WaitAll(ctx, []string{toLaptop.ID, toDesk.ID}, func(id string, out *Outcome, err error) {
		if err != nil {
			t.Errorf("%s: %v", id, err)
			return
		}
		answers = append(answers, id+": "+string(out.Stdout))
		out.Close()
		if id == toLaptop.ID {
			hd.publishResultWith(t, toDesk, bridge.StatusDone, []byte("from the desk\n"))
		}
	}, nil)
	slices.Sort(answers)
	want := []string{toLaptop.ID + ": from the laptop\n", toDesk.ID + ": from the desk\n"}
	slices.Sort(want)
	if err != nil || len(left) != 0 || !slices.Equal(answers, want) {
		t.Fatalf("the second wait: left %v, %v; answers %q", left, err, answers)
	}
}
