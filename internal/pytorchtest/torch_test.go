package pytorchtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the repository root (this file is internal/pytorchtest/).
func repoRoot(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// unavailable skips (or, with DETCOLL_REQUIRE_TORCH=1, fails) the test.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("DETCOLL_REQUIRE_TORCH") == "1" {
		t.Fatalf("DETCOLL_REQUIRE_TORCH=1 but %s", msg)
	}
	t.Skip(msg)
}

// setup returns the interpreter and a freshly built libdetcoll.so.
func setup(t *testing.T) (python, lib string) {
	t.Helper()
	python = os.Getenv("DETCOLL_PYTHON")
	if python == "" {
		python = "/usr/bin/python3"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, python, "-c", "import torch, torch.distributed.run").CombinedOutput(); err != nil {
		unavailable(t, "%s cannot import torch (install python3-torch): %v: %s", python, err, lastLines(out, 3))
	}
	lib = filepath.Join(t.TempDir(), "libdetcoll.so")
	build := exec.CommandContext(ctx, "go", "build", "-buildmode=c-shared", "-o", lib, "./capi")
	build.Dir = repoRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		unavailable(t, "cannot build libdetcoll.so with cgo: %v: %s", err, lastLines(out, 5))
	}
	return python, lib
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// torchrun runs the check script's suites at w ranks and returns its output;
// it fails the test when torchrun fails or a suite does not report ok.
func torchrun(t *testing.T, python, lib string, w int, suites ...string) string {
	t.Helper()
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"-m", "torch.distributed.run",
		"--nproc_per_node", strconv.Itoa(w), "--master_addr", "127.0.0.1", "--master_port", strconv.Itoa(freePort(t)),
		// -r 1 -t 1: torch 1.13's default redirect setting ("0") breaks on
		// Python >= 3.11 (zero-valued IntFlag members do not iterate).
		"-r", "1", "-t", "1", "--monitor_interval", "0.1",
		filepath.Join(root, "python", "tests", "torch_backend_check.py"), strings.Join(suites, ","),
	}
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(),
		"DETCOLL_LIB="+lib,
		"PYTHONPATH="+filepath.Join(root, "python"),
		"PYTHONWARNINGS=ignore",
		"OMP_NUM_THREADS=1",
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("W=%d %v: %v", w, suites, time.Since(start).Round(100*time.Millisecond))
	if err != nil {
		t.Fatalf("torchrun W=%d %v: %v\n%s", w, suites, err, lastLines(out.Bytes(), 60))
	}
	for _, s := range suites {
		if !regexp.MustCompile(`ok ` + s + ` W=` + strconv.Itoa(w) + ` checks=[1-9]`).Match(out.Bytes()) {
			t.Fatalf("torchrun W=%d: suite %s did not report ok:\n%s", w, s, lastLines(out.Bytes(), 60))
		}
	}
	return out.String()
}

var digest = regexp.MustCompile(`ddp digest ([0-9a-f]{64})`)

// TestTorchBackend runs every suite: main at W = 1, 2, 3, 4, faults at
// W = 3, and DDP at W = 4 twice (bit-identical weights across bucket sizes
// within a run, across the two runs, and across ranks).
func TestTorchBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the torchrun runs take about 1.5 minutes")
	}
	python, lib := setup(t)
	torchrun(t, python, lib, 1, "main")
	torchrun(t, python, lib, 2, "main")
	torchrun(t, python, lib, 3, "main", "faults")
	first := torchrun(t, python, lib, 4, "main", "ddp")
	second := torchrun(t, python, lib, 4, "ddp")
	a, b := digest.FindStringSubmatch(first), digest.FindStringSubmatch(second)
	if a == nil || b == nil {
		t.Fatalf("no DDP digest in the output:\n%s\n%s", lastLines([]byte(first), 20), lastLines([]byte(second), 20))
	}
	if a[1] != b[1] {
		t.Fatalf("DDP weights differ between two runs: %s vs %s", a[1], b[1])
	}
	t.Logf("DDP weights digest %s in both runs", a[1])
}

// TestTorchBackendDetcollLaunch: init_process_group("detcoll") under
// `detcoll launch` (which serves its own store and gives torch a free
// MASTER_PORT) runs the main suite at W = 2.
func TestTorchBackendDetcollLaunch(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the launch takes about 20 seconds")
	}
	python, lib := setup(t)
	root := repoRoot(t)
	cli := filepath.Join(t.TempDir(), "detcoll")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", cli, "./cmd/detcoll")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the detcoll command: %v: %s", err, lastLines(out, 5))
	}
	cmd := exec.CommandContext(ctx, cli, "launch", "--standalone", "--nproc-per-node", "2", "--",
		python, filepath.Join(root, "python", "tests", "torch_backend_check.py"), "main")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "DETCOLL_LIB="+lib, "PYTHONPATH="+filepath.Join(root, "python"),
		"PYTHONWARNINGS=ignore", "OMP_NUM_THREADS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("detcoll launch: %v\n%s", err, lastLines(out, 60))
	}
	if !regexp.MustCompile(`ok main W=2 checks=[1-9]`).Match(out) {
		t.Fatalf("the main suite did not report ok:\n%s", lastLines(out, 60))
	}
}
