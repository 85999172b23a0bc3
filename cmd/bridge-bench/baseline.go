//go:build linux

package main

import (
	"bufio"
	"crypto/rand"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The baseline is the reference design the issue compares against: the
// seed's Python bridge (its daemon and client modules), rebuilt here in Go
// after its described behaviour so that it runs on any machine the harness
// runs on. It runs as a process of its own (this binary again, see
// startBaseline), so its CPU, wake-ups and resident set are read exactly as
// the daemon's are.
//
// The worker, every poll tick: lists queue/*.json sorted by name and runs
// every file, one after another (it drains the whole queue), then sleeps
// the poll interval. Per request it checks the shared token, appends
// "received" to an append-only journal (open, write, fsync, close), checks
// the script's name and that it exists, writes an in-flight marker (temp
// file, fsync, rename), appends "started" (fsync), runs the script through
// bash with its output teed line by line into a progress file, writes the
// result as JSON by temp file and rename without fsync, appends
// "completed" with the result (fsync), removes the marker and the progress
// file and moves the request into processed/. At start it replays the
// journal into memory (the terminal state of each id, the results of
// idempotency keys). Four fsyncs per request, no signatures.
//
// The client writes its request by temp file and rename into queue/ and
// checks for results/<id>.json at once and then every poll interval (1 s
// by default).

const (
	baselineToken  = "bench-token"
	baselineScript = "scripts/echo.sh"
	// The script: the same trivial op as the bridge's echo op.
	baselineScriptText = "echo ok\n"
)

var baselineSafeName = regexp.MustCompile(`^scripts/[A-Za-z0-9_/.-]+\.(sh|py)$`)

type baselineRequest struct {
	ID      string   `json:"id"`
	Script  string   `json:"script"`
	Args    []string `json:"args"`
	Timeout int      `json:"timeout"`
	TS      float64  `json:"ts_submitted"`
	Token   string   `json:"token,omitempty"`
}

type baselineResult struct {
	ID          string  `json:"id"`
	ExitCode    int     `json:"exit_code"`
	Stdout      string  `json:"stdout"`
	Stderr      string  `json:"stderr"`
	Error       string  `json:"error,omitempty"`
	TSCompleted float64 `json:"ts_completed"`
}

type journalEvent struct {
	TS     float64         `json:"ts"`
	ID     string          `json:"id"`
	Event  string          `json:"event"`
	Key    string          `json:"idempotency_key,omitempty"`
	Script string          `json:"script,omitempty"`
	PID    int             `json:"pid,omitempty"`
	Result *baselineResult `json:"result,omitempty"`
}

var baselineDirs = []string{"queue", "results", "processed", "inflight", "progress", "scripts"}

// initBaselineRoot makes a fresh root with its directories and the script.
func initBaselineRoot(root string) error {
	for _, d := range baselineDirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(root, baselineScript), []byte(baselineScriptText), 0o700)
}

// baselineWorkerMain is the worker process: root and poll interval come
// from the environment; it prints "pid N" and "ready", serves until its
// standard input closes, and exits.
func baselineWorkerMain(root string) error {
	poll, err := time.ParseDuration(os.Getenv(childPollEnv))
	if err != nil {
		return err
	}
	w := &refWorker{root: root, terminal: map[string]string{}, idem: map[string]baselineResult{}}
	w.replay()
	w.recover()
	fmt.Printf("pid %d\n", os.Getpid())
	fmt.Println("ready 1")
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	for {
		names, _ := filepath.Glob(filepath.Join(root, "queue", "*.json"))
		slices.Sort(names)
		for _, n := range names {
			w.runOne(n)
		}
		select {
		case <-stop:
			return nil
		case <-time.After(poll):
		}
	}
}

type refWorker struct {
	root     string
	terminal map[string]string
	idem     map[string]baselineResult
}

