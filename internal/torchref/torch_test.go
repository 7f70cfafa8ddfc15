package torchref

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/internal/binding/bindingtest"
)

// The Python side: python/tests/torch_*_check.py under torchrun, against
// /usr/bin/python3 (Debian's python3-torch) unless DETCOLL_TORCH_PYTHON
// names another interpreter. Without torch the tests skip, saying so; with
// DETCOLL_REQUIRE_TORCH=1 (CI) they fail instead.

func torchPython(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the torchrun checks")
	}
	py := os.Getenv("DETCOLL_TORCH_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", "import torch, torch.distributed; print(torch.__version__)").CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		msg := fmt.Sprintf("%s cannot import torch (%v: %s); install python3-torch or set DETCOLL_TORCH_PYTHON", py, err, lines[len(lines)-1])
		if os.Getenv("DETCOLL_REQUIRE_TORCH") == "1" {
			t.Fatal(msg + " (DETCOLL_REQUIRE_TORCH=1)")
		}
		t.Skip(msg)
	}
	return py
}

var lib struct {
	once sync.Once
	path string
	err  error
}

// buildLib builds libdetcoll.so once per test binary (it needs cgo).
func buildLib(t *testing.T) string {
	t.Helper()
	lib.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			lib.err = errors.New("the go command is not on PATH: cannot build libdetcoll.so")
			return
		}
		dir, err := os.MkdirTemp("", "detcoll-torchref-")
		if err != nil {
			lib.err = err
			return
		}
		lib.path = filepath.Join(dir, "libdetcoll.so")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goBin, "build", "-buildmode=c-shared", "-o", lib.path, "./capi")
		cmd.Dir = repoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			lib.err = fmt.Errorf("go build -buildmode=c-shared ./capi: %v\n%s", err, out)
		}
	})
	if lib.err != nil {
		if os.Getenv("DETCOLL_REQUIRE_TORCH") == "1" {
			t.Fatal(lib.err)
		}
		t.Skip(lib.err.Error())
	}
	return lib.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if lib.path != "" {
		os.RemoveAll(filepath.Dir(lib.path))
	}
	if tracer.path != "" {
		os.RemoveAll(filepath.Dir(tracer.path))
	}
	os.Exit(code)
}

func repoRoot() string {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	return root
}

// cleanEnv is the environment without launcher variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "DETCOLL_"), strings.HasPrefix(name, "SLURM_"), strings.HasPrefix(name, "OMPI_"),
			slices.Contains([]string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
				"PYTHONPATH", "OMP_NUM_THREADS", "TORCHELASTIC_RUN_ID"}, name):
			continue
		}
		env = append(env, kv)
	}
	return env
}

// torchrun runs script with args as w ranks under torchrun and returns
// the output. "-r 1 -t 1" (stdout to a log file and to the console) works
// around torch 1.13's launcher on Python 3.11, whose default redirect
// setting fails to parse (Std.from_str("0") returns None there).
func torchrun(t *testing.T, py, libPath string, w int, script string, args ...string) string {
	t.Helper()
	root := repoRoot()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	logDir := t.TempDir()
	argv := append([]string{"-m", "torch.distributed.run", "--standalone", "--nproc_per_node", fmt.Sprint(w),
		"-r", "1", "-t", "1", "--log_dir", logDir, filepath.Join(root, "python", "tests", script)}, args...)
	cmd := exec.CommandContext(ctx, py, argv...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(cleanEnv(), "DETCOLL_LIB="+libPath,
		"PYTHONPATH="+filepath.Join(root, "python")+string(os.PathListSeparator)+filepath.Join(root, "python", "tests"),
		"PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1", "DETCOLL_TIMEOUT=60s", "DETCOLL_INIT_TIMEOUT=60s",
		// Host tensors only: keep the library's CUDA backend out.
		"DETCOLL_CUDA_LIB=/nonexistent/detcoll-test/libcuda.so.1")
	if tr := abortTracer(t); tr != "" {
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+tr)
	}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("torchrun %s W=%d: timed out after 150 s\n%s", script, w, tail(out))
	}
	if err != nil {
		t.Fatalf("torchrun %s W=%d: %v\n%s", script, w, err, tail(out))
	}
	if n := strings.Count(string(out), ": OK ("); n != w {
		t.Fatalf("torchrun %s W=%d: %d ranks reported OK\n%s", script, w, n, tail(out))
	}
	return string(out)
}

var tracer struct {
	once sync.Once
	path string
	err  error
}

// abortTracer builds testdata/abort_backtrace.c once per test binary: a
// preload library after which an abort prints the aborting thread's native
// backtrace (the rare SIGABRT at interpreter exit, docs/pytorch.md). Without
// a host C compiler the ranks run without it, and the test logs so.
func abortTracer(t *testing.T) string {
	t.Helper()
	tracer.once.Do(func() {
		cc := bindingtest.CC()
		if cc == "" {
			tracer.err = errors.New("no host C compiler")
			return
		}
		dir, err := os.MkdirTemp("", "detcoll-abort-")
		if err != nil {
			tracer.err = err
			return
		}
		lib := filepath.Join(dir, "libabort_backtrace.so")
		src := filepath.Join(repoRoot(), "internal", "torchref", "testdata", "abort_backtrace.c")
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", lib, src).CombinedOutput(); err != nil {
			tracer.err = fmt.Errorf("%v: %s", err, out)
			return
		}
		tracer.path = lib
	})
	if tracer.err != nil {
		t.Logf("ranks run without the abort backtrace preload: %v", tracer.err)
	}
	return tracer.path
}

func tail(b []byte) string {
	const max = 8000
	if len(b) > max {
		return "…" + string(b[len(b)-max:])
	}
	return string(b)
}

