//go:build linux

// Package e2e tests `detcoll launch` as users run it: the real binary,
// built once in TestMain, with real workers (shell commands, Python, and
// launch/internal/testworker, a rank that runs collectives and can die or
// stop on cue).
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	detcollBin string // the detcoll command
	workerBin  string // launch/internal/testworker
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "launch-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	detcollBin, workerBin = filepath.Join(dir, "detcoll"), filepath.Join(dir, "testworker")
	for bin, pkg := range map[string]string{detcollBin: "../../cmd/detcoll", workerBin: "../internal/testworker"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result of one command.
type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// cleanEnv is this environment without launcher variables, so that a test
// run under a launcher does not leak into the jobs.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "DETCOLL_") || strings.HasPrefix(k, "PET_") || strings.HasPrefix(k, "TORCHELASTIC_") ||
			k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK" || k == "MASTER_ADDR" || k == "MASTER_PORT" ||
			strings.HasPrefix(k, "TW_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// detcoll runs the binary with args, killed after limit.
func detcoll(t *testing.T, limit time.Duration, env []string, args ...string) result {
	t.Helper()
	return runCmd(t, limit, exec.Command(detcollBin, args...), env)
}

func runCmd(t *testing.T, limit time.Duration, cmd *exec.Cmd, env []string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	c.Env = env
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	start := time.Now()
	err := c.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("%q did not finish within %v\nstdout:\n%s\nstderr:\n%s", cmd.Args, limit, r.stdout, r.stderr)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%q: %v", cmd.Args, err)
	}
	return r
}

// freePort returns a port X for --master-port such that X+1, where the
// launcher puts detcoll's store, is free too (a free X alone met a taken
// X+1 under CI's load).
func freePort(t *testing.T) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		next, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+1))
		ln.Close()
		if err == nil {
			next.Close()
			return port
		}
	}
	t.Fatal("no free pair of adjacent ports")
	return 0
}

// torchrun's spellings, no "--" before the command, and MASTER_PORT exact.
func TestTorchrunFlagsAndEnv(t *testing.T) {
	port := freePort(t)
	r := detcoll(t, 30*time.Second, cleanEnv("PET_RDZV_ID=job42"), "launch", "--nproc_per_node", "2", "--master_port", strconv.Itoa(port),
		"--role", "trainer", "/bin/sh", "-c",
		`echo "vars $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $ROLE_RANK $ROLE_WORLD_SIZE $ROLE_NAME $MASTER_ADDR $MASTER_PORT $DETCOLL_STORE_ADDR $TORCHELASTIC_RUN_ID $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_USE_AGENT_STORE $OMP_NUM_THREADS $DETCOLL_TCP_HOST"`)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for rank := range 2 {
		want := fmt.Sprintf("[rank %d] vars %d %d 2 2 0 %d 2 trainer 127.0.0.1 %d 127.0.0.1:%d job42 0 0 False 1 127.0.0.1\n",
			rank, rank, rank, rank, port, port+1)
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.stdout)
		}
	}
}

