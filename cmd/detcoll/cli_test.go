package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/detcoll/detcoll/bench"
)

// run runs the binary with a bound, returning its combined output and
// exit status (-1 when it did not exit by itself).
func run(t *testing.T, dir string, env []string, limit time.Duration, bin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v did not finish within %v:\n%s", args, limit, out.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("%v: %v", args, err)
	return "", -1
}

// cleanEnv is the environment without any launcher's or detcoll's variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "DETCOLL_") || k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK" ||
			k == "MASTER_ADDR" || k == "MASTER_PORT" || strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "OMPI_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

var quick = []string{"--device", "cpu", "--warmup", "0", "--iterations", "1", "--samples", "1"}

// Every bad input is a usage error (status 2) that names the flag or the
// variable, found before any rank starts (no "[rank" line) and reported once.
func TestBenchUsageErrors(t *testing.T) {
	bin := buildDetcoll(t)
	dir := t.TempDir()
	cases := []struct {
		name  string
		env   []string
		args  []string
		field string
	}{
		{"size not whole elements", nil, []string{"--size-bytes", "4097"}, "--size-bytes: 4097 is not a whole number of bf16 elements"},
		{"size below one element", nil, []string{"--size-bytes", "3"}, "--size-bytes: 3 is not a whole number"},
		{"negative size", nil, []string{"--size-bytes", "-4096"}, `--size-bytes: size "-4096" is negative`},
		{"negative size among others", nil, []string{"--size-bytes", "4096", "-4096"}, `--size-bytes: size "-4096" is negative`},
		{"size over memory", nil, []string{"--size-bytes", "64G"}, "--size-bytes: 64 GiB per rank needs about"},
		{"iterations env", []string{"DETCOLL_ITERATIONS=abc"}, nil, `DETCOLL_ITERATIONS: "abc" is not an integer`},
		{"seed env", []string{"DETCOLL_SEED=x"}, nil, `DETCOLL_SEED: "x" is not an unsigned integer`},
		{"timeout env", []string{"DETCOLL_TIMEOUT=soon"}, nil, `DETCOLL_TIMEOUT: "soon" is not a positive duration`},
		{"binding env", []string{"DETCOLL_BIND_TO=socket"}, nil, `DETCOLL_BIND_TO: "socket" is not auto, none or core`},
		{"init timeout env", []string{"DETCOLL_INIT_TIMEOUT=0s"}, nil, `DETCOLL_INIT_TIMEOUT: "0s" is not a positive duration`},
		{"init timeout", nil, []string{"--init-timeout", "-1s"}, "--init-timeout: -1s is not positive"},
		{"graph on cpu", nil, []string{"--graph"}, "--graph: CUDA graphs need a GPU device"},
		{"plot extension", nil, []string{"--plot", "out.jpg"}, "--plot: out.jpg: want a .svg or .png file"},
		{"plot directory", nil, []string{"--plot", "/nonexistent/x.svg"}, "--plot: /nonexistent/x.svg: directory /nonexistent does not exist"},
		{"output directory", nil, []string{"--output", "/nonexistent/r.json"}, "--output: /nonexistent/r.json: directory /nonexistent does not exist"},
		{"samples 0", nil, []string{"--samples", "0"}, "--samples: 0: want ≥ 1"},
		{"nproc 0", nil, []string{"--nproc-per-node", "0"}, "--nproc-per-node: 0: want ≥ 1"},
		{"nproc -1", nil, []string{"--nproc-per-node", "-1"}, "--nproc-per-node: -1: want ≥ 1"},
		{"sweep reversed", nil, []string{"-b", "64K", "-e", "4K"}, "-e/--maxbytes: 4K is below -b 64K"},
		{"sweep factor", nil, []string{"-b", "4K", "-e", "64K", "-f", "1"}, "-f/--stepfactor: 1: want an integer ≥ 2"},
		{"sweep and sizes", nil, []string{"-b", "4K", "--size-bytes", "4096"}, "give either --size-bytes or the -b/-e/-f sweep"},
		{"format", nil, []string{"--format", "csv"}, `--format: "csv" is not table or nccl-tests`},
		{"device", nil, []string{"--device", "tpu"}, `--device: "tpu" is not auto, cpu, cuda or rocm`},
		{"unknown flag", nil, []string{"--sizes", "4096"}, "unknown flag: --sizes"},
		{"dtype", nil, []string{"--dtype", "int8"}, "--dtype:"},
		{"peer file", nil, []string{"--peer", filepath.Join(dir, "missing.json")}, "--peer:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"bench", "--nproc-per-node", "2", "--output", filepath.Join(dir, "r.json")}, quick...)
			args = append(args, c.args...)
			out, code := run(t, dir, c.env, 20*time.Second, bin, args...)
			if code != 2 {
				t.Fatalf("exit status %d, want 2:\n%s", code, out)
			}
			if !strings.Contains(out, c.field) {
				t.Fatalf("output does not name the problem %q:\n%s", c.field, out)
			}
			if strings.Contains(out, "[rank") {
				t.Fatalf("ranks started before the input was checked:\n%s", out)
			}
			if n := strings.Count(out, "detcoll:"); n != 1 {
				t.Fatalf("reported %d times:\n%s", n, out)
			}
			if strings.Contains(out, ".bench-") || strings.Contains(out, ".detcoll-check") {
				t.Fatalf("a temporary file name in the error:\n%s", out)
			}
			if _, err := os.Stat(filepath.Join(dir, "r.json")); err == nil {
				t.Fatalf("a report was written")
			}
		})
	}
}

