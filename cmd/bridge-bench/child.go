//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"golang.org/x/crypto/chacha20poly1305"
)

// The scale and seal measurements run in a fresh child process (this binary
// again, selected by an environment variable) so their RSS is theirs alone,
// not the harness's.
const (
	childEnv     = "BRIDGE_BENCH_CHILD" // "scale", "seal", "baseline-worker", "baseline-client", "libclient"
	childArgEnv  = "BRIDGE_BENCH_ARG"   // the host home, the payload size, the baseline's root, the agent home
	childPollEnv = "BRIDGE_BENCH_POLL"  // the baseline's poll interval; the library child's pause
	childNEnv    = "BRIDGE_BENCH_N"     // the library child's round trips
	childSeedEnv = "BRIDGE_BENCH_SEED"  // the seed of the library child's pauses
)

// childMain runs a child measurement if this process is one, printing
// "key value" lines, and reports whether it was.
func childMain() bool {
	var err error
	switch os.Getenv(childEnv) {
	case "scale":
		err = scaleChild(os.Getenv(childArgEnv))
	case "seal":
		err = sealChild(os.Getenv(childArgEnv))
	case "baseline-worker":
		err = baselineWorkerMain(os.Getenv(childArgEnv))
	case "baseline-client":
		err = baselineClientMain(os.Getenv(childArgEnv))
	case "libclient":
		err = libClientMain(os.Getenv(childArgEnv))
	default:
		return false
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bridge-bench child:", err)
		os.Exit(1)
	}
	return true
}

// child is a running child measurement.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan [2]string // its "key value" lines; closed when it ends
}

// startChild starts this binary as a child of the kind, with arg and any
// more environment; prefix, when given, is a command line to run it under
// (strace).
func startChild(kind, arg string, env ...string) (*child, error) {
	return startChildUnder(nil, kind, arg, env...)
}

func startChildUnder(prefix []string, kind, arg string, env ...string) (*child, error) {
	argv := append(slices.Clone(prefix), selfExe())
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), childEnv+"="+kind, childArgEnv+"="+arg), env...)
	return startCmd(cmd)
}

// startCmd starts cmd as a child that prints "key value" lines.
func startCmd(cmd *exec.Cmd) (*child, error) {
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: in, lines: make(chan [2]string, 16)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), " "); ok {
				c.lines <- [2]string{k, v}
			}
		}
	}()
	return c, nil
}

// rest closes the child's standard input (a baseline worker ends then),
// collects its remaining lines and waits for it to end.
func (c *child) rest() (map[string]string, error) {
	c.stdin.Close()
	kv := map[string]string{}
	for l := range c.lines {
		kv[l[0]] = l[1]
	}
	if err := c.cmd.Wait(); err != nil {
		return kv, fmt.Errorf("child: %w", err)
	}
	return kv, nil
}

// procStatus returns a field of /proc/self/status in KiB.
func procStatus(field string) int64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// scaleRescan is the scale child's rescan interval, and scaleRescans how
// many rescans its CPU is averaged over.
const (
	scaleRescan  = time.Second
	scaleRescans = 5
)

