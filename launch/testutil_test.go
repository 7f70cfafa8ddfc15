package launch

import (
	"bytes"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func getenv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// syncBuffer is a bytes.Buffer safe for concurrent use, with a way to wait
// for output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until s occurs n times in b.
func (b *syncBuffer) waitFor(t *testing.T, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(b.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d×%q in output:\n%s", n, s, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var linePrefix = regexp.MustCompile(`^\[rank (\d+)\] `)

// checkPrefixed checks that every line of out carries a rank prefix below
// world and returns the lines of each rank, prefix removed.
func checkPrefixed(t *testing.T, out string, world int) map[int][]string {
	t.Helper()
	if out != "" && !strings.HasSuffix(out, "\n") {
		t.Errorf("output does not end with a newline: %q", out[max(0, len(out)-80):])
	}
	lines := map[int][]string{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" && out == "" {
			continue
		}
		m := linePrefix.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line without rank prefix: %.100q", l)
		}
		r, _ := strconv.Atoi(m[1])
		if r >= world {
			t.Fatalf("line of rank %d in a world of %d: %.100q", r, world, l)
		}
		lines[r] = append(lines[r], l[len(m[0]):])
	}
	return lines
}

func freeTestPort(t *testing.T) int {
	t.Helper()
	return freeTestPorts(t, 1)[0]
}

// freeTestPort2 returns two different free ports: both listeners stay open
// until both are chosen, so the kernel cannot hand out one port twice (it
// did once: TestRunMultiNodeConfigMismatch got MasterPort == StorePort).
func freeTestPort2(t *testing.T) (int, int) {
	t.Helper()
	p := freeTestPorts(t, 2)
	return p[0], p[1]
}

// freeTestPorts returns n distinct free ports.
func freeTestPorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