// Under a launcher every rank finds the usage error; only rank 0 says it.
func TestBenchUsageErrorUnderLaunchReportedByRankZero(t *testing.T) {
	bin := buildDetcoll(t)
	out, code := run(t, t.TempDir(), nil, 30*time.Second, bin, "launch", "--standalone", "--nproc-per-node", "3", "--",
		bin, "bench", "--device", "cpu", "--samples", "0")
	if code == 0 {
		t.Fatalf("exit 0:\n%s", out)
	}
	for _, r := range []string{"[rank 1] detcoll:", "[rank 2] detcoll:"} {
		if strings.Contains(out, r) {
			t.Fatalf("%s reported too:\n%s", r, out)
		}
	}
	if !strings.Contains(out, "[rank 0] detcoll: --samples: 0: want ≥ 1") {
		t.Fatalf("rank 0 did not report it:\n%s", out)
	}
}

// DETCOLL_SEED is the seed of the inputs, recorded in the report.
func TestBenchSeedFromEnvironment(t *testing.T) {
	bin := buildDetcoll(t)
	dir := t.TempDir()
	rep := filepath.Join(dir, "r.json")
	args := append([]string{"bench", "--nproc-per-node", "1", "--size-bytes", "4096", "--operations", "all_reduce", "--output", rep}, quick...)
	if out, code := run(t, dir, []string{"DETCOLL_SEED=4242"}, 60*time.Second, bin, args...); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	r, err := bench.ReadJSON(rep)
	if err != nil {
		t.Fatal(err)
	}
	if r.Seed != 4242 {
		t.Fatalf("seed %d, want 4242", r.Seed)
	}
}

