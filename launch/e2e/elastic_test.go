//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// elasticArgs is one node of an elastic job on this host: torchrun's c10d
// line with --nnodes MIN:MAX and a short last call.
func elasticArgs(port int, nnodes, lastCall string, extra ...string) []string {
	args := []string{"launch", "--nnodes", nnodes, "--nproc-per-node", "2", "--rdzv-backend", "c10d",
		"--rdzv-endpoint", "127.0.0.1:" + strconv.Itoa(port), "--rdzv-id", "elastic", "--rdzv-timeout", "20s"}
	if lastCall != "" {
		args = append(args, "--rdzv-conf", "last_call_timeout="+lastCall)
	}
	return append(args, extra...)
}

// elasticScript prints what a worker saw of the job.
const elasticScript = `echo "rank $RANK of $WORLD_SIZE node $GROUP_RANK of $GROUP_WORLD_SIZE nnodes $DETCOLL_NNODES dworld $DETCOLL_WORLD_SIZE"`

// runNodes starts one launcher per args list at once and waits for all.
func runNodes(t *testing.T, limit time.Duration, env []string, args ...[]string) []result {
	t.Helper()
	res := make([]result, len(args))
	done := make(chan struct{})
	for i := range args {
		go func() {
			defer func() { done <- struct{}{} }()
			res[i] = detcoll(t, limit, env, args[i]...)
		}()
	}
	for range args {
		<-done
	}
	return res
}

// checkWorld checks that the nodes' workers together are ranks 0 …
// nodes×2-1 of one consistent world of nodes nodes.
func checkWorld(t *testing.T, res []result, nodes int) {
	t.Helper()
	all := ""
	for i, r := range res {
		if r.code != 0 {
			t.Fatalf("node %d: exit %d\n%s%s", i, r.code, r.stdout, r.stderr)
		}
		all += r.stdout
	}
	world := 2 * nodes
	if got := strings.Count(all, "[rank "); got != world {
		t.Errorf("%d worker lines, want %d:\n%s", got, world, all)
	}
	for rank := range world {
		want := fmt.Sprintf("[rank %d] rank %d of %d node %d of %d nnodes %d dworld %d", rank, rank, world, rank/2, nodes, nodes, world)
		if !strings.Contains(all, want) {
			t.Errorf("missing %q in\n%s", want, all)
		}
	}
}

// MIN=1, MAX=2 with one node: it waits the last call, then runs alone.
func TestElasticOneOfMinOneMaxTwo(t *testing.T) {
	t.Parallel()
	res := runNodes(t, 30*time.Second, cleanEnv("DETCOLL_TOKEN=tok"),
		elasticArgs(freePort(t), "1:2", "1", "/bin/sh", "-c", elasticScript))
	checkWorld(t, res, 1)
	if r := res[0]; r.took < time.Second || !strings.Contains(r.stderr, "rendezvous closed with 1 node of --nnodes 1:2 (the last call of 1s ended); world size 2") {
		t.Errorf("took %v (the last call is 1s)\n%s", r.took, r.stderr)
	}
}

// MIN=2, MAX=3 with two nodes: they start with 2 after the last call; the
// environment variables (PET_NNODES, PET_RDZV_CONF) work like the flags.
func TestElasticTwoOfMinTwoMaxThree(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	env := cleanEnv("DETCOLL_TOKEN=tok", "PET_NNODES=2:3", "PET_RDZV_CONF=join_timeout=20,last_call_timeout=1.5")
	args := []string{"launch", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + strconv.Itoa(port),
		"/bin/sh", "-c", elasticScript}
	res := runNodes(t, 30*time.Second, env, args, args)
	checkWorld(t, res, 2)
	closed := 0
	for _, r := range res {
		if strings.Contains(r.stderr, "rendezvous closed with 2 nodes of --nnodes 2:3 (the last call of 1.5s ended); world size 4") {
			closed++
		}
		if r.took < 1500*time.Millisecond {
			t.Errorf("a node finished in %v, before the 1.5s last call", r.took)
		}
	}
	if closed != 1 {
		t.Errorf("%d nodes say they closed the rendezvous, want 1 (node 0)\n%s\n%s", closed, res[0].stderr, res[1].stderr)
	}
}

