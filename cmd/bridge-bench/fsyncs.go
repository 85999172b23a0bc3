//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/syncbridge/bridge/bridge"
)

// The fsync section counts the calls that flush to the disk, with strace,
// per round trip: all of them, and those on the path the user waits on.

const syncCalls = "fsync,fdatasync,sync_file_range,syncfs,msync"

// fsyncCount is the outcome for one path.
type fsyncCount struct {
	n                      int
	total, waited          float64 // per round trip
	serverWait, clientWait float64 // per round trip, of waited
	// serverBefore: the server's syncs before its rename of the result's
	// manifest into the folder, the moment the agent can see the answer;
	// the rest of its syncs in the window run beside the client's checks.
	serverBefore float64
	before       bool // serverBefore was measured
	note         string
}

func (f fsyncCount) String() string {
	if f.note != "" {
		return f.note
	}
	if f.n == 0 {
		return "not measured"
	}
	s := fmt.Sprintf("%.1f per round trip; %.1f on the path the user waits on (server %.1f, client %.1f)", f.total, f.waited, f.serverWait, f.clientWait)
	if f.before {
		s += fmt.Sprintf("; of those, before the result is in the folder: %.1f (server %.1f, client %.1f)", f.serverBefore+f.clientWait, f.serverBefore, f.clientWait)
	}
	return s
}

// traceEvent is a line of strace -ttt output.
type traceEvent struct {
	ts   float64 // seconds since the epoch, at the call's start
	call string  // the syscall's name
	arg0 string  // its first argument as printed
	args string  // every argument as printed
}

// readTrace parses a strace -f -ttt output file; calls resumed from an
// earlier line are counted at their start.
func readTrace(file string) ([]traceEvent, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var evs []traceEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// "[PID] TS CALL(ARGS) = RET"; strace pads the pid with spaces.
		line := strings.TrimLeft(sc.Text(), " ")
		tok, rest, _ := strings.Cut(line, " ")
		if _, err := strconv.Atoi(tok); err == nil && !strings.Contains(tok, ".") {
			tok, rest, _ = strings.Cut(strings.TrimLeft(rest, " "), " ")
		}
		ts, err := strconv.ParseFloat(tok, 64)
		if err != nil {
			continue
		}
		name, args, ok := strings.Cut(rest, "(")
		if !ok || strings.HasPrefix(rest, "<...") || strings.HasPrefix(rest, "---") || strings.HasPrefix(rest, "+++") {
			continue
		}
		arg0, _, _ := strings.Cut(args, ",")
		arg0, _, _ = strings.Cut(arg0, " ") // "5 <unfinished ...>"
		evs = append(evs, traceEvent{ts: ts, call: name, arg0: strings.TrimRight(arg0, ")"), args: args})
	}
	return evs, sc.Err()
}

func isSync(call string) bool { return strings.Contains(","+syncCalls+",", ","+call+",") }

// countSyncs counts the sync calls of evs in [from, to].
func countSyncs(evs []traceEvent, from, to float64) int {
	n := 0
	for _, e := range evs {
		if isSync(e.call) && e.ts >= from && e.ts <= to {
			n++
		}
	}
	return n
}

// renameCalls are traced beside the syncs on the server, to find when a
// result's manifest lands in the folder.
const renameCalls = "rename,renameat,renameat2"

// published is the time of the first rename of a result manifest into the
// folder in [from, to] (the folder's renames go through a directory's
// descriptor; the home's private copies are renamed by path), or to.
func published(evs []traceEvent, from, to float64) float64 {
	for _, e := range evs {
		if e.ts < from || e.ts > to || !strings.HasPrefix(e.call, "rename") || e.arg0 == "AT_FDCWD" {
			continue
		}
		if strings.Contains(e.args, "."+bridge.ExtResult+`"`) {
			return e.ts
		}
	}
	return to
}

// attached is strace attached to a running process.
type attached struct {
	cmd  *exec.Cmd
	file string
}

