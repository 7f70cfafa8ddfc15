//go:build unix

package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func testConfig(t *testing.T, nproc int, mode string, extra ...string) (Config, *syncBuffer, *syncBuffer) {
	t.Helper()
	var stdout, stderr syncBuffer
	return Config{
		NprocPerNode: nproc,
		Standalone:   true,
		Cmd:          []string{os.Args[0]},
		Env:          helperEnv(mode, extra...),
		Stdout:       &stdout,
		Stderr:       &stderr,
		GracePeriod:  5 * time.Second,
	}, &stdout, &stderr
}

// runWithin runs Run, cancelling it (and failing the test) if it takes
// longer than limit. It may be called from any goroutine.
func runWithin(t *testing.T, ctx context.Context, cfg Config, limit time.Duration) (error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	select {
	case err := <-done:
		return err, time.Since(start)
	case <-time.After(limit):
		t.Errorf("Run did not return within %v; cancelling it", limit)
		cancel()
		return <-done, time.Since(start)
	}
}

func TestRunSuccessPrefixedOutput(t *testing.T) {
	cfg, stdout, stderr := testConfig(t, 3, "hello")
	err, _ := runWithin(t, context.Background(), cfg, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	outs := checkPrefixed(t, stdout.String(), 3)
	errs := checkPrefixed(t, stderr.String(), 3)
	for r := range 3 {
		got := outs[r]
		// hello, the long line split in two, the unterminated last line.
		want := []string{fmt.Sprintf("hello from %d", r), "long:" + strings.Repeat("x", MaxLineLen-5), strings.Repeat("x", 105), "no newline at the end"}
		if len(got) != len(want) {
			t.Fatalf("rank %d stdout has %d lines, want %d", r, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("rank %d stdout line %d = %.60q (%d bytes), want %.60q (%d bytes)", r, i, got[i], len(got[i]), want[i], len(want[i]))
			}
		}
		if e := errs[r]; len(e) != 1 || e[0] != fmt.Sprintf("to stderr from %d", r) {
			t.Errorf("rank %d stderr = %q", r, e)
		}
	}
}

func TestRunWorkerEnv(t *testing.T) {
	cfg, stdout, _ := testConfig(t, 2, "env", "LAUNCH_BASE=kept", "TORCHELASTIC_USE_AGENT_STORE=True",
		"DETCOLL_STORE_PORT=1", "RANK=99", "DETCOLL_TOKEN=stale")
	cfg.Token = "tok"
	err, _ := runWithin(t, context.Background(), cfg, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	lines := checkPrefixed(t, stdout.String(), 2)
	var storeAddr, masterPort [2]string
	for r := range 2 {
		vars := map[string]string{}
		var fromEnv string
		for _, l := range lines[r] {
			if strings.HasPrefix(l, "FromEnv=") {
				fromEnv = l
				continue
			}
			k, v, _ := strings.Cut(l, "=")
			vars[k] = v
		}
		want := map[string]string{
			"RANK": strconv.Itoa(r), "WORLD_SIZE": "2", "LOCAL_RANK": strconv.Itoa(r), "LOCAL_WORLD_SIZE": "2",
			"GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": strconv.Itoa(r), "ROLE_WORLD_SIZE": "2",
			"ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1",
			"DETCOLL_RANK": strconv.Itoa(r), "DETCOLL_WORLD_SIZE": "2", "DETCOLL_LOCAL_RANK": strconv.Itoa(r),
			"DETCOLL_LOCAL_WORLD_SIZE": "2", "DETCOLL_NODE_RANK": "0", "DETCOLL_NNODES": "1",
			"DETCOLL_TOKEN": "tok", "OMP_NUM_THREADS": "1", "LAUNCH_BASE": "kept",
		}
		for k, v := range want {
			if vars[k] != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, vars[k], v)
			}
		}
		// One node over the default transport (shared memory): Go's
		// default, or what this test's environment sets.
		if vars["GOMAXPROCS"] != os.Getenv("GOMAXPROCS") && os.Getenv("DETCOLL_TRANSPORT") == "" {
			t.Errorf("rank %d: GOMAXPROCS=%q, want it left as the environment has it (%q)", r, vars["GOMAXPROCS"], os.Getenv("GOMAXPROCS"))
		}
		for k, v := range map[string]string{"TORCHELASTIC_USE_AGENT_STORE": "False", "TORCHELASTIC_RESTART_COUNT": "0",
			"TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": "none", "DETCOLL_TCP_HOST": "127.0.0.1",
			"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"} {
			if vars[k] != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, vars[k], v)
			}
		}
		for _, k := range []string{"DETCOLL_STORE_PORT"} {
			if v, ok := vars[k]; ok {
				t.Errorf("rank %d: %s=%q should have been removed", r, k, v)
			}
		}
		storeAddr[r], masterPort[r] = vars["DETCOLL_STORE_ADDR"], vars["MASTER_PORT"]
		host, sport, err := net.SplitHostPort(storeAddr[r])
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("rank %d: DETCOLL_STORE_ADDR=%q", r, storeAddr[r])
		}
		if sport == masterPort[r] {
			t.Errorf("rank %d: MASTER_PORT=%s is the store's port", r, masterPort[r])
		}
		if p, err := strconv.Atoi(masterPort[r]); err != nil || p < 1 || p > 65535 {
			t.Errorf("rank %d: MASTER_PORT=%q", r, masterPort[r])
		}
		wantEnv := fmt.Sprintf("FromEnv=%+v err=<nil>", Env{Rank: r, WorldSize: 2, LocalRank: r, LocalWorldSize: 2,
			StoreAddr: storeAddr[r], Token: "tok", Source: SourceDetcoll})
		if fromEnv != wantEnv {
			t.Errorf("rank %d: %s, want %s", r, fromEnv, wantEnv)
		}
	}
	if storeAddr[0] != storeAddr[1] || masterPort[0] != masterPort[1] {
		t.Errorf("ranks disagree: store %v, MASTER_PORT %v", storeAddr, masterPort)
	}
}