func (w *refWorker) path(parts ...string) string {
	return filepath.Join(append([]string{w.root}, parts...)...)
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func (w *refWorker) journal(ev journalEvent) {
	ev.TS = now()
	line, _ := json.Marshal(ev)
	f, err := os.OpenFile(w.path("journal.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	f.Write(append(line, '\n'))
	f.Sync()
	f.Close()
}

// replay reads the journal into memory, as the reference does at start.
func (w *refWorker) replay() {
	f, err := os.Open(w.path("journal.log"))
	if err != nil {
		return
	}
	defer f.Close()
	keys := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev journalEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.ID == "" {
			continue
		}
		switch ev.Event {
		case "received":
			if ev.Key != "" {
				keys[ev.ID] = ev.Key
			}
		case "completed":
			w.terminal[ev.ID] = ev.Event
			if k := keys[ev.ID]; k != "" && ev.Result != nil {
				if _, ok := w.idem[k]; !ok {
					w.idem[k] = *ev.Result
				}
			}
		case "crashed_inflight", "idempotency_hit":
			w.terminal[ev.ID] = ev.Event
		}
	}
}

// recover settles in-flight markers left by a crash and archives queue
// files already answered, as the reference's start does.
func (w *refWorker) recover() {
	markers, _ := filepath.Glob(w.path("inflight", "*.running"))
	for _, m := range markers {
		id := strings.TrimSuffix(filepath.Base(m), ".running")
		if w.terminal[id] != "completed" {
			w.writeResult(baselineResult{ID: id, ExitCode: -4, Error: "crashed mid-execution"})
			w.journal(journalEvent{ID: id, Event: "crashed_inflight"})
		}
		os.Remove(m)
		os.Rename(w.path("queue", id+".json"), w.path("processed", id+".json"))
	}
	queued, _ := filepath.Glob(w.path("queue", "*.json"))
	slices.Sort(queued)
	for _, q := range queued {
		if w.terminal[strings.TrimSuffix(filepath.Base(q), ".json")] != "" {
			os.Rename(q, w.path("processed", filepath.Base(q)))
		}
	}
}

func (w *refWorker) writeResult(res baselineResult) {
	res.TSCompleted = now()
	data, _ := json.Marshal(res)
	out := w.path("results", res.ID+".json")
	if os.WriteFile(out+".tmp", data, 0o644) == nil {
		os.Rename(out+".tmp", out)
	}
}

func (w *refWorker) reject(p, id, why string) {
	w.writeResult(baselineResult{ID: id, ExitCode: -1, Error: why})
	os.Rename(p, w.path("processed", filepath.Base(p)))
}

func (w *refWorker) runOne(p string) {
	id := strings.TrimSuffix(filepath.Base(p), ".json")
	st, err := os.Stat(p)
	if err != nil {
		os.Remove(p)
		return
	}
	if st.Size() > 1<<20 {
		w.reject(p, id, "command file too large")
		return
	}
	data, err := os.ReadFile(p)
	var req baselineRequest
	if err != nil || json.Unmarshal(data, &req) != nil {
		os.Remove(p)
		return
	}
	if subtle.ConstantTimeCompare([]byte(req.Token), []byte(baselineToken)) != 1 {
		w.reject(p, id, "bridge token mismatch")
		return
	}
	w.journal(journalEvent{ID: id, Event: "received", Script: req.Script})
	if !baselineSafeName.MatchString(req.Script) {
		w.reject(p, id, "script path not allowed")
		return
	}
	scripts := w.path("scripts")
	full, err := filepath.EvalSymlinks(filepath.Join(scripts, strings.TrimPrefix(req.Script, "scripts/")))
	if err != nil || !strings.HasPrefix(full, scripts+string(filepath.Separator)) {
		w.reject(p, id, "script does not exist or escapes")
		return
	}
	argv := append([]string{"bash", full}, req.Args...)
	timeout := min(max(req.Timeout, 1), 600)
	env := os.Environ()
	if _, err := os.Stat(w.path(".env")); err == nil {
		// The reference merges a .env file of the root; the harness writes none.
		env = append(env, "BRIDGE_ENV_FILE=1")
	}

	// The in-flight marker, durable before the script starts.
	marker := w.path("inflight", id+".running")
	snap, _ := json.Marshal(map[string]any{"id": id, "pid": os.Getpid(), "started_ts": now(), "cmd": req})
	if f, err := os.OpenFile(marker+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err == nil {
		f.Write(snap)
		f.Sync()
		f.Close()
		os.Rename(marker+".tmp", marker)
	}
	w.journal(journalEvent{ID: id, Event: "started", PID: os.Getpid()})

	progress := w.path("progress", id+".log")
	res := runTeed(argv, w.root, env, time.Duration(timeout)*time.Second, progress)
	res.ID = id
	w.writeResult(res)
	w.journal(journalEvent{ID: id, Event: "completed", Result: &res})
	w.terminal[id] = "completed"
	os.Remove(marker)
	os.Remove(progress)
	os.Rename(p, w.path("processed", filepath.Base(p)))
}

// runTeed runs argv with its output captured and each line also appended
// to the progress file (opened for each line, as the reference does).
func runTeed(argv []string, dir string, env []string, timeout time.Duration, progress string) baselineResult {
	os.WriteFile(progress, nil, 0o644)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	stdout, err1 := cmd.StdoutPipe()
	stderr, err2 := cmd.StderrPipe()
	if err := errors.Join(err1, err2, cmd.Start()); err != nil {
		return baselineResult{ExitCode: -3, Error: err.Error()}
	}
	var outB, errB strings.Builder
	var wg sync.WaitGroup
	var mu sync.Mutex
	tee := func(r io.Reader, b *strings.Builder, prefix string) {
		defer wg.Done()
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				b.WriteString(line)
				mu.Lock()
				if f, err := os.OpenFile(progress, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
					f.WriteString(prefix + line)
					f.Close()
				}
				mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go tee(stdout, &outB, "")
	go tee(stderr, &errB, "[stderr] ")
	timer := time.AfterFunc(timeout, func() { cmd.Process.Kill() })
	wg.Wait()
	err := cmd.Wait()
	timer.Stop()
	res := baselineResult{Stdout: outB.String(), Stderr: errB.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode = ee.ExitCode()
	} else if err != nil {
		res.ExitCode, res.Error = -3, err.Error()
	}
	return res
}

// pyWorkerSource is the baseline's worker in Python, for the idle rows: it
// idles as the reference does (one thread, time.sleep between polls),
// where the Go worker pays the Go runtime's wake-ups around each tick.
//
//go:embed baseline_worker.py
var pyWorkerSource []byte

// baseline is a running worker process.
type baseline struct {
	root    string
	ch      *child
	pid     int
	version string // the Python worker's python3 version
	term    bool   // stopped by SIGTERM (the Python worker), not by closing its stdin
}

// startBaseline starts a worker process on root (made when missing).
func startBaseline(root string, poll time.Duration) (*baseline, error) {
	if _, err := os.Stat(filepath.Join(root, baselineScript)); err != nil {
		if err := initBaselineRoot(root); err != nil {
			return nil, err
		}
	}
	ch, err := startChild("baseline-worker", root, childPollEnv+"="+poll.String())
	if err != nil {
		return nil, err
	}
	return readyBaseline(&baseline{root: root, ch: ch})
}

// startPyBaseline starts the Python worker with python on root (made when
// missing), its source written into dir.
func startPyBaseline(python, dir, root string, poll time.Duration) (*baseline, error) {
	if _, err := os.Stat(filepath.Join(root, baselineScript)); err != nil {
		if err := initBaselineRoot(root); err != nil {
			return nil, err
		}
	}
	src := filepath.Join(dir, "baseline_worker.py")
	if err := os.WriteFile(src, pyWorkerSource, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(python, src, root, strconv.FormatFloat(poll.Seconds(), 'f', -1, 64), baselineToken)
	ch, err := startCmd(cmd)
	if err != nil {
		return nil, err
	}
	return readyBaseline(&baseline{root: root, ch: ch, term: true})
}

// readyBaseline reads a worker's first lines until it says it is ready.
func readyBaseline(b *baseline) (*baseline, error) {
	for l := range b.ch.lines {
		switch l[0] {
		case "version":
			b.version = l[1]
		case "pid":
			b.pid, _ = strconv.Atoi(l[1])
		case "ready":
			return b, nil
		}
	}
	_, err := b.ch.rest()
	return nil, fmt.Errorf("baseline worker ended early: %v", err)
}

func (b *baseline) stop() error {
	if b.term {
		b.ch.cmd.Process.Signal(syscall.SIGTERM)
	}
	_, err := b.ch.rest()
	return err
}

// newBaselineID is an id as the reference's client makes them: the Unix
// second and 8 random hex digits, so the queue sorts by second.
func newBaselineID() string {
	var r [4]byte
	rand.Read(r[:])
	return strconv.FormatInt(time.Now().Unix(), 10) + "_" + hex.EncodeToString(r[:])
}

// baselineSubmit writes a request into root's queue by temp and rename.
func baselineSubmit(root string) (string, error) {
	id := newBaselineID()
	data, _ := json.Marshal(baselineRequest{ID: id, Script: baselineScript, Args: []string{}, Timeout: 60, TS: now(), Token: baselineToken})
	p := filepath.Join(root, "queue", id+".json")
	if err := os.WriteFile(p+".tmp", data, 0o644); err != nil {
		return "", err
	}
	return id, os.Rename(p+".tmp", p)
}

// baselinePoll checks for the result at once and then every poll.
func baselinePoll(root, id string, poll, timeout time.Duration) error {
	p := filepath.Join(root, "results", id+".json")
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(p)
		if err == nil {
			var res baselineResult
			if err := json.Unmarshal(data, &res); err == nil {
				if res.ExitCode != 0 || res.Stdout != "ok\n" {
					return fmt.Errorf("baseline result %s: %s", id, data)
				}
				return nil
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		time.Sleep(poll)
	}
	return fmt.Errorf("baseline: no result for %s within %s", id, timeout)
}

// baselineRoundTrip submits and polls in this process.
func baselineRoundTrip(root string, poll time.Duration) (time.Duration, error) {
	start := time.Now()
	id, err := baselineSubmit(root)
	if err != nil {
		return 0, err
	}
	if err := baselinePoll(root, id, poll, 10*time.Minute); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// baselineClientMain is the client as a process of its own (one per
// request, like `bridge run`): submit, poll, print the output, exit.
func baselineClientMain(root string) error {
	poll, err := time.ParseDuration(os.Getenv(childPollEnv))
	if err != nil {
		return err
	}
	id, err := baselineSubmit(root)
	if err != nil {
		return err
	}
	if err := baselinePoll(root, id, poll, 10*time.Minute); err != nil {
		return err
	}
	fmt.Print("ok\n")
	return nil
}

// baselineClientProcess runs one request through a client process.
func baselineClientProcess(root string, poll time.Duration) (time.Duration, error) {
	cmd := exec.Command(selfExe())
	cmd.Env = append(os.Environ(), childEnv+"=baseline-client", childArgEnv+"="+root, childPollEnv+"="+poll.String())
	cmd.Stderr = os.Stderr
	start := time.Now()
	out, err := cmd.Output()
	d := time.Since(start)
	if err != nil || string(out) != "ok\n" {
		return 0, fmt.Errorf("baseline client: %q %v", out, err)
	}
	return d, nil
}

// fillBaseline leaves root as the worker leaves it after n finished
// requests: a journal with received, started and completed for each, the
// result and the processed request. It writes them directly (no script
// run, no fsync): only the state is wanted, for the idle rows.
func fillBaseline(root string, n int) error {
	if err := initBaselineRoot(root); err != nil {
		return err
	}
	j, err := os.OpenFile(filepath.Join(root, "journal.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer j.Close()
	bw := bufio.NewWriter(j)
	for i := range n {
		id := fmt.Sprintf("%d_%08x", time.Now().Unix(), i)
		req, _ := json.Marshal(baselineRequest{ID: id, Script: baselineScript, Args: []string{}, Timeout: 60, TS: now(), Token: baselineToken})
		res := baselineResult{ID: id, Stdout: "ok\n", TSCompleted: now()}
		resData, _ := json.Marshal(res)
		for _, ev := range []journalEvent{{ID: id, Event: "received", Script: baselineScript}, {ID: id, Event: "started", PID: 1}, {ID: id, Event: "completed", Result: &res}} {
			ev.TS = now()
			line, _ := json.Marshal(ev)
			bw.Write(append(line, '\n'))
		}
		if err := errors.Join(os.WriteFile(filepath.Join(root, "results", id+".json"), resData, 0o644),
			os.WriteFile(filepath.Join(root, "processed", id+".json"), req, 0o644)); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// selfExe is this binary, for children started under strace (where
// /proc/self/exe would name strace).
func selfExe() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return "/proc/self/exe"
}