// scaleChild opens a daemon on a home whose folder holds many finished
// requests. It prints when Open started and ended (the parent times the
// answer to a ping it published before), then the CPU of idle rescans and
// the resident set.
func scaleChild(home string) error {
	// BRIDGE_BENCH_CHILD_CPUPROFILE=FILE profiles the restarted daemon
	// (start-up, the first scan and the idle rescans); with
	// BRIDGE_BENCH_CHILD_CPUPROFILE_UNTIL=ready, only until the parent's
	// ping was answered (what "ready" times).
	stopProfile := func() {}
	if p := os.Getenv("BRIDGE_BENCH_CHILD_CPUPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		var once sync.Once
		stopProfile = func() { once.Do(func() { pprof.StopCPUProfile(); f.Close() }) }
		defer stopProfile()
	}
	host.TuneDaemonGC() // as `bridge serve` does
	h, err := trust.OpenHome(home)
	if err != nil {
		return err
	}
	d, err := host.NewDaemon(h, host.DaemonOptions{AllowRoot: true, Rescan: scaleRescan})
	if err != nil {
		return err
	}
	fmt.Printf("open-start %d\n", time.Now().UnixNano())
	if err := d.Open(); err != nil {
		return err
	}
	fmt.Printf("open-end %d\n", time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	// Wait for the parent to say its ping was answered (one line on stdin),
	// then let the first scan's work drain before timing idle rescans.
	bufio.NewReader(os.Stdin).ReadString('\n')
	if os.Getenv("BRIDGE_BENCH_CHILD_CPUPROFILE_UNTIL") == "ready" {
		stopProfile()
	}
	fmt.Printf("rss-ready-kb %d\n", procStatus("VmRSS"))
	time.Sleep(2 * scaleRescan)
	cpu0 := cpuTime()
	time.Sleep(scaleRescans * scaleRescan)
	fmt.Printf("rescan-cpu-ns %d\n", int64((cpuTime()-cpu0)/scaleRescans))
	fmt.Printf("rss-kb %d\n", procStatus("VmRSS"))
	fmt.Printf("hwm-kb %d\n", procStatus("VmHWM"))
	// BRIDGE_BENCH_CHILD_MEMPROFILE=FILE writes the heap profile of the
	// idle daemon, taken where its resident set was read.
	perr := writeHeapProfile(os.Getenv("BRIDGE_BENCH_CHILD_MEMPROFILE"))
	cancel()
	<-done
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	return errors.Join(perr, d.Close(cctx))
}

// writeHeapProfile writes the heap profile after a collection to file, if
// it is not empty.
func writeHeapProfile(file string) error {
	if file == "" {
		return nil
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// sealChild streams size bytes through a Sealer into an Opener over a
// pipe, as the payload of a request is sealed and opened, and prints the
// time and the peak resident set.
func sealChild(arg string) error {
	size, err := strconv.ParseInt(arg, 10, 64)
	if err != nil {
		return err
	}
	id, err := bcrypto.GenerateIdentity(nil)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	wrappedc := make(chan []byte, 1)
	inSum := make(chan []byte, 1)
	start := time.Now()
	go func() {
		s, wrapped, err := bcrypto.NewSealer(pw, id.BoxPublic(), nil)
		if err != nil {
			pw.CloseWithError(err)
			close(wrappedc)
			return
		}
		wrappedc <- wrapped
		h := sha256.New()
		if _, err := io.Copy(s, io.TeeReader(io.LimitReader(pattern{}, size), h)); err != nil {
			pw.CloseWithError(err)
			return
		}
		pw.CloseWithError(s.Close())
		inSum <- h.Sum(nil)
	}()
	wrapped, ok := <-wrappedc
	if !ok {
		return fmt.Errorf("sealer did not start")
	}
	o, err := bcrypto.NewOpener(pr, wrapped, id)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(h, o)
	if err != nil || n != size {
		return fmt.Errorf("opened %d of %d bytes: %v", n, size, err)
	}
	if string(h.Sum(nil)) != string(<-inSum) {
		return fmt.Errorf("the opened payload differs from the sealed one")
	}
	fmt.Printf("seal-open-ns %d\n", time.Since(start).Nanoseconds())
	fmt.Printf("hwm-kb %d\n", procStatus("VmHWM"))
	limit, err := sealLimit(size)
	if err != nil {
		return err
	}
	fmt.Printf("limit-ns %d\n", limit.Nanoseconds())
	return nil
}

// sealLimit is the same work on one core with nothing around it: the
// check's two SHA-256 passes and ChaCha20-Poly1305 sealing and opening of
// each chunk, over size bytes of one reused chunk. The pipeline cannot beat
// it on one core; it may on two, its sealer and opener being goroutines.
func sealLimit(size int64) (time.Duration, error) {
	key := make([]byte, chacha20poly1305.KeySize)
	aead, err := chacha20poly1305.New(key)
	if err != nil {
		return 0, err
	}
	plain := make([]byte, bcrypto.ChunkSize)
	pattern{}.Read(plain)
	sealed := make([]byte, 0, len(plain)+aead.Overhead())
	opened := make([]byte, 0, len(plain))
	nonce := make([]byte, aead.NonceSize())
	h1, h2 := sha256.New(), sha256.New()
	start := time.Now()
	for done := int64(0); done < size; done += int64(len(plain)) {
		h1.Write(plain)
		sealed = aead.Seal(sealed[:0], nonce, plain, nil)
		if opened, err = aead.Open(opened[:0], nonce, sealed, nil); err != nil {
			return 0, err
		}
		h2.Write(opened)
	}
	if string(h1.Sum(nil)) != string(h2.Sum(nil)) {
		return 0, errors.New("the limit's opened bytes differ")
	}
	return time.Since(start), nil
}

// pattern is an endless, cheap, non-constant byte source: p[i] = byte(i)
// in every read, copied from a block made once, so that the pipeline's
// figure is the seal's and not a byte loop's.
type pattern struct{}

var patternBlock = func() []byte {
	b := make([]byte, 64<<10) // a multiple of 256
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

func (pattern) Read(p []byte) (int, error) {
	for n := 0; n < len(p); n += len(patternBlock) {
		copy(p[n:], patternBlock)
	}
	return len(p), nil
}