// straceAttach attaches strace to every thread of pid (and the children it
// starts from now on), writing to file, and returns once it is attached.
func straceAttach(strace string, pid int, file, calls string) (*attached, error) {
	cmd := exec.Command(strace, "-f", "-ttt", "-e", "trace="+calls, "-o", file, "-p", strconv.Itoa(pid))
	errp, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(errp)
		said := false
		for sc.Scan() {
			if !said && strings.Contains(sc.Text(), "attached") {
				said = true
				ready <- nil
			}
		}
		if !said {
			ready <- fmt.Errorf("strace -p %d did not attach", pid)
		}
		io.Copy(io.Discard, errp)
	}()
	select {
	case err := <-ready:
		if err != nil {
			cmd.Wait()
			return nil, err
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("strace -p %d did not attach in 30 s", pid)
	}
	time.Sleep(200 * time.Millisecond) // every thread
	return &attached{cmd: cmd, file: file}, nil
}

// detach stops strace (it detaches on SIGINT) and reads what it wrote.
func (a *attached) detach() ([]traceEvent, error) {
	a.cmd.Process.Signal(syscall.SIGINT)
	a.cmd.Wait()
	return readTrace(a.file)
}

// fsyncRun counts for `bridge run` processes: serve under strace -p, each
// run under strace of its own; a run's waited path is from its execve to
// its first write to standard output (the op's output).
func (u *users) fsyncRun(base string) (fsyncCount, error) {
	dir := filepath.Join(base, "strace-run")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fsyncCount{}, err
	}
	// One run first, not counted: a home's first call to a host keeps the
	// host's catalog (its file and directory fsynced, once per catalog
	// the host signs), which the sections before this one did when they
	// ran; -skip may have left them out.
	if out, err := exec.Command(u.bin, "--home", u.l.agent.Dir, "run", echoOp).Output(); err != nil || string(out) != "ok\n" {
		return fsyncCount{}, fmt.Errorf("bridge run: %q %v", out, err)
	}
	at, err := straceAttach(u.strace, u.serve.pid, filepath.Join(dir, "serve.trace"), syncCalls+","+renameCalls)
	if err != nil {
		return fsyncCount{}, err
	}
	type win struct{ from, to, end float64 }
	var wins []win
	clientTotal, clientWait := 0, 0
	for i := range u.c.fsyncN {
		time.Sleep(u.pause())
		file := filepath.Join(dir, fmt.Sprintf("run-%d.trace", i))
		cmd := exec.Command(u.strace, "-f", "-ttt", "-e", "trace=execve,write,"+syncCalls, "-o", file,
			u.bin, "--home", u.l.agent.Dir, "run", echoOp)
		out, err := cmd.Output()
		if err != nil || string(out) != "ok\n" {
			at.detach()
			return fsyncCount{}, fmt.Errorf("strace bridge run: %q %v", out, err)
		}
		evs, err := readTrace(file)
		if err != nil || len(evs) == 0 {
			at.detach()
			return fsyncCount{}, fmt.Errorf("read %s: %v (%d lines)", file, err, len(evs))
		}
		w := win{from: evs[0].ts, end: evs[len(evs)-1].ts}
		w.to = w.end
		for _, e := range evs {
			if e.call == "write" && e.arg0 == "1" {
				w.to = e.ts
				break
			}
		}
		wins = append(wins, w)
		clientTotal += countSyncs(evs, 0, w.end)
		clientWait += countSyncs(evs, 0, w.to)
	}
	time.Sleep(time.Second) // what serve does after the last run
	sevs, err := at.detach()
	if err != nil {
		return fsyncCount{}, err
	}
	serverWait, serverBefore := 0, 0
	for _, w := range wins {
		serverWait += countSyncs(sevs, w.from, w.to)
		serverBefore += countSyncs(sevs, w.from, published(sevs, w.from, w.to))
	}
	serverTotal := countSyncs(sevs, wins[0].from, wins[len(wins)-1].end+1)
	f := perRT(len(wins), serverTotal, clientTotal, serverWait, clientWait)
	f.serverBefore, f.before = float64(serverBefore)/float64(len(wins)), true
	return f, nil
}

func perRT(n, serverTotal, clientTotal, serverWait, clientWait int) fsyncCount {
	f := float64(n)
	return fsyncCount{n: n, total: float64(serverTotal+clientTotal) / f, waited: float64(serverWait+clientWait) / f,
		serverWait: float64(serverWait) / f, clientWait: float64(clientWait) / f}
}