// --version and the report say which code ran: the stamped commit and
// dirty flag (Makefile), else git in the checkout, else "unknown".
func TestVersionAndCommit(t *testing.T) {
	bin := buildDetcoll(t)
	out, code := run(t, t.TempDir(), nil, 10*time.Second, stampedBin, "--version")
	if code != 0 || !strings.Contains(out, "detcoll "+stampVersion+", commit "+stampCommit+" (dirty, from ldflags)") {
		t.Fatalf("stamped --version (exit %d): %q", code, out)
	}
	dir := t.TempDir()
	rep := filepath.Join(dir, "r.json")
	args := append([]string{"bench", "--nproc-per-node", "1", "--size-bytes", "4096", "--operations", "all_gather", "--output", rep}, quick...)
	if out, code := run(t, dir, nil, 60*time.Second, stampedBin, args...); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	r, err := bench.ReadJSON(rep)
	if err != nil {
		t.Fatal(err)
	}
	if r.GitCommit != stampCommit || r.GitDirty == nil || !*r.GitDirty || r.GitCommitSource != "ldflags" || r.DetcollVersion != stampVersion {
		t.Fatalf("report: commit %q dirty %v source %q version %q", r.GitCommit, r.GitDirty, r.GitCommitSource, r.DetcollVersion)
	}

	// Unstamped, run from inside this checkout: git's HEAD.
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("git rev-parse HEAD: %v (not a git checkout)", err)
	}
	wd, _ := os.Getwd()
	out, code = run(t, wd, nil, 10*time.Second, bin, "--version")
	if code != 0 || !strings.Contains(out, "commit "+strings.TrimSpace(string(head))) || !strings.Contains(out, "from checkout") {
		t.Fatalf("unstamped --version in the checkout (exit %d): %q, HEAD %s", code, out, head)
	}
	// Unstamped, outside any checkout: unknown, and says so.
	out, code = run(t, t.TempDir(), nil, 10*time.Second, bin, "--version")
	if code != 0 || !strings.Contains(out, "commit unknown (dirty state unknown)") {
		t.Fatalf("unstamped --version outside a checkout (exit %d): %q", code, out)
	}
}

// A report's nodes is the number of nodes of the job: two launchers of one
// node each (on this host) make a 2-node job.
func TestBenchReportsNodes(t *testing.T) {
	bin := buildDetcoll(t)
	dir := t.TempDir()
	port, storePort := freeTCPPort(t), freeTCPPort(t) // torch's port and node 0's store
	node := func(rank string, out string) *exec.Cmd {
		args := append([]string{"launch", "--nnodes", "2", "--node-rank", rank, "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
			"--master-port", port, "--store-port", storePort, "--", bin, "bench", "--size-bytes", "4096", "--operations", "all_reduce", "--output", out}, quick...)
		c := exec.Command(bin, args...)
		// A multi-node job needs the job token on every node (docs/launcher.md).
		c.Env = append(cleanEnv(), "DETCOLL_TOKEN=0123456789abcdef0123456789abcdef")
		return c
	}
	n1 := node("1", "")
	var o1 bytes.Buffer
	n1.Stdout, n1.Stderr = &o1, &o1
	if err := n1.Start(); err != nil {
		t.Fatal(err)
	}
	defer n1.Process.Kill()
	rep := filepath.Join(dir, "r.json")
	n0 := node("0", rep)
	done := make(chan error, 1)
	var o0 bytes.Buffer
	n0.Stdout, n0.Stderr = &o0, &o0
	go func() { done <- n0.Run() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("node 0: %v\n%s\nnode 1:\n%s", err, o0.String(), o1.String())
		}
	case <-time.After(60 * time.Second):
		n0.Process.Kill()
		n1.Process.Kill()
		<-done // o0 is written until Run returns
		n1.Wait()
		t.Fatalf("the 2-node job did not finish:\n%s\nnode 1:\n%s", o0.String(), o1.String())
	}
	n1.Wait()
	r, err := bench.ReadJSON(rep)
	if err != nil {
		t.Fatal(err)
	}
	if r.Nodes != 2 || r.WorldSize != 2 {
		t.Fatalf("nodes %d, world size %d; want 2 and 2", r.Nodes, r.WorldSize)
	}
}