// TestAbortTracer: with the preload, a process that aborts prints its
// native backtrace (so a rare abort of a torchrun rank says where it came
// from), and the abort itself still kills it.
func TestAbortTracer(t *testing.T) {
	py := torchPython(t)
	tr := abortTracer(t)
	if tr == "" {
		if os.Getenv("DETCOLL_REQUIRE_HOSTCC") == "1" {
			t.Fatalf("the abort backtrace preload was not built: %v (DETCOLL_REQUIRE_HOSTCC=1)", tracer.err)
		}
		t.Skipf("the abort backtrace preload was not built: %v", tracer.err)
	}
	cmd := exec.Command(py, "-c", "import os; os.abort()")
	cmd.Env = append(cleanEnv(), "LD_PRELOAD="+tr)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != -1 {
		t.Fatalf("os.abort() under the preload: %v, want death by SIGABRT\n%s", err, out)
	}
	if !strings.Contains(string(out), "native backtrace of the aborting thread") || !strings.Contains(string(out), "abort") {
		t.Fatalf("no backtrace printed for the abort:\n%s", out)
	}
}

// TestTorchLayers runs python/tests/torch_checks.py under torchrun at W =
// 1, 2, 4 (and 8 with DETCOLL_LONG_TESTS=1): detcoll.torch.functional's values and gradients against the tree
// over the ranks, and detcoll.torch.parallel at TP/CP = 1, 2, 4 (every size
// dividing W, on groups of consecutive ranks) bit for bit against Go's
// parallel package, whose single-rank outputs Write produces here.
func TestTorchLayers(t *testing.T) {
	py := torchPython(t)
	libPath := buildLib(t)
	ref := t.TempDir()
	if err := Write(ref); err != nil {
		t.Fatal(err)
	}
	ws := []int{1, 2, 4}
	if os.Getenv("DETCOLL_LONG_TESTS") == "1" {
		ws = append(ws, 8) // TP = 8 and CP = 8 (SP needs tokens divisible by 8: skipped at 8)
	}
	for _, w := range ws {
		t.Run(fmt.Sprintf("W%d", w), func(t *testing.T) {
			torchrun(t, py, libPath, w, "torch_checks.py", ref)
		})
	}
}

// TestTorchBench runs `torchrun -m detcoll.torch.bench` at W = 2 with tiny
// settings and reads the report with bench.ParseJSON (which validates the
// detcoll.bench.v1 schema): every row present, bitwise stable and equal to
// the host oracle.
func TestTorchBench(t *testing.T) {
	py := torchPython(t)
	libPath := buildLib(t)
	out := filepath.Join(t.TempDir(), "r.json")
	root := repoRoot()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-r", "1", "-t", "1",
		"--log_dir", t.TempDir(), "-m", "detcoll.torch.bench", "--dtype", "bf16",
		"--operations", "all_reduce", "all_gather", "reduce_scatter", "--size-bytes", "4096", "65536",
		"--warmup", "1", "--iterations", "2", "--samples", "3", "--output", out)
	cmd.Dir = t.TempDir()
	cmd.Env = append(cleanEnv(), "DETCOLL_LIB="+libPath, "PYTHONPATH="+filepath.Join(root, "python"),
		"PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1", "DETCOLL_TIMEOUT=60s", "DETCOLL_INIT_TIMEOUT=60s",
		"DETCOLL_CUDA_LIB=/nonexistent/detcoll-test/libcuda.so.1", "DETCOLL_GIT_COMMIT=test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("torchrun -m detcoll.torch.bench: %v\n%s", err, tail(b))
	}
	r, err := bench.ReadJSON(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.WorldSize != 2 || r.Samples != 3 || r.Iterations != 2 || r.Device.Kind != "cpu" || len(r.Rows) != 6 {
		t.Fatalf("report: world %d, samples %d, iterations %d, device %q, %d rows", r.WorldSize, r.Samples, r.Iterations, r.Device.Kind, len(r.Rows))
	}
	want := []struct {
		op    bench.Op
		bytes int64
	}{{bench.AllReduce, 4096}, {bench.AllReduce, 65536}, {bench.AllGather, 4096}, {bench.AllGather, 65536},
		{bench.ReduceScatter, 4096}, {bench.ReduceScatter, 65536}}
	for i, row := range r.Rows {
		if row.Operation != want[i].op || row.InputBytes != want[i].bytes || row.DType != "bf16" {
			t.Errorf("row %d: %s %s %d B, want %s bf16 %d B", i, row.Operation, row.DType, row.InputBytes, want[i].op, want[i].bytes)
		}
		if !row.RepeatBitwise || !row.OracleBitwise {
			t.Errorf("row %d (%s %d B): repeat_bitwise %v, oracle_bitwise %v", i, row.Operation, row.InputBytes, row.RepeatBitwise, row.OracleBitwise)
		}
		if row.Native.MedianUS <= 0 || row.Deterministic.MedianUS <= 0 {
			t.Errorf("row %d: medians %g / %g", i, row.Deterministic.MedianUS, row.Native.MedianUS)
		}
	}
	if !r.AllRankRepeatBitwise || r.Extra["native_backend"] != "gloo" {
		t.Errorf("all_rank_repeat_bitwise %v, native_backend %v", r.AllRankRepeatBitwise, r.Extra["native_backend"])
	}

	// A bad argument is a usage error naming it, before any rank starts work.
	bad := exec.CommandContext(ctx, py, "-m", "detcoll.torch.bench", "--dtype", "int7")
	bad.Env = cmd.Env
	b, err := bad.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "int7") {
		t.Errorf("--dtype int7: err %v, output %s", err, b)
	}
}
