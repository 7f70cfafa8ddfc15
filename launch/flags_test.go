package launch

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func parse(t *testing.T, env map[string]string, args ...string) (Config, error) {
	t.Helper()
	return ParseArgs(args, getenv(env))
}

func TestParseArgsTorchrunSpellings(t *testing.T) {
	for _, args := range [][]string{
		{"--nproc_per_node", "3", "--max_restarts=2", "--rdzv_id", "job7", "--role=trainer", "--monitor_interval", "0.5", "--start_method", "fork", "prog", "-c", "x"},
		{"--nproc-per-node=3", "--max-restarts", "2", "--rdzv-id=job7", "--role", "trainer", "--monitor-interval=0.5", "--start-method=fork", "--", "prog", "-c", "x"},
	} {
		c, err := parse(t, nil, args...)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if c.NprocPerNode != 3 || c.MaxRestarts != 2 || c.RdzvID != "job7" || c.Role != "trainer" ||
			c.MonitorInterval != 500*time.Millisecond || !slices.Equal(c.Cmd, []string{"prog", "-c", "x"}) {
			t.Errorf("%q → %+v", args, c)
		}
	}
}

// Parsing stops at the first positional: the worker's flags are its own.
func TestParseArgsStopsAtCommand(t *testing.T) {
	c, err := parse(t, nil, "--nproc-per-node", "2", "python3", "-c", "print(1)", "--nproc-per-node", "9")
	if err != nil {
		t.Fatal(err)
	}
	if c.NprocPerNode != 2 || !slices.Equal(c.Cmd, []string{"python3", "-c", "print(1)", "--nproc-per-node", "9"}) {
		t.Errorf("got %d %q", c.NprocPerNode, c.Cmd)
	}
}

func TestParseArgsPython(t *testing.T) {
	env := map[string]string{EnvPython: "/usr/bin/python3"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-m", "pkg.mod", "--lr", "1"}, []string{"/usr/bin/python3", "-u", "-m", "pkg.mod", "--lr", "1"}},
		{[]string{"--module", "pkg"}, []string{"/usr/bin/python3", "-u", "-m", "pkg"}},
		{[]string{"train.py", "a"}, []string{"/usr/bin/python3", "-u", "train.py", "a"}},
		{[]string{"--no-python", "train.py"}, []string{"train.py"}},
		{[]string{"--no_python", "./run.sh"}, []string{"./run.sh"}},
		{[]string{"--run-path", "/abs/script"}, []string{"/usr/bin/python3", "-u", "/abs/script"}},
		{[]string{"/bin/echo", "hi"}, []string{"/bin/echo", "hi"}},
	} {
		c, err := parse(t, env, tc.args...)
		if err != nil || !slices.Equal(c.Cmd, tc.want) {
			t.Errorf("%q → %q, %v; want %q", tc.args, c.Cmd, err, tc.want)
		}
	}
	if _, err := parse(t, nil, "-m", "--no-python", "x"); !errors.Is(err, ErrUsage) {
		t.Errorf("-m with --no-python: %v", err)
	}
}

func TestParseArgsNproc(t *testing.T) {
	c, err := parse(t, nil, "--nproc-per-node", "cpu", "x")
	if err != nil || c.NprocPerNode != runtime.NumCPU() {
		t.Errorf("cpu: %d, %v", c.NprocPerNode, err)
	}
	c, err = parse(t, nil, "--nproc-per-node", "auto", "x")
	if err != nil || c.NprocPerNode < 1 {
		t.Errorf("auto: %d, %v", c.NprocPerNode, err)
	}
	if countGPUs() == 0 {
		if _, err := parse(t, nil, "--nproc-per-node", "gpu", "x"); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "no GPU") {
			t.Errorf("gpu without GPUs: %v", err)
		}
	}
	for _, v := range []string{"0", "-1", "two", ""} {
		_, err := parse(t, nil, "--nproc-per-node="+v, "x")
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--nproc-per-node") {
			t.Errorf("--nproc-per-node=%q: %v", v, err)
		}
	}
	_, err = parse(t, map[string]string{"PET_NPROC_PER_NODE": "0"}, "x")
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "PET_NPROC_PER_NODE") {
		t.Errorf("PET_NPROC_PER_NODE=0: %v", err)
	}
}