// fsyncLib counts for the library: the client in a child process of its
// own under strace, serve under strace -p; a round trip's waited path is
// from Submit to Wait's return, as the child reports them.
func (u *users) fsyncLib(base string) (fsyncCount, error) {
	dir := filepath.Join(base, "strace-lib")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fsyncCount{}, err
	}
	at, err := straceAttach(u.strace, u.serve.pid, filepath.Join(dir, "serve.trace"), syncCalls+","+renameCalls)
	if err != nil {
		return fsyncCount{}, err
	}
	cfile := filepath.Join(dir, "client.trace")
	ch, err := startChildUnder([]string{u.strace, "-f", "-ttt", "-e", "trace=" + syncCalls, "-o", cfile}, "libclient", u.l.agent.Dir,
		childNEnv+"="+strconv.Itoa(u.c.fsyncN), childPollEnv+"="+u.c.pause.String(), childSeedEnv+"="+strconv.FormatUint(u.c.seed, 10))
	if err != nil {
		at.detach()
		return fsyncCount{}, err
	}
	type win struct{ from, to float64 }
	var wins []win
	for l := range ch.lines {
		if l[0] != "rt" {
			continue
		}
		a, b, _ := strings.Cut(l[1], " ")
		from, _ := strconv.ParseInt(a, 10, 64)
		to, _ := strconv.ParseInt(b, 10, 64)
		wins = append(wins, win{float64(from) / 1e9, float64(to) / 1e9})
	}
	_, cerr := ch.rest()
	time.Sleep(time.Second)
	sevs, err := at.detach()
	if cerr != nil || err != nil || len(wins) == 0 {
		return fsyncCount{}, fmt.Errorf("library under strace: %v %v, %d round trips", cerr, err, len(wins))
	}
	u.unack += len(wins)
	cevs, err := readTrace(cfile)
	if err != nil {
		return fsyncCount{}, err
	}
	serverWait, clientWait, serverBefore := 0, 0, 0
	for _, w := range wins {
		serverWait += countSyncs(sevs, w.from, w.to)
		clientWait += countSyncs(cevs, w.from, w.to)
		serverBefore += countSyncs(sevs, w.from, published(sevs, w.from, w.to))
	}
	last := wins[len(wins)-1].to
	f := perRT(len(wins), countSyncs(sevs, wins[0].from, last+1), countSyncs(cevs, wins[0].from, last+1), serverWait, clientWait)
	f.serverBefore, f.before = float64(serverBefore)/float64(len(wins)), true
	return f, nil
}

// fsyncBaseline counts for the baseline: its worker under strace -p, the
// client in this process polling every 10 ms; the waited path is from the
// request's write until the client read its result.
func (u *users) fsyncBaseline(base, root string, pid int) (fsyncCount, error) {
	dir := filepath.Join(base, "strace-baseline")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fsyncCount{}, err
	}
	at, err := straceAttach(u.strace, pid, filepath.Join(dir, "worker.trace"), syncCalls)
	if err != nil {
		return fsyncCount{}, err
	}
	type win struct{ from, to float64 }
	var wins []win
	for range u.c.fsyncN {
		time.Sleep(u.pause())
		from := time.Now()
		id, err := baselineSubmit(root)
		if err == nil {
			err = baselinePoll(root, id, 10*time.Millisecond, 10*time.Minute)
		}
		if err != nil {
			at.detach()
			return fsyncCount{}, err
		}
		wins = append(wins, win{float64(from.UnixNano()) / 1e9, float64(time.Now().UnixNano()) / 1e9})
	}
	time.Sleep(u.c.poll + time.Second)
	evs, err := at.detach()
	if err != nil {
		return fsyncCount{}, err
	}
	wait := 0
	for _, w := range wins {
		wait += countSyncs(evs, w.from, w.to)
	}
	// The client writes its request and reads the result without a flush.
	return perRT(len(wins), countSyncs(evs, wins[0].from, wins[len(wins)-1].to+1), 0, wait, 0), nil
}
