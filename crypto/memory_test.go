package crypto

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

const memChildEnv = "BRIDGE_TEST_MEM_CHILD"

// TestLargePayloadConstantMemory seals and opens a 1 GiB payload in a fresh
// child process and checks the child's peak resident set (VmHWM) stays under
// 64 MiB: sealing and opening stream in constant memory. A child is used so the
// figure is not polluted by other tests.
func TestLargePayloadConstantMemory(t *testing.T) {
	if os.Getenv(memChildEnv) != "" {
		memChild()
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM is read from /proc")
	}
	size := int64(1 << 30)
	if testing.Short() {
		size = 64 << 20
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLargePayloadConstantMemory$")
	cmd.Env = append(os.Environ(), memChildEnv+"="+strconv.FormatInt(size, 10))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var hwmKB int64
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "peak-rss-kb "); ok {
			hwmKB, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if hwmKB == 0 {
		t.Fatalf("child printed no peak RSS:\n%s", out)
	}
	t.Logf("sealed and opened %d MiB with a peak RSS of %.1f MiB", size>>20, float64(hwmKB)/1024)
	if hwmKB > 64<<10 {
		t.Fatalf("peak RSS %d KiB is over 64 MiB", hwmKB)
	}
}

// memChild streams size bytes of plaintext through a Sealer into an Opener over
// a pipe, checks the SHA-256 on both ends and prints VmHWM.
func memChild() {
	size, _ := strconv.ParseInt(os.Getenv(memChildEnv), 10, 64)
	host, err := GenerateIdentity(nil)
	if err != nil {
		panic(err)
	}
	pr, pw := io.Pipe()
	wrappedc := make(chan []byte, 1)
	inSum := make(chan []byte, 1)
	go func() {
		s, wrapped, err := NewSealer(pw, host.BoxPublic(), nil)
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		wrappedc <- wrapped
		h := sha256.New()
		src := io.TeeReader(io.LimitReader(zeroish{}, size), h)
		if _, err := io.Copy(s, src); err != nil {
			pw.CloseWithError(err)
			return
		}
		pw.CloseWithError(s.Close())
		inSum <- h.Sum(nil)
	}()
	o, err := NewOpener(pr, <-wrappedc, host)
	if err != nil {
		panic(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, o)
	if err != nil || n != size {
		fmt.Printf("open failed after %d bytes: %v\n", n, err)
		os.Exit(1)
	}
	if string(h.Sum(nil)) != string(<-inSum) {
		fmt.Println("plaintext hash differs")
		os.Exit(1)
	}
	f, _ := os.Open("/proc/self/status")
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			fmt.Println("peak-rss-kb", strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
	os.Exit(0)
}

// zeroish is an endless, cheap, non-constant byte source.
type zeroish struct{}

func (zeroish) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i)
	}
	return len(p), nil
}

func BenchmarkSealOpen(b *testing.B) {
	host, _ := GenerateIdentity(nil)
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		pr, pw := io.Pipe()
		s, wrapped, _ := NewSealer(pw, host.BoxPublic(), nil)
		go func() { s.Write(buf); pw.CloseWithError(s.Close()) }()
		o, _ := NewOpener(pr, wrapped, host)
		if _, err := io.Copy(io.Discard, o); err != nil {
			b.Fatal(err)
		}
	}
}