func TestRunRandomTokenAndOMP(t *testing.T) {
	cfg, stdout, _ := testConfig(t, 1, "env", "OMP_NUM_THREADS=7", "GOMAXPROCS=3")
	if err, _ := runWithin(t, context.Background(), cfg, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	if !regexp.MustCompile(`(?m)^\[rank 0\] DETCOLL_TOKEN=[0-9a-f]{32}$`).MatchString(out) {
		t.Errorf("no random token:\n%s", out)
	}
	if !strings.Contains(out, "[rank 0] OMP_NUM_THREADS=7\n") {
		t.Errorf("OMP_NUM_THREADS not kept:\n%s", out)
	}
	if !strings.Contains(out, "[rank 0] GOMAXPROCS=3\n") {
		t.Errorf("GOMAXPROCS not kept:\n%s", out)
	}
}

// Workers whose collectives go over TCP get the CPUs' share as GOMAXPROCS;
// an explicit GOMAXPROCS is kept.
func TestRunGOMAXPROCSShareOverTCP(t *testing.T) {
	share := strconv.Itoa(max(1, runtime.NumCPU()/2))
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"DETCOLL_TRANSPORT=tcp"}, share},
		{[]string{"DETCOLL_TRANSPORT= TCP "}, share},
		{[]string{"DETCOLL_TRANSPORT=tcp", "GOMAXPROCS=3"}, "3"},
	} {
		cfg, stdout, _ := testConfig(t, 2, "env")
		// Only this case's GOMAXPROCS, not one from the test's environment.
		cfg.Env = append(slices.DeleteFunc(cfg.Env, func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") }), tc.env...)
		if err, _ := runWithin(t, context.Background(), cfg, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		for r := range 2 {
			if want := fmt.Sprintf("[rank %d] GOMAXPROCS=%s\n", r, tc.want); !strings.Contains(stdout.String(), want) {
				t.Errorf("env %q: want %q in:\n%s", tc.env, want, stdout.String())
			}
		}
	}
}

// One worker per node keeps Go's default: GOMAXPROCS is not set for it.
func TestRunOneWorkerNoGOMAXPROCS(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set in this test's environment, and workers inherit it")
	}
	cfg, stdout, _ := testConfig(t, 1, "env", "DETCOLL_TRANSPORT=tcp")
	if err, _ := runWithin(t, context.Background(), cfg, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if out := stdout.String(); strings.Contains(out, "GOMAXPROCS=") {
		t.Errorf("GOMAXPROCS set for a single worker:\n%s", out)
	}
}

func TestRunWorkersReachStore(t *testing.T) {
	cfg, stdout, _ := testConfig(t, 3, "store")
	err, _ := runWithin(t, context.Background(), cfg, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stdout)
	}
	for r := range 3 {
		if want := fmt.Sprintf("[rank %d] store ok source=detcoll world=3\n", r); !strings.Contains(stdout.String(), want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
}

func TestRunFailureStopsOthers(t *testing.T) {
	cfg, stdout, stderr := testConfig(t, 3, "fail", "LAUNCH_FAIL_RANK=1", "LAUNCH_FAIL_CODE=3")
	err, took := runWithin(t, context.Background(), cfg, 30*time.Second)
	var we *WorkerError
	if !errors.As(err, &we) {
		t.Fatalf("Run = %v, want a *WorkerError", err)
	}
	if we.Rank != 1 || we.LocalRank != 1 || we.NodeRank != 0 || we.ExitStatus != 3 || we.Signal != 0 || we.Remote || we.Pid <= 0 {
		t.Errorf("WorkerError = %+v, want rank 1 exit status 3", we)
	}
	if ExitCode(err) != 3 {
		t.Errorf("ExitCode = %d, want 3", ExitCode(err))
	}
	// The last 20 lines: line 11 … line 29 and the unterminated stderr line.
	if len(we.Tail) != TailLines || we.Tail[0] != "line 11" || we.Tail[18] != "line 29" || we.Tail[19] != "fatal: boom" {
		t.Errorf("Tail = %q", we.Tail)
	}
	if !strings.Contains(we.Error(), "rank 1") || !strings.Contains(we.Error(), "status 3") {
		t.Errorf("Error() = %q", we.Error())
	}
	if rep := we.Report(); !strings.Contains(rep, "[rank 1] fatal: boom") {
		t.Errorf("Report() = %q", rep)
	}
	// The sleepers die of SIGTERM at once, well within the grace period.
	if took >= cfg.GracePeriod {
		t.Errorf("Run took %v", took)
	}
	checkPrefixed(t, stdout.String(), 3)
	checkPrefixed(t, stderr.String(), 3)
}

func TestRunStubbornWorkerKilledAfterGrace(t *testing.T) {
	cfg, stdout, _ := testConfig(t, 3, "fail", "LAUNCH_FAIL_RANK=2", "LAUNCH_FAIL_CODE=4", "LAUNCH_IGNORE_TERM=1")
	cfg.GracePeriod = 500 * time.Millisecond
	err, took := runWithin(t, context.Background(), cfg, 30*time.Second)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 2 || we.ExitStatus != 4 {
		t.Fatalf("Run = %#v, want rank 2 exit status 4", err)
	}
	// A sleeper that printed had already ignored SIGTERM (rank 2 fails
	// 100 ms in), so it can only have died of SIGKILL after the grace period.
	if strings.Count(stdout.String(), "sleeping") > 0 && took < cfg.GracePeriod {
		t.Errorf("Run took %v, less than the grace period although workers ignore SIGTERM", took)
	}
	if took > cfg.GracePeriod+4*time.Second {
		t.Errorf("Run took %v: stubborn workers not killed after the grace period", took)
	}
}

func TestRunWorkerKilledBySignal(t *testing.T) {
	cfg, _, _ := testConfig(t, 2, "fail", "LAUNCH_FAIL_RANK=0", "LAUNCH_FAIL_SIGNAL=9")
	err, _ := runWithin(t, context.Background(), cfg, 30*time.Second)
	var we *WorkerError
	if !errors.As(err, &we) {
		t.Fatalf("Run = %v, want a *WorkerError", err)
	}
	if we.Rank != 0 || we.Signal != syscall.SIGKILL || we.ExitStatus != -1 {
		t.Errorf("WorkerError = %+v, want rank 0 killed by SIGKILL", we)
	}
	if !strings.Contains(we.Error(), "signal 9") {
		t.Errorf("Error() = %q", we.Error())
	}
	if ExitCode(err) != 137 {
		t.Errorf("ExitCode = %d, want 137", ExitCode(err))
	}
}

func TestRunGroupSignalReachesChildren(t *testing.T) {
	cfg, stdout, _ := testConfig(t, 2, "grandchild")
	err, _ := runWithin(t, context.Background(), cfg, 30*time.Second)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 0 || we.ExitStatus != 7 {
		t.Fatalf("Run = %v, want rank 0 exit status 7\n%s", err, stdout)
	}
	// Rank 1's child was in rank 1's process group and got SIGTERM too.
	m := regexp.MustCompile(`\[rank 1\] child (\d+)`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no child pid in\n%s", stdout)
	}
	pid, _ := strconv.Atoi(m[1])
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("rank 1's child %d survived", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Rank 0's child is left over (rank 0 exited by itself); clean it up.
	if m := regexp.MustCompile(`\[rank 0\] child (\d+)`).FindStringSubmatch(stdout.String()); m != nil {
		pid, _ := strconv.Atoi(m[1])
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func TestRunContextCancelStopsWorkers(t *testing.T) {
	cfg, stdout, _ := testConfig(t, 2, "trap")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		stdout.waitFor(t, "ready", 2)
		cancel()
	}()
	err, _ := runWithin(t, ctx, cfg, 30*time.Second)
	var ie *InterruptedError
	if !errors.As(err, &ie) || ie.Signal != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want an InterruptedError for a cancelled context", err)
	}
	for r := range 2 {
		if want := fmt.Sprintf("[rank %d] got terminated\n", r); !strings.Contains(stdout.String(), want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
	if ExitCode(err) != 130 {
		t.Errorf("ExitCode = %d, want 130", ExitCode(err))
	}
}

func TestRunForwardsSignals(t *testing.T) {
	cfg, stdout, _ := testConfig(t, 3, "trap")
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	go func() {
		stdout.waitFor(t, "ready", 3)
		sigs <- syscall.SIGINT
	}()
	err, _ := runWithin(t, context.Background(), cfg, 30*time.Second)
	var ie *InterruptedError
	if !errors.As(err, &ie) || ie.Signal != syscall.SIGINT {
		t.Fatalf("Run = %v, want an InterruptedError for SIGINT", err)
	}
	for r := range 3 {
		if want := fmt.Sprintf("[rank %d] got interrupt\n", r); !strings.Contains(stdout.String(), want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
	if ExitCode(err) != 130 {
		t.Errorf("ExitCode = %d, want 130", ExitCode(err))
	}
}

// A launcher process wired like a command forwards a SIGTERM it receives.
func TestLauncherProcessForwardsSIGTERM(t *testing.T) {
	var out syncBuffer
	cmd := exec.Command(os.Args[0])
	cmd.Env = helperEnv("launcher")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out.waitFor(t, "ready", 2)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Fatalf("launcher exited with %v, want status 143\n%s", err, &out)
	}
	for r := range 2 {
		if want := fmt.Sprintf("[rank %d] got terminated\n", r); !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in\n%s", want, &out)
		}
	}
}

func TestRunStartError(t *testing.T) {
	cfg, _, _ := testConfig(t, 2, "sleep")
	cfg.Cmd = []string{"/nonexistent/detcoll-worker"}
	err, _ := runWithin(t, context.Background(), cfg, 30*time.Second)
	var se *StartError
	if !errors.As(err, &se) || se.Rank != 0 {
		t.Fatalf("Run = %v, want a StartError for rank 0", err)
	}
	if ExitCode(err) != 127 {
		t.Errorf("ExitCode = %d, want 127", ExitCode(err))
	}
}

func TestRunAlreadyCancelled(t *testing.T) {
	cfg, stdout, _ := testConfig(t, 2, "hello")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if stdout.String() != "" {
		t.Errorf("workers ran: %s", stdout)
	}
}

func TestRunConfigErrors(t *testing.T) {
	base, _, _ := testConfig(t, 1, "hello")
	for _, tt := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no command", func(c *Config) { c.Cmd = nil }, "no worker command"},
		{"negative nproc", func(c *Config) { c.NprocPerNode = -1 }, "NprocPerNode"},
		{"node rank out of range", func(c *Config) { c.Standalone = false; c.Nnodes = 2; c.NodeRank = 2 }, "NodeRank (--node-rank)=2"},
		{"standalone multi-node", func(c *Config) { c.Nnodes = 2 }, "Standalone (--standalone) needs Nnodes=1"},
		{"multi-node no addr", func(c *Config) { c.Standalone = false; c.Nnodes = 2; c.MasterPort = 5 }, "need MasterAddr"},
		{"multi-node no port", func(c *Config) { c.Standalone = false; c.Nnodes = 2; c.MasterAddr = "h" }, "need MasterPort"},
		{"bad port", func(c *Config) { c.MasterPort = 70000 }, "MasterPort (--master-port)=70000"},
		{"negative grace", func(c *Config) { c.GracePeriod = -1 }, "GracePeriod"},
		{"node 1 without token", func(c *Config) {
			c.Standalone = false
			c.Nnodes, c.NodeRank, c.MasterAddr, c.MasterPort = 2, 1, "127.0.0.1", 5000
		}, "needs the job's token"},
		{"master addr not here", func(c *Config) { c.Standalone = false; c.MasterAddr = "192.0.2.1" }, "not an address of this host"},
		{"store port is torch's", func(c *Config) { c.MasterPort, c.StorePort = 5000, 5000 }, "StorePort (--store-port)=5000 is MasterPort"},
		{"bad binding", func(c *Config) { c.BindTo = "socket" }, `BindTo (--bind-to)="socket" is not auto, none or core`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			tt.mod(&cfg)
			err := Run(context.Background(), cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want ErrInvalidConfig mentioning %q", err, tt.want)
			}
			if ExitCode(err) != 2 {
				t.Errorf("ExitCode = %d, want 2", ExitCode(err))
			}
		})
	}
}

// runNodes runs one Run per node concurrently, as on separate hosts.
func runNodes(t *testing.T, nnodes, nproc int, mode string, extra ...string) ([]error, []*syncBuffer) {
	t.Helper()
	port, storePort := freeTestPort2(t)
	errs := make([]error, nnodes)
	outs := make([]*syncBuffer, nnodes)
	var wg sync.WaitGroup
	for node := range nnodes {
		cfg, stdout, _ := testConfig(t, nproc, mode, extra...)
		cfg.Standalone = false
		cfg.Nnodes, cfg.NodeRank = nnodes, node
		cfg.MasterAddr, cfg.MasterPort, cfg.StorePort = "127.0.0.1", port, storePort
		cfg.Token = "shared"
		cfg.GracePeriod = time.Second
		outs[node] = stdout
		wg.Add(1)
		go func() {
			defer wg.Done()
			if node > 0 {
				time.Sleep(50 * time.Millisecond) // let node 0 bind first, though Dial retries anyway
			}
			errs[node], _ = runWithin(t, context.Background(), cfg, 45*time.Second)
		}()
	}
	wg.Wait()
	return errs, outs
}

func TestRunMultiNode(t *testing.T) {
	errs, outs := runNodes(t, 2, 2, "store")
	for node, err := range errs {
		if err != nil {
			t.Errorf("node %d: Run = %v\n%s", node, err, outs[node])
		}
	}
	for node := range 2 {
		for local := range 2 {
			want := fmt.Sprintf("[rank %d] store ok source=detcoll world=4\n", 2*node+local)
			if !strings.Contains(outs[node].String(), want) {
				t.Errorf("node %d: missing %q in\n%s", node, want, outs[node])
			}
		}
	}
}

func TestRunMultiNodeEnv(t *testing.T) {
	errs, outs := runNodes(t, 2, 1, "env")
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("Run = %v", errs)
	}
	grab := func(out, k string) string {
		m := regexp.MustCompile(`(?m)^\[rank \d\] ` + k + `=(.*)$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no %s in\n%s", k, out)
		}
		return m[1]
	}
	o0, o1 := outs[0].String(), outs[1].String()
	if grab(o0, "MASTER_PORT") != grab(o1, "MASTER_PORT") || grab(o0, "DETCOLL_STORE_ADDR") != grab(o1, "DETCOLL_STORE_ADDR") {
		t.Errorf("nodes disagree:\n%s\n%s", o0, o1)
	}
	if strings.HasSuffix(grab(o0, "DETCOLL_STORE_ADDR"), ":"+grab(o0, "MASTER_PORT")) {
		t.Errorf("MASTER_PORT is the store's port")
	}
	if grab(o1, "RANK") != "1" || grab(o1, "GROUP_RANK") != "1" || grab(o1, "WORLD_SIZE") != "2" || grab(o1, "LOCAL_RANK") != "0" {
		t.Errorf("node 1 env:\n%s", o1)
	}
}

func TestRunMultiNodeFailure(t *testing.T) {
	// Rank 3 (node 1) exits 5 after the store round; everyone else sleeps.
	errs, outs := runNodes(t, 2, 2, "store", "LAUNCH_FAIL_RANK=3", "LAUNCH_FAIL_CODE=5")
	for node, err := range errs {
		var we *WorkerError
		if !errors.As(err, &we) {
			t.Fatalf("node %d: Run = %v, want a *WorkerError\n%s", node, err, outs[node])
		}
		if we.Rank != 3 || we.NodeRank != 1 || we.ExitStatus != 5 || we.Remote != (node == 0) {
			t.Errorf("node %d: WorkerError = %+v", node, we)
		}
		if ExitCode(err) != 5 {
			t.Errorf("node %d: ExitCode = %d", node, ExitCode(err))
		}
		// The tail travels to the other node with the root cause.
		if len(we.Tail) == 0 || we.Tail[len(we.Tail)-1] != "store ok source=detcoll world=4" {
			t.Errorf("node %d: Tail = %q", node, we.Tail)
		}
	}
}

// Interrupting one node stops the whole job.
func TestRunMultiNodeInterrupt(t *testing.T) {
	port, freeStore := freeTestPort2(t)
	ctx0, cancel0 := context.WithCancel(context.Background())
	defer cancel0()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([]*syncBuffer, 2)
	for node := range 2 {
		cfg, stdout, _ := testConfig(t, 1, "trap")
		cfg.Standalone = false
		cfg.Nnodes, cfg.NodeRank, cfg.MasterAddr, cfg.MasterPort = 2, node, "127.0.0.1", port
		cfg.StorePort, cfg.Token = freeStore, "shared"
		outs[node] = stdout
		ctx := context.Background()
		if node == 0 {
			ctx = ctx0
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[node], _ = runWithin(t, ctx, cfg, 30*time.Second)
		}()
	}
	outs[0].waitFor(t, "ready", 1)
	outs[1].waitFor(t, "ready", 1)
	cancel0()
	wg.Wait()
	if !errors.Is(errs[0], context.Canceled) {
		t.Errorf("node 0: Run = %v, want context.Canceled", errs[0])
	}
	var ae *AbortError
	if !errors.As(errs[1], &ae) || ae.Node != 0 || !strings.Contains(ae.Reason, "interrupted") {
		t.Errorf("node 1: Run = %v, want an AbortError from node 0", errs[1])
	}
	if !strings.Contains(outs[1].String(), "[rank 1] got terminated") {
		t.Errorf("node 1's worker was not stopped:\n%s", outs[1])
	}
}

func TestRunClosedSignalsChannel(t *testing.T) {
	cfg, _, _ := testConfig(t, 2, "hello")
	sigs := make(chan os.Signal)
	close(sigs)
	cfg.Signals = sigs
	if err, _ := runWithin(t, context.Background(), cfg, 30*time.Second); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestRunMultiNodeConfigMismatch(t *testing.T) {
	port, freeStore := freeTestPort2(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for node := range 2 {
		cfg, _, _ := testConfig(t, 1+node, "hello") // node 1 has a different NprocPerNode
		cfg.Standalone = false
		cfg.Nnodes, cfg.NodeRank, cfg.MasterAddr, cfg.MasterPort = 2, node, "127.0.0.1", port
		cfg.StorePort, cfg.Token = freeStore, "shared"
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[node], _ = runWithin(t, context.Background(), cfg, 30*time.Second)
		}()
	}
	wg.Wait()
	if !errors.Is(errs[1], ErrInvalidConfig) {
		t.Errorf("node 1: Run = %v, want ErrInvalidConfig", errs[1])
	}
	var ae *AbortError
	if !errors.As(errs[0], &ae) || ae.Node != 1 {
		t.Errorf("node 0: Run = %v, want an AbortError from node 1", errs[0])
	}
}

// A node waiting for absent peers says so, then times out naming them.
func TestRunRendezvousWaitsLoudlyThenTimesOut(t *testing.T) {
	defer func(n, r time.Duration) { waitNotice, waitRepeat = n, r }(waitNotice, waitRepeat)
	waitNotice, waitRepeat = 200*time.Millisecond, 300*time.Millisecond
	cfg, _, _ := testConfig(t, 2, "hello")
	var stderr syncBuffer
	cfg.Stderr = &stderr
	cfg.Standalone = false
	cfg.Nnodes, cfg.MasterAddr = 3, "127.0.0.1"
	cfg.MasterPort, cfg.StorePort = freeTestPort2(t)
	cfg.RdzvTimeout = time.Second
	err, took := runWithin(t, context.Background(), cfg, 20*time.Second)
	var rt *RendezvousTimeoutError
	if !errors.As(err, &rt) || !errors.Is(err, ErrRendezvousTimeout) || fmt.Sprint(rt.Missing) != "[1 2]" ||
		!strings.Contains(err.Error(), "node 1 (ranks 2-3), node 2 (ranks 4-5) never joined") {
		t.Fatalf("Run = %v, want a rendezvous timeout naming nodes 1 and 2", err)
	}
	if !strings.Contains(stderr.String(), "detcoll launch: node 0: waiting for node 1 (ranks 2-3), node 2 (ranks 4-5) to join") {
		t.Errorf("no waiting notice:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "DETCOLL_TOKEN=") {
		t.Errorf("node 0 did not print its generated token:\n%s", stderr.String())
	}
	if took > 10*time.Second {
		t.Errorf("took %v", took)
	}
}

// A node whose node 0 never serves says what it waits for.
func TestRunNodeWaitsForStoreLoudly(t *testing.T) {
	defer func(n, r time.Duration) { waitNotice, waitRepeat = n, r }(waitNotice, waitRepeat)
	waitNotice, waitRepeat = 200*time.Millisecond, 300*time.Millisecond
	cfg, _, _ := testConfig(t, 1, "hello")
	var stderr syncBuffer
	cfg.Stderr = &stderr
	cfg.Standalone = false
	cfg.Nnodes, cfg.NodeRank, cfg.MasterAddr = 2, 1, "127.0.0.1"
	cfg.MasterPort, cfg.StorePort = freeTestPort2(t)
	cfg.Token, cfg.RdzvTimeout = "tok", time.Second
	err, _ := runWithin(t, context.Background(), cfg, 20*time.Second)
	if !errors.Is(err, ErrRendezvousTimeout) || !strings.Contains(err.Error(), "node 0's store never answered") {
		t.Fatalf("Run = %v", err)
	}
	if !strings.Contains(stderr.String(), "detcoll launch: node 1: waiting for node 0's store at 127.0.0.1:") {
		t.Errorf("no waiting notice:\n%s", stderr.String())
	}
}
