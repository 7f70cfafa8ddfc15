//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// twoHosts makes two network namespaces joined by a veth pair, 10.99.0.1/30
// in the first and 10.99.0.2/30 in the second: two hosts whose only link is
// that pair (each namespace's loopback is its own). Both are deleted when
// the test ends.
func twoHosts(t *testing.T) [2]string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command (iproute2)")
	}
	id := fmt.Sprintf("%d%03d", os.Getpid()%100000, rand.IntN(1000))
	ns := [2]string{"dcA" + id, "dcB" + id}
	veth := [2]string{"vA" + id, "vB" + id}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, n := range ns {
		if out, err := exec.Command("ip", "netns", "add", n).CombinedOutput(); err != nil {
			t.Skipf("ip netns add is not available here: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n).Run() })
	}
	ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", veth[0]).Run() }) // gone with the namespace normally
	for i := range 2 {
		ip("link", "set", veth[i], "netns", ns[i])
		ip("-n", ns[i], "addr", "add", fmt.Sprintf("10.99.0.%d/30", i+1), "dev", veth[i])
		ip("-n", ns[i], "link", "set", veth[i], "up")
		ip("-n", ns[i], "link", "set", "lo", "up")
	}
	return ns
}

// inNS is a detcoll command line run in namespace ns.
func inNS(ns string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns, detcollBin}, args...)...)
}

func nodeArgs(node, port int, extra ...string) []string {
	return append([]string{"launch", "--nnodes", "2", "--node-rank", strconv.Itoa(node), "--nproc-per-node", "2",
		"--master-addr", "10.99.0.1", "--master-port", strconv.Itoa(port), "--rdzv-timeout", "30s", "--grace-period", "1s"}, extra...)
}

var resultLine = regexp.MustCompile(`(?m)^\[rank (\d+)\] (RESULT .*)$`)

// results maps each rank to its RESULT lines.
func results(out string) map[string][]string {
	m := map[string][]string{}
	for _, g := range resultLine.FindAllStringSubmatch(out, -1) {
		m[g[1]] = append(m[g[1]], g[2])
	}
	return m
}

// A real two-host job: each node picks the address that routes to the
// master for its workers, the collectives' bits equal the one-host job's,
// an unreachable master is a clear error, and a host killed mid-job is
// named by the survivor.
func TestTwoHostsNetns(t *testing.T) {
	ns := twoHosts(t)
	port := 29600 + rand.IntN(300)*2
	env := cleanEnv("DETCOLL_TOKEN=netns-test-token", "TW_MODE=results", "DETCOLL_TIMEOUT=20s")

	// The one-host reference: 4 ranks on loopback.
	ref := detcoll(t, 60*time.Second, env, "launch", "--nproc-per-node", "4", workerBin)
	if ref.code != 0 {
		t.Fatalf("one-host job: exit %d\n%s%s", ref.code, ref.stdout, ref.stderr)
	}
	want := results(ref.stdout)
	if len(want) != 4 || len(want["0"]) != 20 {
		t.Fatalf("one-host job printed %d ranks of results:\n%s", len(want), ref.stdout)
	}

	var res [2]result
	var wg sync.WaitGroup
	for node := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[node] = runCmd(t, 60*time.Second, inNS(ns[node], nodeArgs(node, port, workerBin, "--print-host")...), env)
		}()
	}
	wg.Wait()
	for node := range 2 {
		if res[node].code != 0 {
			t.Fatalf("node %d: exit %d\n%s%s", node, res[node].code, res[node].stdout, res[node].stderr)
		}
	}
	got := results(res[0].stdout + res[1].stdout)
	for r := range 4 {
		k := strconv.Itoa(r)
		if !slices.Equal(got[k], want[k]) {
			t.Errorf("rank %d: two-host results differ from one-host:\n%q\n%q", r, got[k], want[k])
		}
	}
	// Workers advertise the veth address of their host, not 127.0.0.1.
	for node, out := range []string{res[0].stdout, res[1].stdout} {
		if h := fmt.Sprintf("HOST 10.99.0.%d", node+1); strings.Count(out, h) != 2 {
			t.Errorf("node %d: workers did not advertise %s:\n%s", node, h, out)
		}
	}

	// An unreachable master: refused before anything starts.
	r := runCmd(t, 20*time.Second, exec.Command("ip", "netns", "exec", ns[1], detcollBin, "launch", "--nnodes", "2", "--node-rank", "1",
		"--master-addr", "10.98.0.1", "--master-port", "29500", "/bin/true"), env)
	if r.code != 2 || !strings.Contains(r.stderr, `MasterAddr (--master-addr) "10.98.0.1"`) || !strings.Contains(r.stderr, "no route from this host") {
		t.Errorf("unreachable master: exit %d\n%s", r.code, r.stderr)
	}

	// A host killed mid-job: node 1's launcher (and so its workers) dies
	// by SIGKILL while the collectives run; node 0 names node 1.
	port += 2
	lenv := cleanEnv("DETCOLL_TOKEN=netns-test-token", "TW_MODE=loop", "TW_ITERS=100000", "DETCOLL_TIMEOUT=10s")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out0, err0, out1 lockedBuffer
	n0 := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns[0], detcollBin}, nodeArgs(0, port, workerBin)...)...)
	n0.Env, n0.Stdout, n0.Stderr = lenv, &out0, &err0
	n1 := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns[1], detcollBin}, nodeArgs(1, port, workerBin)...)...)
	n1.Env, n1.Stdout, n1.Stderr = lenv, &out1, &out1
	if err := n0.Start(); err != nil {
		t.Fatal(err)
	}
	if err := n1.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out0.String(), "rank 1: running") {
		if time.Now().After(deadline) {
			t.Fatalf("node 0 never ran:\n%s%s", out0.String(), err0.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	killed := time.Now()
	_ = n1.Process.Signal(syscall.SIGKILL) // ip netns exec execs detcoll: this is the launcher
	_ = n1.Wait()
	err := n0.Wait()
	took := time.Since(killed)
	if ctx.Err() != nil {
		t.Fatalf("node 0 did not stop:\n%s", err0.String())
	}
	report := err0.String()
	if err == nil || !regexp.MustCompile(`node 1 \(ranks 2-3\) is gone|rank [23] \(node 1, local rank [01]\) is gone with node 1`).MatchString(report) {
		t.Errorf("node 0 after node 1 was killed: %v\n%s", err, report)
	}
	t.Logf("node 0 reported within %v: %s", took.Round(time.Millisecond), strings.SplitN(report[strings.LastIndex(report, "detcoll: "):], "\n", 2)[0])
}

// lockedBuffer is a bytes.Buffer that a test may read while a command
// writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