// MIN=1, MAX=2 with two nodes: MAX joined, so the job starts at once, not
// after the 20 s last call.
func TestElasticMaxJoinedStartsAtOnce(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	args := elasticArgs(port, "1:2", "20", "/bin/sh", "-c", elasticScript)
	res := runNodes(t, 30*time.Second, cleanEnv("DETCOLL_TOKEN=tok"), args, args)
	checkWorld(t, res, 2)
	for i, r := range res {
		if r.took > 10*time.Second {
			t.Errorf("node %d took %v: it waited for the last call although MAX nodes joined", i, r.took)
		}
	}
	if s := res[0].stderr + res[1].stderr; !strings.Contains(s, "rendezvous closed with 2 nodes of --nnodes 1:2 (all of them joined)") {
		t.Errorf("no close message:\n%s", s)
	}
}

// bgNode is a launcher started in the background.
type bgNode struct {
	cmd      *exec.Cmd
	out, err lockedBuffer
	done     chan error
}

func startNode(t *testing.T, ctx context.Context, env []string, args ...string) *bgNode {
	t.Helper()
	n := &bgNode{cmd: exec.CommandContext(ctx, detcollBin, args...), done: make(chan error, 1)}
	n.cmd.Env = env
	n.cmd.Stdout, n.cmd.Stderr = &n.out, &n.err
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.done <- n.cmd.Wait() }()
	return n
}

// waitOutput waits until the node's stdout contains want.
func (n *bgNode) waitOutput(t *testing.T, want string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); !strings.Contains(n.out.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %v:\n%s\n%s", want, d, n.out.String(), n.err.String())
		}
	}
}

// wait waits for the node's exit and fails the test unless it is 0.
func (n *bgNode) wait(t *testing.T, name string) {
	t.Helper()
	if err := <-n.done; err != nil {
		t.Errorf("%s: %v\nstdout:\n%s\nstderr:\n%s", name, err, n.out.String(), n.err.String())
	}
}

// startRunningPair starts two nodes of a job with two workers each and waits
// until both have their workers running.
func startRunningPair(t *testing.T, ctx context.Context, args []string) (*bgNode, *bgNode) {
	t.Helper()
	n0 := startNode(t, ctx, cleanEnv("DETCOLL_TOKEN=tok"), args...)
	n1 := startNode(t, ctx, cleanEnv("DETCOLL_TOKEN=tok"), args...)
	for _, n := range []*bgNode{n0, n1} {
		for deadline := time.Now().Add(20 * time.Second); strings.Count(n.out.String(), "of 4 node") < 2; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("a node never started its workers:\n%s\n%s", n.out.String(), n.err.String())
			}
		}
	}
	return n0, n1
}

// A node that comes while MAX nodes run is refused at once with a clear
// error (exit 1), and the running job is not disturbed.
func TestElasticLateNodeRefused(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	args := elasticArgs(port, "1:2", "0.5", "/bin/sh", "-c", elasticScript+"; sleep 3")
	n0, n1 := startRunningPair(t, ctx, args)
	late := detcoll(t, 20*time.Second, cleanEnv("DETCOLL_TOKEN=tok"), args...)
	want := `launch: rendezvous closed: the rendezvous of job "elastic" (store 127.0.0.1:` + strconv.Itoa(port) +
		", --nnodes 1:2) admitted no more nodes: it was full (the most nodes --nnodes 1:2 admits had joined); the job runs with 2 nodes, without this one"
	if late.code != 1 || !strings.Contains(late.stderr, want) || late.stdout != "" {
		t.Errorf("late node: exit %d in %v, want 1 and %q\nstdout:\n%s\nstderr:\n%s", late.code, late.took, want, late.stdout, late.stderr)
	}
	if late.took > 5*time.Second {
		t.Errorf("the late node took %v to be refused", late.took)
	}
	n0.wait(t, "node 0")
	n1.wait(t, "node 1")
	for _, n := range []*bgNode{n0, n1} {
		if s := n.out.String() + n.err.String(); strings.Contains(s, "of 6") || strings.Contains(s, "restarting") {
			t.Errorf("the job changed:\n%s", s)
		}
	}
}

