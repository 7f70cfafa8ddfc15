package app

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/launch"
)

// The parent's console swallows rank 0's progress lines (they drive the
// bar) and passes every other line through whole, even when written in
// pieces.
func TestConsoleFiltersProgress(t *testing.T) {
	var out, errb bytes.Buffer
	c := newConsole(&out, &errb)
	e := c.stderr()
	for _, p := range []string{"[rank 0] detcoll-progress 0 4\n[rank 1] hel", "lo\n", "[rank 0] detcoll-progress 4 4\n", "[rank 2] detcoll-progress 1 4\n"} {
		e.Write([]byte(p))
	}
	c.stdout().Write([]byte("[rank 0] row\n"))
	c.finish()
	if strings.Contains(errb.String(), "detcoll-progress 0 4") || strings.Contains(errb.String(), "[rank 0] detcoll-progress") {
		t.Fatalf("rank 0's progress lines leaked:\n%s", errb.String())
	}
	// A progress line of another rank is not the protocol: it passes.
	if !strings.Contains(errb.String(), "[rank 1] hello\n") || !strings.Contains(errb.String(), "[rank 2] detcoll-progress 1 4\n") {
		t.Fatalf("stderr:\n%s", errb.String())
	}
	// Not a terminal: the bar falls back to plain lines, the last one at 4/4.
	if !strings.Contains(errb.String(), "bench: 4/4 rows") {
		t.Fatalf("no progress shown:\n%s", errb.String())
	}
	if out.String() != "[rank 0] row\n" {
		t.Fatalf("stdout %q", out.String())
	}
}

func TestRequireDevice(t *testing.T) {
	nccl := []VerifyResult{{Transport: "nccl", Op: "all_reduce", Pass: true}}
	setup := []VerifyResult{{Transport: "nccl", Op: "setup", Detail: "no NCCL"}}
	host := []VerifyResult{{Transport: "tcp", Op: "all_reduce", Pass: true}}
	for _, c := range []struct {
		asked, resolved string
		rows            []VerifyResult
		ok              bool
	}{
		{"auto", "cpu", host, true},
		{"cpu", "cpu", host, true},
		{"cuda", "cuda", nccl, true},
		{"cuda", "cuda", host, false},
		{"cuda", "cuda", setup, false},
		{"cuda", "cpu", nccl, false},
		{"rocm", "rocm", nccl, false}, // NCCL rows do not check ROCm
	} {
		err := RequireDevice(c.asked, c.resolved, c.rows)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrDeviceNotChecked)) {
			t.Errorf("%s→%s %v: %v", c.asked, c.resolved, c.rows, err)
		}
	}
}

func TestCheckMemory(t *testing.T) {
	avail, ok := memAvailable()
	if !ok {
		t.Skip("no /proc/meminfo here")
	}
	cfg := bench.Config{DType: dtype.FP32, SizesBytes: []int{4096}}
	if err := checkMemory(cfg, 4, 4); err != nil {
		t.Fatalf("4 KiB refused: %v", err)
	}
	cfg.SizesBytes = []int{int(min(avail, 1<<50))}
	err := checkMemory(cfg, 2, 2)
	if err == nil || !IsUsage(err) || !strings.Contains(err.Error(), "--size-bytes") {
		t.Fatalf("a size of all available memory per rank: %v", err)
	}
}

func TestParseFault(t *testing.T) {
	for _, c := range []struct {
		v    string
		rank int
		want fault
	}{
		{"native:1", 1, fault{phase: "native", rank: 1}},
		{"native:1:stop", 1, fault{phase: "native", rank: 1}},
		{"detcoll:2:kill", 2, fault{phase: "detcoll", rank: 2, kill: true}},
		{"rendezvous:0:kill", 0, fault{phase: "rendezvous", kill: true}},
		{"connect:3", 3, fault{phase: "connect", rank: 3}},
		{"raw:1", 1, fault{phase: "raw", rank: 1}},
		{"native:1", 0, fault{}}, // another rank's
		{"raw:1:kill", 0, fault{}},
		{"", 0, fault{}},
	} {
		f, err := parseFault(c.v)
		if err != nil || f.mine(c.rank) != c.want {
			t.Errorf("%q on rank %d: %+v, %v; want %+v", c.v, c.rank, f.mine(c.rank), err, c.want)
		}
	}
	// Malformed values fail on every rank, naming the variable: a fault
	// test that injects nothing must not pass.
	for _, v := range []string{"native", "raw:x", "nowhere:1", "native:1:hup", "native:-1", "a:1:stop:x"} {
		if _, err := parseFault(v); err == nil || !strings.Contains(err.Error(), envFault) {
			t.Errorf("%q: %v, want an error naming %s", v, err, envFault)
		}
	}
	// A rendezvous fault without a launcher's store is refused.
	f, _ := parseFault("rendezvous:1")
	for _, env := range []launch.Env{{Rank: 1, WorldSize: 2}, {Rank: 0, WorldSize: 2, StoreAddr: "127.0.0.1:1", Source: launch.SourceTorchrun}} {
		if err := rendezvousFault(context.Background(), f, env); err == nil || !strings.Contains(err.Error(), "launcher's store") {
			t.Errorf("%+v: %v", env, err)
		}
	}
}

func TestNodeID(t *testing.T) {
	env := map[string]string{"GROUP_RANK": "3"}
	if id := nodeID(func(k string) string { return env[k] }); id != "node 3" {
		t.Fatal(id)
	}
	env = map[string]string{"DETCOLL_NODE_RANK": "1", "GROUP_RANK": "3"}
	if id := nodeID(func(k string) string { return env[k] }); id != "node 1" {
		t.Fatal(id)
	}
	if id := nodeID(func(string) string { return "" }); !strings.HasPrefix(id, "host ") {
		t.Fatal(id)
	}
}