func TestUsageErrorsExit2BeforeStarting(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "started")
	cmd := []string{"/bin/sh", "-c", "touch " + marker}
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--nproc-per-node", "0"}, nil, "--nproc-per-node: 0"},
		{[]string{"--nproc_per_node=-1"}, nil, "--nproc_per_node: -1"},
		{nil, []string{"DETCOLL_NPROC_PER_NODE=0"}, "DETCOLL_NPROC_PER_NODE"},
		{[]string{"--nnodes", "3:2"}, nil, "--nnodes: elastic range 3:2 has MIN above MAX"},
		{[]string{"--nnodes", "1:2", "--node-rank", "1", "--master-addr", "127.0.0.1"}, nil, "--node-rank: an elastic --nnodes 1:2 assigns node ranks in join order"},
		{[]string{"--nproc-per-nod", "2"}, nil, "did you mean --nproc-per-node"},
		{[]string{"--master-addr", "192.0.2.10"}, nil, "not an address of this host"},
		{[]string{"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1"}, nil, "needs the job's token"},
		{[]string{"--rdzv-backend", "etcd"}, nil, "--rdzv-backend"},
		{[]string{"--rdzv-conf", "timeout=abc"}, nil, "--rdzv-conf: timeout"},
	} {
		r := detcoll(t, 20*time.Second, cleanEnv(tc.env...), append(append([]string{"launch"}, tc.args...), cmd...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q %q: exit %d, stderr %q; want 2 mentioning %q", tc.args, tc.env, r.code, r.stderr, tc.want)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%q: the worker ran despite the usage error", tc.args)
		}
	}
	r := detcoll(t, 20*time.Second, cleanEnv(), "launch", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "--nproc-per-node N|gpu|cpu|auto") || !strings.Contains(r.stdout, "PET_NPROC_PER_NODE") {
		t.Errorf("--help: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestPythonModuleAndScript(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello_mod.py"), []byte("import os, sys\nprint('module', os.environ['RANK'], sys.argv[1:])\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := cleanEnv("PYTHONPATH="+dir, "DETCOLL_PYTHON="+python)
	r := detcoll(t, 30*time.Second, env, "launch", "--nproc-per-node", "2", "-m", "hello_mod", "--lr", "3")
	if r.code != 0 || !strings.Contains(r.stdout, "[rank 1] module 1 ['--lr', '3']") {
		t.Errorf("-m: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = detcoll(t, 30*time.Second, env, "launch", filepath.Join(dir, "hello_mod.py"), "x")
	if r.code != 0 || !strings.Contains(r.stdout, "[rank 0] module 0 ['x']") {
		t.Errorf("script: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestMaxRestartsRestartsTheGroup(t *testing.T) {
	// Rank 1 fails until the second restart; every rank logs its attempt.
	script := `echo "attempt $TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS"; if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt 2 ]; then exit 3; fi; sleep 0.2`
	r := detcoll(t, 30*time.Second, cleanEnv(), "launch", "--nproc-per-node", "2", "--max-restarts", "2", "/bin/sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"[rank 1] attempt 0 of 2", "[rank 1] attempt 1 of 2", "[rank 0] attempt 2 of 2", "[rank 1] attempt 2 of 2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in\n%s", want, r.stdout)
		}
	}
	if n := strings.Count(r.stderr, "restarting it"); n != 2 {
		t.Errorf("%d restarts announced:\n%s", n, r.stderr)
	}
	r = detcoll(t, 30*time.Second, cleanEnv(), "launch", "--nproc-per-node", "2", "--max-restarts", "1", "/bin/sh", "-c", script)
	if r.code != 3 || !strings.Contains(r.stderr, "rank 1 (node 0, local rank 1") {
		t.Errorf("restarts exhausted: exit %d\n%s", r.code, r.stderr)
	}
}

func TestRedirectsTeeLogDirFilter(t *testing.T) {
	dir := t.TempDir()
	r := detcoll(t, 30*time.Second, cleanEnv(), "launch", "--nproc-per-node", "3", "--log-dir", dir, "--rdzv-id", "j1",
		"--redirects", "0:1", "--tee", "2", "--local-ranks-filter", "0,1", "/bin/sh", "-c", `echo "out $RANK"; echo "err $RANK" >&2`)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Rank 0's stdout goes to its file only; rank 2 is filtered off the console.
	if strings.Contains(r.stdout, "out 0") || !strings.Contains(r.stdout, "[rank 1] out 1") || strings.Contains(r.stdout+r.stderr, "rank 2]") {
		t.Errorf("console:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "[rank 0] err 0") || !strings.Contains(r.stderr, "[rank 1] err 1") {
		t.Errorf("tee'd stderr missing on the console:\n%s", r.stderr)
	}
	for path, want := range map[string]string{
		"j1/attempt_0/0/stdout.log": "out 0\n", "j1/attempt_0/0/stderr.log": "err 0\n",
		"j1/attempt_0/2/stderr.log": "err 2\n", "j1/attempt_0/1/stderr.log": "err 1\n",
	} {
		b, err := os.ReadFile(filepath.Join(dir, path))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", path, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "j1/attempt_0/1/stdout.log")); err == nil {
		t.Errorf("rank 1's stdout was neither redirected nor teed but has a log file")
	}
}

// The root cause of a failed job, for a rank killed by SIGKILL and a rank
// stopped by SIGSTOP mid-job, at W = 2, 3, 4: the launcher names that rank.
func TestBlameKilledAndStoppedRank(t *testing.T) {
	for _, fault := range []string{"kill", "stop"} {
		for _, w := range []int{2, 3, 4} {
			t.Run(fmt.Sprintf("%s/W=%d", fault, w), func(t *testing.T) {
				t.Parallel()
				victim := w - 1
				if w == 4 {
					victim = 2
				}
				env := cleanEnv("TW_MODE=loop", "TW_FAULT="+fault, "TW_FAULT_RANK="+strconv.Itoa(victim), "TW_FAULT_AT=3",
					"DETCOLL_TIMEOUT=2s")
				r := detcoll(t, 40*time.Second, env, "launch", "--nproc-per-node", strconv.Itoa(w), "--grace-period", "1s", workerBin)
				name := fmt.Sprintf("detcoll: launch: rank %d (node 0, local rank %d, pid ", victim, victim)
				want := "was killed by signal 9 (killed)"
				code := 137
				if fault == "stop" {
					want, code = "was stopped (SIGSTOP or a debugger)", 1
				}
				first := strings.SplitN(r.stderr[strings.Index(r.stderr, "detcoll: launch:")+0:], "\n", 2)[0]
				if r.code != code || !strings.Contains(first, name) || !strings.Contains(first, want) {
					t.Errorf("exit %d, report %q; want exit %d naming rank %d %q\nstderr:\n%s", r.code, first, code, victim, want, r.stderr)
				}
				if fault == "stop" && !strings.Contains(first, "named it as the peer") {
					t.Errorf("the stopped rank is not shown as named by the others: %q", first)
				}
				t.Logf("W=%d %s: %v: %s", w, fault, r.took.Round(time.Millisecond), first)
			})
		}
	}
}

// A rank that fails with its own error (no peer) stays the root cause even
// when the others then fail naming it.
func TestBlameOwnErrorAndUnresponsivePeer(t *testing.T) {
	// Rank 1 hangs (a busy loop, not a stop): the others time out naming
	// it, and the launcher reports it as unresponsive.
	script := `if [ "$RANK" = 1 ]; then exec sleep 60; fi; echo 'DETCOLL_FAILURE {"rank":'$RANK',"peer":1,"op":"recv","kind":"timeout","error":"recv from 1: deadline"}' >&2; sleep 0.3; exit 1`
	r := detcoll(t, 30*time.Second, cleanEnv(), "launch", "--nproc-per-node", "3", "--grace-period", "1s", "/bin/sh", "-c", script)
	if r.code != 1 || !regexp.MustCompile(`launch: rank 1 \(node 0, local rank 1, pid \d+\) stopped answering \(the launcher then stopped it\); ranks? [02]`).MatchString(r.stderr) {
		t.Errorf("exit %d\n%s", r.code, r.stderr)
	}
}

func TestRendezvousTimeoutNamesMissingNodes(t *testing.T) {
	port := freePort(t)
	r := detcoll(t, 30*time.Second, cleanEnv(), "launch", "--nnodes", "3", "--nproc-per-node", "2", "--node-rank", "0",
		"--master-addr", "127.0.0.1", "--master-port", strconv.Itoa(port), "--rdzv-conf", "timeout=1", "/bin/true")
	if r.code != 1 || !strings.Contains(r.stderr, "rendezvous timed out after 1s: node 1 (ranks 2-3), node 2 (ranks 4-5) never joined") {
		t.Errorf("node 0 alone: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "DETCOLL_TOKEN=") {
		t.Errorf("node 0 did not print the token it generated:\n%s", r.stderr)
	}
	if r.took > 15*time.Second {
		t.Errorf("took %v", r.took)
	}
	r = detcoll(t, 30*time.Second, cleanEnv("DETCOLL_TOKEN=t", "DETCOLL_RDZV_TIMEOUT=1s"), "launch", "--nnodes", "2", "--node-rank", "1",
		"--master-addr", "127.0.0.1", "--master-port", strconv.Itoa(port), "/bin/true")
	if r.code != 1 || !strings.Contains(r.stderr, "rendezvous timed out after 1s: node 0's store never answered: node 0 (ranks 0) never joined") {
		t.Errorf("node 1 alone: exit %d\n%s", r.code, r.stderr)
	}
}

// Two nodes on one host with the token node 0 generated and printed.
func TestTokenPolicyTwoNodes(t *testing.T) {
	port := freePort(t)
	args := func(node int) []string {
		return []string{"launch", "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", strconv.Itoa(node),
			"--master-addr", "127.0.0.1", "--master-port", strconv.Itoa(port), "--rdzv-timeout", "20s",
			"/bin/sh", "-c", `echo "token=$DETCOLL_TOKEN"`}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	n0 := exec.CommandContext(ctx, detcollBin, args(0)...)
	n0.Env = cleanEnv()
	var out0 bytes.Buffer
	n0.Stdout = &out0
	stderr0, err := n0.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n0.Start(); err != nil {
		t.Fatal(err)
	}
	// Read the printed token as an operator would.
	buf := make([]byte, 4096)
	var got string
	re := regexp.MustCompile(`DETCOLL_TOKEN=([0-9a-f]{32})`)
	for got == "" {
		n, err := stderr0.Read(buf)
		if m := re.FindSubmatch(buf[:n]); m != nil {
			got = string(m[1])
		}
		if err != nil {
			t.Fatalf("node 0 printed no token: %v", err)
		}
	}
	r := detcoll(t, 30*time.Second, cleanEnv("DETCOLL_TOKEN="+got), args(1)...)
	if r.code != 0 || !strings.Contains(r.stdout, "[rank 1] token="+got) {
		t.Errorf("node 1: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	go func() { _, _ = bytes.NewBuffer(nil).ReadFrom(stderr0) }()
	if err := n0.Wait(); err != nil || !strings.Contains(out0.String(), "[rank 0] token="+got) {
		t.Errorf("node 0: %v\n%s", err, out0.String())
	}
}

// torch.distributed (Gloo) under detcoll launch: env:// finds MASTER_PORT
// free for torch's own store and every rank gets the same sum.
func TestTorchGlooUnderLaunch(t *testing.T) {
	t.Parallel() // importing torch takes seconds per rank: overlap the other tests
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		t.Skip("no PyTorch in /usr/bin/python3")
	}
	prog := `import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
x = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(x)
print("sum", int(x.item()), "port", os.environ["MASTER_PORT"])
dist.destroy_process_group()`
	port := freePort(t)
	r := detcoll(t, 60*time.Second, cleanEnv(), "launch", "--nproc-per-node", "3", "--master-port", strconv.Itoa(port), "/usr/bin/python3", "-c", prog)
	for rank := range 3 {
		if want := fmt.Sprintf("[rank %d] sum 6 port %d", rank, port); r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("exit %d, missing %q\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}
}

// Two nodes on this host, rank 3 (node 1) stopped mid-job: both nodes name
// it as stopped, the node that only saw timeouts included.
func TestBlameStoppedRankAcrossNodes(t *testing.T) {
	port := freePort(t)
	env := cleanEnv("DETCOLL_TOKEN=tok", "TW_MODE=loop", "TW_FAULT=stop", "TW_FAULT_RANK=3", "TW_FAULT_AT=3", "DETCOLL_TIMEOUT=2s")
	var res [2]result
	done := make(chan struct{})
	for node := range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			res[node] = detcoll(t, 40*time.Second, env, "launch", "--nnodes", "2", "--node-rank", strconv.Itoa(node), "--nproc-per-node", "2",
				"--master-addr", "127.0.0.1", "--master-port", strconv.Itoa(port), "--rdzv-timeout", "20s", "--grace-period", "1s", workerBin)
		}()
	}
	<-done
	<-done
	for node, r := range res {
		i := strings.LastIndex(r.stderr, "detcoll: launch:")
		if i < 0 {
			t.Fatalf("node %d: exit %d, no report\n%s", node, r.code, r.stderr)
		}
		first := strings.SplitN(r.stderr[i:], "\n", 2)[0]
		if r.code != 1 || !strings.Contains(first, "rank 3 (node 1, local rank 1") || !strings.Contains(first, "was stopped (SIGSTOP") {
			t.Errorf("node %d: exit %d, report %q; want rank 3 stopped", node, r.code, first)
		}
		t.Logf("node %d: %v: %s", node, r.took.Round(time.Millisecond), first)
	}
}

// --max-restarts with two nodes: rank 3 (node 1) fails in the first attempt;
// both nodes restart their workers, which then all succeed.
func TestMaxRestartsTwoNodes(t *testing.T) {
	port := freePort(t)
	script := `echo "attempt $TORCHELASTIC_RESTART_COUNT"; if [ "$RANK" = 3 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 3; fi; sleep 0.3`
	var res [2]result
	done := make(chan struct{})
	for node := range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			res[node] = detcoll(t, 40*time.Second, cleanEnv("DETCOLL_TOKEN=tok"), "launch", "--nnodes", "2", "--node-rank", strconv.Itoa(node),
				"--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", strconv.Itoa(port), "--rdzv-timeout", "20s",
				"--max-restarts", "2", "--grace-period", "1s", "/bin/sh", "-c", script)
		}()
	}
	<-done
	<-done
	for node, r := range res {
		if r.code != 0 || strings.Count(r.stderr, "restarting it (restart 1 of 2)") != 1 || strings.Contains(r.stderr, "restart 2 of 2") {
			t.Errorf("node %d: exit %d\n%s%s", node, r.code, r.stdout, r.stderr)
		}
		for local := range 2 {
			if want := fmt.Sprintf("[rank %d] attempt 1", 2*node+local); !strings.Contains(r.stdout, want) {
				t.Errorf("node %d: missing %q\n%s", node, want, r.stdout)
			}
		}
	}
}

// torchrun's usual multi-node line: --rdzv-backend c10d --rdzv-endpoint,
// no --node-rank. The node that binds the endpoint first is node 0, the
// other gets node rank 1; MASTER_PORT is a free port node 0 picked.
func TestC10dAssignsNodeRanks(t *testing.T) {
	port := freePort(t)
	var res [2]result
	done := make(chan struct{})
	for node := range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			res[node] = detcoll(t, 40*time.Second, cleanEnv("DETCOLL_TOKEN=tok"), "launch", "--nnodes", "2", "--nproc_per_node", "2",
				"--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:"+strconv.Itoa(port), "--rdzv_id", "c10djob", "--rdzv-timeout", "20s",
				"/bin/sh", "-c", `echo "node $GROUP_RANK rank $RANK of $WORLD_SIZE store $DETCOLL_STORE_ADDR port $MASTER_PORT"`)
		}()
	}
	<-done
	<-done
	all := res[0].stdout + res[1].stdout
	ports := regexp.MustCompile(`port (\d+)`).FindAllStringSubmatch(all, -1)
	for node, r := range res {
		if r.code != 0 {
			t.Fatalf("node %d: exit %d\n%s%s", node, r.code, r.stdout, r.stderr)
		}
	}
	for rank := range 4 {
		want := fmt.Sprintf("[rank %d] node %d rank %d of 4 store 127.0.0.1:%d", rank, rank/2, rank, port)
		if !strings.Contains(all, want) {
			t.Errorf("missing %q in\n%s", want, all)
		}
	}
	if len(ports) != 4 || ports[0][1] == strconv.Itoa(port) {
		t.Errorf("MASTER_PORT: %q", ports)
	}
	for _, p := range ports {
		if p[1] != ports[0][1] {
			t.Errorf("ranks disagree on MASTER_PORT: %q", ports)
		}
	}
}