// --max-restarts with an elastic job: rank 2 (node 1) fails in the first
// attempt; both nodes come back, are admitted again (MAX, at once) and
// succeed.
func TestElasticRestartReadmits(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	script := `echo "attempt $TORCHELASTIC_RESTART_COUNT ` + strings.TrimPrefix(elasticScript, `echo "`) +
		`; if [ "$RANK" = 2 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 3; fi; sleep 0.3`
	args := elasticArgs(port, "1:2", "20", "--max-restarts", "1", "--grace-period", "1s", "/bin/sh", "-c", script)
	res := runNodes(t, 40*time.Second, cleanEnv("DETCOLL_TOKEN=tok"), args, args)
	all := ""
	for i, r := range res {
		if r.code != 0 || !strings.Contains(r.stderr, "restarting it (restart 1 of 1)") {
			t.Errorf("node %d: exit %d\n%s%s", i, r.code, r.stdout, r.stderr)
		}
		all += r.stdout + r.stderr
		if r.took > 20*time.Second {
			t.Errorf("node %d took %v: the restarted rendezvous waited for the last call", i, r.took)
		}
	}
	for rank := range 4 {
		if want := fmt.Sprintf("[rank %d] attempt 1 rank %d of 4 node %d of 2", rank, rank, rank/2); !strings.Contains(all, want) {
			t.Errorf("missing %q in\n%s", want, all)
		}
	}
	if n := strings.Count(all, "rendezvous closed with 2 nodes of --nnodes 1:2 (all of them joined)"); n != 2 {
		t.Errorf("%d admissions of 2 nodes, want 2 (one per attempt)\n%s", n, all)
	}
}

// growScriptTo loops, printing what it sees, until WORLD_SIZE is world.
func growScriptTo(world int) string {
	return `while :; do echo "attempt $DETCOLL_ATTEMPT restarts $TORCHELASTIC_RESTART_COUNT rank $RANK of $WORLD_SIZE node $GROUP_RANK of $GROUP_WORLD_SIZE"; ` +
		`if [ "$WORLD_SIZE" = ` + strconv.Itoa(world) + ` ]; then exit 0; fi; sleep 0.2; done`
}

// growScript loops until the group has two nodes.
var growScript = growScriptTo(4)