// verify --device cuda or rocm on a machine (or build) without that GPU
// fails and says that the device was not checked.
func TestVerifyDeviceNotChecked(t *testing.T) {
	bin := buildDetcoll(t)
	if os.Getenv("DETCOLL_GPU_TESTS") != "" {
		t.Skip("DETCOLL_GPU_TESTS is set: a GPU may be here")
	}
	for _, dev := range []string{"cuda", "rocm"} {
		out, code := run(t, t.TempDir(), nil, 120*time.Second, bin, "verify", "--device", dev, "--world-sizes", "2", "--counts", "1")
		if code == 0 {
			if strings.Contains(out, "nccl ") || strings.Contains(out, "rccl ") {
				t.Skipf("a %s device was checked here", dev)
			}
			t.Fatalf("verify --device %s exit 0 with no device checked:\n%s", dev, out)
		}
		if !strings.Contains(out, "device "+dev+": NOT CHECKED") || !strings.Contains(out, "device not checked") {
			t.Fatalf("verify --device %s does not say the device was not checked:\n%s", dev, out)
		}
	}
	// Under a launcher too.
	out, code := run(t, t.TempDir(), nil, 120*time.Second, bin, "launch", "--standalone", "--nproc-per-node", "2", "--",
		bin, "verify", "--device", "cuda", "--world-sizes", "2", "--counts", "1")
	if code == 0 && !strings.Contains(out, "nccl ") {
		t.Fatalf("launched verify --device cuda exit 0 with no device checked:\n%s", out)
	}
	if code != 0 && !strings.Contains(out, "device not checked") {
		t.Fatalf("launched verify --device cuda does not say the device was not checked:\n%s", out)
	}
	out, code = run(t, t.TempDir(), nil, 10*time.Second, bin, "verify", "--device", "gpu")
	if code != 2 || !strings.Contains(out, "--device") {
		t.Fatalf("verify --device gpu: exit %d:\n%s", code, out)
	}
}

// env --json never prints the store token.
func TestEnvJSONHidesToken(t *testing.T) {
	bin := buildDetcoll(t)
	const tok = "s3cr3t-token-value"
	for _, args := range [][]string{{"env", "--json"}, {"env"}} {
		out, code := run(t, t.TempDir(), []string{"DETCOLL_TOKEN=" + tok, "DETCOLL_STORE_ADDR=127.0.0.1:1", "DETCOLL_RANK=0", "DETCOLL_WORLD_SIZE=2"},
			20*time.Second, bin, args...)
		if code != 0 || strings.Contains(out, tok) {
			t.Fatalf("%v (exit %d) prints the token:\n%s", args, code, out)
		}
		if len(args) == 2 {
			var m map[string]any
			if err := json.Unmarshal([]byte(out), &m); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			le, _ := m["launch_env"].(map[string]any)
			if le["token_set"] != true {
				t.Fatalf("launch_env %v: want token_set true", le)
			}
		}
	}
}

// faultPhases are the phases of `detcoll bench` that TestBenchFaultMatrix
// stops or kills a rank in (DETCOLL_TEST_FAULT, internal/app/fault.go),
// each with what every other rank's error must name: the mesh set-up
// (before joining the store; once the transport is connected, before the
// first collective), the raw TCP all-to-all, the native CPU ring and the
// middle of a detcoll collective.
var faultPhases = []struct{ name, names string }{
	{"rendezvous", `mesh set-up`},
	{"connect", `mesh set-up|counting nodes`},
	{"raw", `raw all-to-all`},
	{"native", `native all_reduce`},
	// A rank whose part of the AllReduce was done waits in bench's
	// agreement on the first run's outcome instead.
	{"detcoll", `all_reduce bf16 gather_tree 4096 B: (detcoll: AllReduce on rank|bench: deterministic first run)`},
}