func TestParseArgsEnvPrecedence(t *testing.T) {
	env := map[string]string{"DETCOLL_NPROC_PER_NODE": "4", "PET_NPROC_PER_NODE": "5", "PET_MAX_RESTARTS": "3",
		"PET_RDZV_CONF": "timeout=7,read_timeout=60", "DETCOLL_ROLE": "r", "PET_LOCAL_RANKS_FILTER": "0,2"}
	c, err := parse(t, env, "x")
	if err != nil {
		t.Fatal(err)
	}
	if c.NprocPerNode != 4 || c.MaxRestarts != 3 || c.RdzvTimeout != 7*time.Second || c.Role != "r" || !slices.Equal(c.LocalRanksFilter, []int{0, 2}) {
		t.Errorf("%+v", c)
	}
	c, err = parse(t, env, "--nproc-per-node", "3", "--rdzv-timeout", "2s", "x")
	if err != nil || c.NprocPerNode != 3 || c.RdzvTimeout != 2*time.Second {
		t.Errorf("flags do not win: %+v %v", c, err)
	}
}

func TestParseArgsNnodes(t *testing.T) {
	for v, want := range map[string]int{"1": 1, "1:1": 1} {
		c, err := parse(t, nil, "--nnodes", v, "x")
		if err != nil || c.Nnodes != want || c.MinNodes != 0 || c.AssignNodeRank {
			t.Errorf("--nnodes %s: %+v %v", v, c, err)
		}
	}
	// torchrun's elastic range: MIN:MAX, node ranks in join order.
	c, err := parse(t, nil, "--nnodes", "1:3", "--master-addr", "127.0.0.1", "x")
	if err != nil || c.MinNodes != 1 || c.Nnodes != 3 || !c.AssignNodeRank {
		t.Errorf("--nnodes 1:3: %+v %v", c, err)
	}
	c, err = parse(t, map[string]string{"PET_NNODES": "2:4", "PET_RDZV_CONF": "join_timeout=7,last_call_timeout=0.25"},
		"--master-addr", "127.0.0.1", "x")
	if err != nil || c.MinNodes != 2 || c.Nnodes != 4 || c.RdzvTimeout != 7*time.Second || c.LastCallTimeout != 250*time.Millisecond {
		t.Errorf("PET_NNODES=2:4 PET_RDZV_CONF: %+v %v", c, err)
	}
	c, err = parse(t, map[string]string{"DETCOLL_RDZV_CONF": "last_call_timeout=2s"}, "--nnodes", "1:2", "--master-addr", "127.0.0.1", "x")
	if err != nil || c.LastCallTimeout != 2*time.Second {
		t.Errorf("DETCOLL_RDZV_CONF: %+v %v", c, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nnodes", "3:2"}, "--nnodes: elastic range 3:2 has MIN above MAX"},
		{[]string{"--nnodes", "0:2"}, "--nnodes: 0 is below 1"},
		{[]string{"--nnodes", "1:x"}, `--nnodes: "x" is not an integer`},
		{[]string{"--nnodes", "1:2", "--node-rank", "0", "--master-addr", "127.0.0.1"}, "--node-rank: an elastic --nnodes 1:2 assigns node ranks in join order"},
		{[]string{"--nnodes", "1:2", "--master-addr", "127.0.0.1", "--rdzv-conf", "last_call_timeout=0"}, `--rdzv-conf: last_call_timeout: "0" is not a positive duration`},
		{[]string{"--nnodes", "1:2"}, "2 nodes need MasterAddr"},
	} {
		_, err := parse(t, nil, append(tc.args, "x")...)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

func TestParseArgsMasterPort(t *testing.T) {
	c, err := parse(t, nil, "--master-port", "29510", "x")
	if err != nil || c.MasterPort != 29510 {
		t.Fatalf("%+v %v", c, err)
	}
	n, _ := c.normalize()
	if n.StorePort != 29511 {
		t.Errorf("store port %d, want 29511", n.StorePort)
	}
	if _, err := parse(t, nil, "--master-port", "29510", "--store-port", "29510", "x"); !errors.Is(err, ErrUsage) {
		t.Errorf("store port = master port: %v", err)
	}
	c, err = parse(t, nil, "--rdzv-endpoint", "127.0.0.1", "--rdzv-backend", "c10d", "x")
	if err != nil || c.StorePort != DefaultRdzvPort || c.MasterAddr != "127.0.0.1" {
		t.Errorf("endpoint: %+v %v", c, err)
	}
	if _, err := parse(t, nil, "--rdzv-endpoint", "127.0.0.1:1234", "--master-addr", "10.1.2.3", "x"); !errors.Is(err, ErrUsage) {
		t.Errorf("endpoint vs master-addr: %v", err)
	}
}

func TestParseArgsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nproc-per-nod", "2", "x"}, "did you mean --nproc-per-node"},
		{[]string{"--nproc-per-node"}, "needs a value"},
		{[]string{"--nproc-per-node", "2"}, "no worker command"},
		{[]string{"--rdzv-backend", "etcd", "x"}, "--rdzv-backend"},
		{[]string{"--rdzv-conf", "bogus=1", "x"}, `unknown key "bogus"`},
		{[]string{"--rdzv-conf", "timeout=-1", "x"}, "timeout"},
		{[]string{"--redirects", "4", "x"}, "--redirects"},
		{[]string{"--tee", "0:1,x:2", "x"}, "--tee"},
		{[]string{"--nproc-per-node", "2", "--local-ranks-filter", "5", "x"}, "local rank 5"},
		{[]string{"--max-restarts", "-1", "x"}, "--max-restarts"},
		{[]string{"--start-method", "thread", "x"}, "--start-method"},
		{[]string{"--master-addr", "192.0.2.77", "x"}, "not an address of this host"},
		{[]string{"--local-addr", "192.0.2.78", "x"}, "not an address of this host"},
		{[]string{"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "x"}, "needs the job's token"},
		{[]string{"--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1", "x"}, "--node-rank"},
		{[]string{"-x", "y"}, "unknown flag -x"},
	} {
		_, err := parse(t, nil, tc.args...)
		if !errors.Is(err, ErrUsage) || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want ErrUsage mentioning %q", tc.args, err, tc.want)
		}
	}
	if _, err := parse(t, nil, "--help"); !errors.Is(err, ErrHelp) {
		t.Errorf("--help: %v", err)
	}
}

func TestParseStreams(t *testing.T) {
	s, err := ParseStreams("0:1,1:3")
	if err != nil || s.For(0) != StdOut || s.For(1) != StdBoth || s.For(2) != StdNone {
		t.Errorf("%+v %v", s, err)
	}
	s, err = ParseStreams("2")
	if err != nil || s.For(5) != StdErr {
		t.Errorf("%+v %v", s, err)
	}
}

func TestFailureOf(t *testing.T) {
	f := FailureOf(1, errors.New("plain"))
	if f.Peer != -1 || f.Kind != KindError || f.Rank != 1 {
		t.Errorf("%+v", f)
	}
	var b strings.Builder
	_ = WriteFailure(&b, Failure{Rank: 1, Peer: 2, Op: "recv", Kind: KindTimeout, Err: "x"})
	g, ok := parseFailure([]byte(strings.TrimSpace(b.String())))
	if !ok || g.Peer != 2 || g.Kind != KindTimeout {
		t.Errorf("round trip: %+v %v from %q", g, ok, b.String())
	}
	if _, ok := parseFailure([]byte("DETCOLL_FAILURE {bad")); ok {
		t.Error("parsed a malformed marker")
	}
}

func TestParseArgsLoopbackNameMultiNode(t *testing.T) {
	// "localhost" on node 0 of two nodes: the others could never reach it.
	_, err := parse(t, nil, "--nnodes", "2", "--master-addr", "localhost", "x")
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "resolves only to the loopback address") {
		t.Errorf("localhost for 2 nodes: %v", err)
	}
	// A literal loopback address stays allowed (several nodes on one host).
	if _, err := parse(t, nil, "--nnodes", "2", "--master-addr", "127.0.0.1", "x"); err != nil {
		t.Errorf("127.0.0.1 for 2 nodes on one host: %v", err)
	}
}