// torchrun's scale-up: a 1:2 job runs with one node; a second node comes,
// waits, and node 0 restarts the group to admit it. Both nodes' workers
// then see WORLD_SIZE 4, DETCOLL_ATTEMPT 1 and TORCHELASTIC_RESTART_COUNT
// still 0 (torchelastic's meaning: failure restarts only), and the restart
// is not counted against --max-restarts 0.
func TestElasticGrowsToAdmitWaitingNode(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	args := elasticArgs(port, "1:2", "0.5", "--max-restarts", "0", "--grace-period", "1s", "/bin/sh", "-c", growScript)
	n0 := startNode(t, ctx, cleanEnv("DETCOLL_TOKEN=tok"), args...)
	n0.waitOutput(t, "[rank 1] attempt 0 restarts 0 rank 1 of 2 node 0 of 1", 20*time.Second)
	arrived := time.Now()
	n1 := startNode(t, ctx, cleanEnv("DETCOLL_TOKEN=tok"), args...)
	n0.wait(t, "node 0")
	n1.wait(t, "node 1")
	if took := time.Since(arrived); took > 15*time.Second {
		t.Errorf("the group took %v to take in the waiting node", took)
	}
	out0, out1 := n0.out.String(), n1.out.String()
	for rank := range 4 {
		want := fmt.Sprintf("[rank %d] attempt 1 restarts 0 rank %d of 4 node %d of 2", rank, rank, rank/2)
		if !strings.Contains(out0+out1, want) {
			t.Errorf("missing %q in\n%s%s", want, out0, out1)
		}
	}
	if strings.Contains(out1, "of 2 node") || strings.Contains(out1, "attempt 0") {
		t.Errorf("the new node ran in the first attempt:\n%s", out1)
	}
	want := "detcoll launch: node 0: node 0 saw 1 node waiting to join the running group of 1 node (--nnodes 1:2); restarting the worker group to admit it (attempt 1; not counted against --max-restarts)"
	if !strings.Contains(n0.err.String(), want) {
		t.Errorf("node 0 does not say %q:\n%s", want, n0.err.String())
	}
	if want := "this node waits for the group to restart and admit it"; !strings.Contains(n1.err.String(), want) {
		t.Errorf("the new node does not say %q:\n%s", want, n1.err.String())
	}
	if n := strings.Count(n0.err.String(), "rendezvous closed with"); n != 2 {
		t.Errorf("%d admissions on node 0, want 2:\n%s", n, n0.err.String())
	}
}

// A failure restart, then a scale-up: the restarted attempt (restart 1 of
// 1) runs alone; a node that comes then is admitted by a regroup (attempt
// 2), learns node 0's failure count, and the job succeeds.
func TestElasticGrowsAfterRestart(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	script := `if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 3; fi; ` + growScript
	args := elasticArgs(port, "1:2", "0.5", "--max-restarts", "1", "--grace-period", "1s", "/bin/sh", "-c", script)
	n0 := startNode(t, ctx, cleanEnv("DETCOLL_TOKEN=tok"), args...)
	n0.waitOutput(t, "[rank 1] attempt 1 restarts 1 rank 1 of 2", 20*time.Second)
	n1 := startNode(t, ctx, cleanEnv("DETCOLL_TOKEN=tok"), args...)
	n0.wait(t, "node 0")
	n1.wait(t, "node 1")
	all := n0.out.String() + n1.out.String()
	for rank := range 4 {
		if want := fmt.Sprintf("[rank %d] attempt 2 restarts 1 rank %d of 4 node %d of 2", rank, rank, rank/2); !strings.Contains(all, want) {
			t.Errorf("missing %q in\n%s", want, all)
		}
	}
	if s := n0.err.String(); !strings.Contains(s, "restarting it (restart 1 of 1)") || !strings.Contains(s, "(attempt 2; not counted against --max-restarts)") {
		t.Errorf("node 0:\n%s", s)
	}
}

// 1:3 running with two nodes: a third comes; node 0 regroups and node 1,
// told through the abort record, restarts too, so all three run attempt 1
// with WORLD_SIZE 6.
func TestElasticGrowsFromTwoToThree(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	args := elasticArgs(port, "1:3", "0.5", "--grace-period", "1s", "/bin/sh", "-c", growScriptTo(6))
	a := startNode(t, ctx, cleanEnv("DETCOLL_TOKEN=tok"), args...)
	b := startNode(t, ctx, cleanEnv("DETCOLL_TOKEN=tok"), args...)
	a.waitOutput(t, "attempt 0 restarts 0 rank", 20*time.Second)
	for _, want := range []string{"attempt 0 restarts 0 rank 0 of 4 node 0 of 2", "attempt 0 restarts 0 rank 3 of 4 node 1 of 2"} {
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(a.out.String()+b.out.String(), want); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q:\n%s%s\n%s%s", want, a.out.String(), b.out.String(), a.err.String(), b.err.String())
			}
		}
	}
	c := startNode(t, ctx, cleanEnv("DETCOLL_TOKEN=tok"), args...)
	a.wait(t, "node a")
	b.wait(t, "node b")
	c.wait(t, "node c")
	all := a.out.String() + b.out.String() + c.out.String()
	for rank := range 6 {
		if want := fmt.Sprintf("[rank %d] attempt 1 restarts 0 rank %d of 6 node %d of 3", rank, rank, rank/2); !strings.Contains(all, want) {
			t.Errorf("missing %q in\n%s", want, all)
		}
	}
	for name, n := range map[string]*bgNode{"a": a, "b": b} {
		if want := "node 0 saw 1 node waiting to join the running group of 2 nodes (--nnodes 1:3); restarting the worker group to admit it (attempt 1"; !strings.Contains(n.err.String(), want) {
			t.Errorf("node %s does not say %q:\n%s", name, want, n.err.String())
		}
	}
	if strings.Contains(c.out.String(), "attempt 0") {
		t.Errorf("the new node ran in the first attempt:\n%s", c.out.String())
	}
}