// Rank 1 stopped (SIGSTOP) or killed (SIGKILL) in each phase of bench, at
// W = 2, 3 and 4: every other rank prints its own error naming the phase
// (the first to time out, and the ones the launcher stops then), within the
// 2 s timeout; the launcher names rank 1, stopped or killed by signal 9;
// nothing waits past the bound.
func TestBenchFaultMatrix(t *testing.T) {
	bin := buildDetcoll(t)
	// 30 cells, about 15 s in all on the 2-core CI machine (each a stop
	// ~2–3 s, a kill < 1 s, run two at a time).
	for _, ph := range faultPhases {
		for _, sig := range []string{"stop", "kill"} {
			for _, w := range []int{2, 3, 4} {
				t.Run(ph.name+"/"+sig+"/W="+strconv.Itoa(w), func(t *testing.T) {
					t.Parallel()
					testBenchFault(t, bin, nil, ph.name, ph.names, sig, w, "4096")
				})
			}
		}
	}
}

// TestBenchFaultExposed: the fault matrix's detcoll phase in collectives
// whose ranks read each other's buffers over shared memory (exposures,
// where the kernel lets them, whatever the calibration would choose): an AllGather of 256 KiB per rank at W = 2
// and 3, an AllReduce of 256 KiB at W = 2.
func TestBenchFaultExposed(t *testing.T) {
	bin := buildDetcoll(t)
	for _, c := range []struct {
		op, name string
		ws       []int
	}{{"all_gather", "AllGather", []int{2, 3}}, {"all_reduce", "AllReduce", []int{2}}} {
		for _, sig := range []string{"stop", "kill"} {
			for _, w := range c.ws {
				t.Run(c.op+"/"+sig+"/W="+strconv.Itoa(w), func(t *testing.T) {
					t.Parallel()
					testBenchFault(t, bin, []string{"DETCOLL_SHM_EXPOSE=always"}, "detcoll", c.op+` fp32 \S+ 262144 B: (detcoll: `+c.name+` on rank|bench: deterministic first run)`,
						sig, w, "262144", "--operations", c.op, "--dtype", "fp32", "--algorithms", "auto")
				})
			}
		}
	}
}

// testBenchFault runs the fault matrix's case with env added to the
// ranks' environment.
func testBenchFault(t *testing.T, bin string, env []string, phase, names, sig string, w int, size string, extra ...string) {
	start := time.Now()
	// A grace period longer than the ranks need: a rank that the launcher
	// SIGTERMs must print its error at once, not rely on the grace.
	args := append([]string{"launch", "--standalone", "--nproc-per-node", strconv.Itoa(w), "--grace-period", "3s", "--",
		bin, "bench", "--timeout", "2s", "--size-bytes", size, "--output", ""}, quick...)
	args = append(args, extra...)
	if phase == "rendezvous" {
		// The set-up's own bound is what the peers then wait for; the
		// other phases keep its default (30 s), so that a slow start on
		// a loaded machine is not a failure in the wrong phase.
		args = append(args, "--init-timeout", "2s")
	}
	out, code := run(t, t.TempDir(), append([]string{"DETCOLL_TEST_FAULT=" + phase + ":1:" + sig}, env...), 40*time.Second, bin, args...)
	el := time.Since(start)
	switch {
	case sig == "kill" && code != 137:
		t.Fatalf("exit %d, want 137 (killed by signal 9):\n%s", code, out)
	case code == 0:
		t.Fatalf("exit 0 with a stopped peer:\n%s", out)
	}
	// Every running rank says why it failed, as its own error line and its
	// FailureMarker line, whether it timed out, lost the peer, or was
	// stopped by the launcher once another rank failed.
	for r := 0; r < w; r++ {
		if r == 1 {
			continue
		}
		rs := strconv.Itoa(r)
		re := regexp.MustCompile(`\[rank ` + rs + `\] detcoll: .*(` + names + `)`)
		if !re.MatchString(out) {
			t.Errorf("rank %d printed no error naming the %s phase (%s)", r, phase, names)
		}
		if !strings.Contains(out, `[rank `+rs+`] DETCOLL_FAILURE {"rank":`+rs) {
			t.Errorf("rank %d printed no failure line", r)
		}
	}
	how := `was stopped \(SIGSTOP`
	if sig == "kill" {
		how = `was killed by signal 9`
	}
	if !regexp.MustCompile(`(?m)^detcoll: launch: rank 1 \(node 0, local rank 1, pid \d+\) ` + how).MatchString(out) {
		t.Errorf("the launcher does not name rank 1 (%s)", how)
	}
	// A kill is seen at once; a stop at the 2 s timeout (the set-up's
	// too); both then take the start-up and the exits: well under 15 s.
	if el > 15*time.Second {
		t.Errorf("took %v", el)
	}
	if t.Failed() {
		t.Logf("took %v, output:\n%s", el, out)
	}
}

// --peer adds the peer's figures to the rows it has and names the peer;
// a peer of another world size is refused before the run.
func TestBenchPeerFigures(t *testing.T) {
	bin := buildDetcoll(t)
	dir := t.TempDir()
	peer := filepath.Join(dir, "peer.json")
	os.WriteFile(peer, []byte(`{"schema":"detcoll.peer.v1","name":"Test MPI 9 shm","world_size":2,
		"rows":[{"op":"all_reduce","dtype":"fp32","bytes":4096,"median_us":1.25}]}`), 0o644)
	rep := filepath.Join(dir, "r.json")
	args := append([]string{"bench", "--nproc-per-node", "2", "--dtype", "fp32", "--size-bytes", "4096", "--operations", "all_reduce",
		"--algorithms", "gather_tree", "--peer", peer, "--output", rep}, quick...)
	out, code := run(t, dir, nil, 60*time.Second, bin, args...)
	if code != 0 || !strings.Contains(out, "peer: Test MPI 9 shm") || !strings.Contains(out, "vs peer") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	r, err := bench.ReadJSON(rep)
	if err != nil {
		t.Fatal(err)
	}
	row := r.Rows[0]
	if r.Peer == nil || r.Peer.Name != "Test MPI 9 shm" || row.PeerMedianUS != 1.25 || row.LatencyRatioVsPeer != row.Deterministic.MedianUS/1.25 {
		t.Fatalf("peer %+v, row peer %g ratio %g", r.Peer, row.PeerMedianUS, row.LatencyRatioVsPeer)
	}
	if r.Baseline != bench.CPURingBaseline {
		t.Fatalf("baseline %q", r.Baseline)
	}
	args[2] = "3" // --nproc-per-node 3 against a W=2 peer
	out, code = run(t, dir, nil, 20*time.Second, bin, args...)
	if code != 2 || !strings.Contains(out, "--peer: "+peer+" has world_size 2, this run has 3 ranks") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// --format nccl-tests with a -b/-e/-f sweep: nccl-tests' header and one row
// per size and algorithm, every row #wrong 0 out of place and in place.
func TestBenchNCCLTestsFormat(t *testing.T) {
	bin := buildDetcoll(t)
	dir := t.TempDir()
	args := append([]string{"bench", "--nproc-per-node", "2", "--dtype", "fp32", "-b", "4K", "-e", "64K", "-f", "4", "--operations", "all_reduce",
		"--algorithms", "gather_tree", "--format", "nccl-tests", "--output", ""}, quick...)
	out, code := run(t, dir, nil, 60*time.Second, bin, args...)
	if code != 0 || !strings.Contains(out, "#       size         count      type   redop    root     time   algbw   busbw #wrong") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	var sizes []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimPrefix(l, "[rank 0] ")
		f := strings.Fields(l)
		if len(f) == 14 && !strings.HasPrefix(l, "#") {
			if f[2] != "float" || f[3] != "sum" || f[8] != "0" || f[12] != "0" {
				t.Fatalf("row %q", l)
			}
			sizes = append(sizes, f[0])
		}
	}
	if strings.Join(sizes, " ") != "4096 16384 65536" {
		t.Fatalf("sizes %v:\n%s", sizes, out)
	}
}

// freeTCPPort is a port free on 127.0.0.1 a moment ago.
func freeTCPPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}