// MIN = MAX: the job is not elastic, so a node that comes while it runs is
// refused at once (exit 2), and the job is neither grown nor restarted.
func TestFixedNnodesRefusesLateNode(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	args := elasticArgs(port, "2:2", "0.5", "/bin/sh", "-c", elasticScript+"; sleep 3")
	n0, n1 := startRunningPair(t, ctx, args)
	late := detcoll(t, 20*time.Second, cleanEnv("DETCOLL_TOKEN=tok"), args...)
	want := "more nodes joined than Nnodes (--nnodes)=2"
	if late.code != 2 || !strings.Contains(late.stderr, want) || late.stdout != "" || late.took > 5*time.Second {
		t.Errorf("late node: exit %d in %v, want 2 at once and %q\nstdout:\n%s\nstderr:\n%s", late.code, late.took, want, late.stdout, late.stderr)
	}
	n0.wait(t, "node 0")
	n1.wait(t, "node 1")
	for _, n := range []*bgNode{n0, n1} {
		if s := n.out.String() + n.err.String(); strings.Contains(s, "of 6") || strings.Contains(s, "restarting") || strings.Contains(s, "waiting to join") {
			t.Errorf("the job changed:\n%s", s)
		}
	}
}

// A node whose config differs from node 0's (here --nproc-per-node) is
// refused before it takes a ticket (exit 2, both configs named), so node 0
// is not made to wait for it: it runs alone after the last call.
func TestElasticConfigMismatchNotAdmitted(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	args := elasticArgs(port, "1:2", "1.5", "/bin/sh", "-c", elasticScript)
	n0 := exec.CommandContext(ctx, detcollBin, args...)
	n0.Env = cleanEnv("DETCOLL_TOKEN=tok")
	var out0, err0 lockedBuffer
	n0.Stdout, n0.Stderr = &out0, &err0
	if err := n0.Start(); err != nil {
		t.Fatal(err)
	}
	// Node 0 is the launcher that binds the store port first: wait for it.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 0 never served the store:\n%s", err0.String())
		}
	}
	other := elasticArgs(port, "1:2", "1.5", "--nproc-per-node", "1", "/bin/sh", "-c", elasticScript)
	r := detcoll(t, 20*time.Second, cleanEnv("DETCOLL_TOKEN=tok"), other...)
	want := "this node has nnodes=1:2 nproc=1 rdzv_id=elastic master_port=0 but node 0 has nnodes=1:2 nproc=2 rdzv_id=elastic master_port=0"
	if r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Errorf("mismatched node: exit %d, want 2 and %q\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	if err := n0.Wait(); err != nil {
		t.Fatalf("node 0: %v\n%s\n%s", err, out0.String(), err0.String())
	}
	checkWorld(t, []result{{stdout: out0.String()}}, 1)
	if !strings.Contains(err0.String(), "rendezvous closed with 1 node of --nnodes 1:2") {
		t.Errorf("node 0:\n%s", err0.String())
	}
}
