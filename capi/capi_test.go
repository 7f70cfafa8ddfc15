//go:build cgo

package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
	"github.com/detcoll/detcoll/transport"
)

// ---- artifacts built once per test run ------------------------------------

var artifacts struct {
	once sync.Once
	dir  string // temporary; removed by TestMain
	lib  string // libdetcoll.so
	cli  string // the detcoll binary
	err  error
}

var errNoGo = errors.New("the go command is not on PATH: cannot build libdetcoll.so")

func TestMain(m *testing.M) {
	code := m.Run()
	if artifacts.dir != "" {
		os.RemoveAll(artifacts.dir)
	}
	os.Exit(code)
}

// repoRoot is the module root (tests run in the package directory).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// buildArtifacts builds libdetcoll.so and the detcoll command once, in
// parallel, into a temporary directory shared by every test of the run.
func buildArtifacts(t *testing.T) (lib, cli string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the tests that build libdetcoll.so")
	}
	root := repoRoot(t)
	artifacts.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			artifacts.err = errNoGo
			return
		}
		dir, err := os.MkdirTemp("", "detcoll-capi-test-")
		if err != nil {
			artifacts.err = err
			return
		}
		artifacts.dir = dir
		artifacts.lib, artifacts.cli = filepath.Join(dir, "libdetcoll.so"), filepath.Join(dir, "detcoll")
		builds := [][]string{
			{"build", "-buildmode=c-shared", "-o", artifacts.lib, "./capi"},
			{"build", "-o", artifacts.cli, "./cmd/detcoll"},
		}
		errs := make([]error, len(builds))
		var wg sync.WaitGroup
		for i, args := range builds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command(goBin, args...)
				cmd.Dir = root
				cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
				if out, err := cmd.CombinedOutput(); err != nil {
					errs[i] = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
				}
			}()
		}
		wg.Wait()
		artifacts.err = errors.Join(errs...)
	})
	if errors.Is(artifacts.err, errNoGo) {
		t.Skip(artifacts.err)
	}
	if artifacts.err != nil {
		t.Fatal(artifacts.err)
	}
	return artifacts.lib, artifacts.cli
}

func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not found: %v", name, err)
	}
	return p
}

// buildCTest compiles testdata/ctest.c against include/detcoll.h and lib.
func buildCTest(t *testing.T, lib string) string {
	t.Helper()
	gcc := needTool(t, "gcc")
	exe := filepath.Join(t.TempDir(), "ctest")
	libDir := filepath.Dir(lib)
	cmd := exec.Command(gcc, "-std=c11", "-D_DEFAULT_SOURCE", "-O1", "-Wall", "-Wextra", "-Werror",
		"-I", filepath.Join(repoRoot(t), "include"), "-o", exe, "testdata/ctest.c",
		"-L", libDir, "-ldetcoll", "-Wl,-rpath,"+libDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return exe
}

// launchRanks runs cmd as 3 ranks under `detcoll launch --standalone`.
func launchRanks(t *testing.T, cli string, env []string, cmd ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"launch", "--standalone", "--nproc-per-node", "3", "--"}, cmd...)
	c := exec.CommandContext(ctx, cli, args...)
	c.Env = append(cleanEnv(), env...)
	c.Env = append(c.Env, "DETCOLL_TIMEOUT=60s", "DETCOLL_INIT_TIMEOUT=60s", noCUDAEnv)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("detcoll launch %s: %v\n%s", strings.Join(cmd, " "), err, out)
	}
	return string(out)
}

// noCUDAEnv keeps the CUDA backend out of the multi-process tests, on GPU
// machines too: they pass host and made-up pointers to the device calls and
// expect detcollUnsupported.
const noCUDAEnv = "DETCOLL_CUDA_LIB=/nonexistent/detcoll-test/libcuda.so.1"

// cleanEnv is the environment without any launcher's variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "DETCOLL_"), strings.HasPrefix(name, "SLURM_"), strings.HasPrefix(name, "OMPI_"),
			slices.Contains([]string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTHONPATH"}, name):
			continue
		}
		env = append(env, kv)
	}
	return env
}

// ---- checking results against reduce.Oracle ---------------------------------

// checkCases reads dir/manifest ("name op dtype count" per line, written by
// a test program) and checks every case's outputs, as written by each of w
// ranks, against reduce.Oracle (AllReduce, ReduceScatter) or the
// concatenation of the inputs (AllGather). It returns the case names.
func checkCases(t *testing.T, dir, manifest string, w int) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, manifest))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var name, op, dt string
		var count int
		if _, err := fmt.Sscan(sc.Text(), &name, &op, &dt, &count); err != nil {
			t.Fatalf("%s: bad line %q: %v", manifest, sc.Text(), err)
		}
		names = append(names, name)
		checkCase(t, dir, name, op, dt, count, w)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func checkCase(t *testing.T, dir, name, op, dtName string, count, w int) {
	t.Helper()
	var dt dtype.DType
	var size int
	switch dtName {
	case "u8":
		dt, size = dtype.Byte, 1
	case "i32":
		dt, size = dtype.Byte, 4
	default:
		var err error
		if dt, err = dtype.Parse(dtName); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		size = dt.Size()
	}
	n := count * size // bytes of one block
	lens := map[string][2]int{"allreduce": {n, n}, "allgather": {n, w * n}, "reducescatter": {w * n, n}}[op]
	inLen, outLen := lens[0], lens[1]
	ins, outs := make([][]byte, w), make([][]byte, w)
	for r := 0; r < w; r++ {
		var err error
		if ins[r], err = os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s.r%d.in", name, r))); err != nil {
			t.Fatal(err)
		}
		if outs[r], err = os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s.r%d.out", name, r))); err != nil {
			t.Fatal(err)
		}
		if len(ins[r]) != inLen || len(outs[r]) != outLen {
			t.Fatalf("%s rank %d: %d input and %d output bytes, want %d and %d", name, r, len(ins[r]), len(outs[r]), inLen, outLen)
		}
	}
	if r := 1; w > 1 && bytes.Equal(ins[0], ins[r]) && op != "allgather" {
		t.Fatalf("%s: ranks 0 and 1 have the same input; the test would prove little", name)
	}
	for r := 0; r < w; r++ {
		var want []byte
		switch op {
		case "allreduce":
			want = make([]byte, n)
			if err := reduce.Oracle(dt, reduce.Native, ins, want); err != nil {
				t.Fatal(err)
			}
		case "allgather":
			want = bytes.Join(ins, nil)
		case "reducescatter":
			blocks := make([][]byte, w)
			for p := range blocks {
				blocks[p] = ins[p][r*n : (r+1)*n]
			}
			want = make([]byte, n)
			if err := reduce.Oracle(dt, reduce.Native, blocks, want); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: unknown op %q", name, op)
		}
		if !bytes.Equal(outs[r], want) {
			i := 0
			for i < len(want) && outs[r][i] == want[i] {
				i++
			}
			e := i / size * size
			t.Errorf("%s rank %d: element %d is %x, oracle %x", name, r, i/size, outs[r][e:e+size], want[e:e+size])
		}
	}
}

func requireCases(t *testing.T, got []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("case %s missing (ran %v)", w, got)
		}
	}
}

// ---- multi-process tests -----------------------------------------------------

// TestCHost runs testdata/ctest.c as 3 ranks: host collectives of every
// dtype (checked against reduce.Oracle here), then misuse.
func TestCHost(t *testing.T) {
	needTool(t, "gcc")
	lib, cli := buildArtifacts(t)
	exe := buildCTest(t, lib)
	dir := t.TempDir()
	out := launchRanks(t, cli, nil, exe, "host", dir)
	if n := strings.Count(out, "OK\n"); n != 3 {
		t.Fatalf("%d ranks reported OK:\n%s", n, out)
	}
	got := checkCases(t, dir, "host.cases", 3)
	requireCases(t, got, "ar_fp32", "ar_fp32_big", "ar_bf16", "ar_fp16", "ar_fp64", "ag_fp32", "ag_bf16_inplace", "rs_fp32", "rs_bf16")
}

// TestCUniqueID runs the GetUniqueId / CommInitRank flow in C: rank 0 makes
// two ids and passes them through files; each rank joins both (the second
// with reversed ranks).
func TestCUniqueID(t *testing.T) {
	needTool(t, "gcc")
	lib, cli := buildArtifacts(t)
	exe := buildCTest(t, lib)
	dir := t.TempDir()
	out := launchRanks(t, cli, nil, exe, "uid", dir)
	if n := strings.Count(out, "OK\n"); n != 3 {
		t.Fatalf("%d ranks reported OK:\n%s", n, out)
	}
	got := checkCases(t, dir, "uid.cases", 3)
	requireCases(t, got, "uid1_ar_fp32", "uid2_ar_bf16", "uid2_ag_fp32", "uid1_rs_fp32")
}

// TestPython runs python/tests/mp_check.py as 3 ranks (host collectives on
// array.array, bytearray and memoryview, checked against reduce.Oracle here;
// exceptions for misuse) and the single-process unit tests.
func TestPython(t *testing.T) {
	py := needTool(t, "python3")
	lib, cli := buildArtifacts(t)
	pyDir := filepath.Join(repoRoot(t), "python")
	env := []string{"DETCOLL_LIB=" + lib, "PYTHONPATH=" + pyDir, "PYTHONDONTWRITEBYTECODE=1"}

	t.Run("ranks", func(t *testing.T) {
		dir := t.TempDir()
		out := launchRanks(t, cli, env, py, filepath.Join(pyDir, "tests", "mp_check.py"), dir)
		if n := strings.Count(out, "OK\n"); n != 3 {
			t.Fatalf("%d ranks reported OK:\n%s", n, out)
		}
		got := checkCases(t, dir, "py.cases", 3)
		requireCases(t, got, "py_ar_fp32", "py_ar_bf16", "py_ar_bf16_u16", "py_ar_fp16", "py_ar_fp64",
			"py_ag_fp32", "py_ag_u8", "py_ag_bf16_inplace", "py_rs_fp32", "py_rs_bf16", "py_uid_ar_fp32", "py_env2_ar_fp64")
	})
	t.Run("unittest", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-s", filepath.Join(pyDir, "tests"), "-p", "test_*.py")
		cmd.Env = append(append(cleanEnv(), env...), noCUDAEnv)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("python unittest: %v\n%s", err, out)
		}
	})
}

// TestHeaderMatchesLibrary checks that the functions include/detcoll.h
// declares are exactly the library's exported detcoll* functions.
func TestHeaderMatchesLibrary(t *testing.T) {
	lib, _ := buildArtifacts(t)
	h, err := os.ReadFile(filepath.Join(repoRoot(t), "include", "detcoll.h"))
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, m := range regexp.MustCompile(`(?m)^(?:const )?\w+\*? (detcoll\w+)\(`).FindAllSubmatch(h, -1) {
		declared = append(declared, string(m[1]))
	}
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var exported []string
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "detcoll") && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
			exported = append(exported, s.Name)
		}
	}
	slices.Sort(declared)
	slices.Sort(exported)
	if len(declared) < 15 || !slices.Equal(declared, exported) {
		t.Fatalf("header declares %v\nlibrary exports %v", declared, exported)
	}
}

// ---- in-process tests of the Go layer ------------------------------------------

// inprocHandles registers w in-process communicators and returns their handles.
func inprocHandles(t *testing.T, w int) []uintptr {
	t.Helper()
	comms, err := detcoll.NewInProc(w, detcoll.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	hs := make([]uintptr, w)
	for i, c := range comms {
		hs[i] = register(c, nil)
	}
	t.Cleanup(func() {
		for _, h := range hs {
			destroyHandle("test", h, true)
		}
	})
	return hs
}

// onRanks runs fn for every rank concurrently and returns the results.
func onRanks(hs []uintptr, fn func(r int, h uintptr) result) []result {
	rcs := make([]result, len(hs))
	var wg sync.WaitGroup
	for r, h := range hs {
		wg.Add(1)
		go func() { defer wg.Done(); rcs[r] = fn(r, h) }()
	}
	wg.Wait()
	return rcs
}

func ptr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

func TestHostCollectivesInProcess(t *testing.T) {
	const w, n = 3, 1000
	hs := inprocHandles(t, w)
	ins := make([][]float32, w)
	for r := range ins {
		ins[r] = make([]float32, w*n)
		for i := range ins[r] {
			ins[r][i] = float32(i%97)*1e-3 + float32(r)*1e7 - float32(i%5)*3e6
		}
	}
	inBytes := func(r int, lo, hi int) []byte { return detcoll.Float32Bytes(ins[r][lo:hi]) }

	// AllReduce (and in place).
	outs := make([][]float32, w)
	rcs := onRanks(hs, func(r int, h uintptr) result {
		outs[r] = make([]float32, n)
		return hostCollective("AR", opAllReduce, ptr(ins[r]), ptr(outs[r]), n, C_detcollFloat32, h)
	})
	want := make([]byte, 4*n)
	reduce.Oracle(dtype.FP32, reduce.Native, [][]byte{inBytes(0, 0, n), inBytes(1, 0, n), inBytes(2, 0, n)}, want)
	for r := range outs {
		if rcs[r] != rcSuccess || !bytes.Equal(detcoll.Float32Bytes(outs[r]), want) {
			t.Fatalf("AllReduce rank %d: rc %d, %v", r, rcs[r], lastMessage())
		}
	}
	// ReduceScatter.
	rcs = onRanks(hs, func(r int, h uintptr) result {
		outs[r] = make([]float32, n)
		return hostCollective("RS", opReduceScatter, ptr(ins[r]), ptr(outs[r]), n, C_detcollFloat32, h)
	})
	for r := range outs {
		reduce.Oracle(dtype.FP32, reduce.Native, [][]byte{inBytes(0, r*n, (r+1)*n), inBytes(1, r*n, (r+1)*n), inBytes(2, r*n, (r+1)*n)}, want)
		if rcs[r] != rcSuccess || !bytes.Equal(detcoll.Float32Bytes(outs[r]), want) {
			t.Fatalf("ReduceScatter rank %d: rc %d", r, rcs[r])
		}
	}
	// AllGather of int32 (moved as bytes).
	rcs = onRanks(hs, func(r int, h uintptr) result {
		outs[r] = make([]float32, w*n)
		return hostCollective("AG", opAllGather, ptr(ins[r][:n]), ptr(outs[r]), n, C_detcollInt32, h)
	})
	for r := range outs {
		for p := 0; p < w; p++ {
			if rcs[r] != rcSuccess || !slices.Equal(outs[r][p*n:(p+1)*n], ins[p][:n]) {
				t.Fatalf("AllGather rank %d block %d: rc %d", r, p, rcs[r])
			}
		}
	}
	// Argument errors leave the communicators usable; a mismatch poisons them.
	if rc := hostCollective("AR", opAllReduce, nil, ptr(outs[0]), 4, C_detcollFloat32, hs[0]); rc != rcInvalidArgument {
		t.Fatalf("NULL send: %d", rc)
	}
	if rc := hostCollective("AR", opAllReduce, ptr(ins[0]), ptr(outs[0]), 4, 12, hs[0]); rc != rcInvalidArgument {
		t.Fatalf("dtype 12: %d", rc)
	}
	if rc := hostCollective("AR", opAllReduce, ptr(ins[0]), ptr(outs[0]), 4, C_detcollUint64, hs[0]); rc != rcUnsupported {
		t.Fatalf("uint64 sum: %d", rc)
	}
	if !strings.Contains(entry(t, hs[0]).lastError(), "detcoll reduces only") {
		t.Fatalf("comm message %q", entry(t, hs[0]).lastError())
	}
	rcs = onRanks(hs, func(r int, h uintptr) result {
		return hostCollective("AR", opAllReduce, ptr(ins[r]), ptr(outs[r]), uint64(10+r), C_detcollFloat32, h)
	})
	for r, rc := range rcs {
		if rc != rcMismatch {
			t.Fatalf("count mismatch: rank %d got %d (%s)", r, rc, entry(t, hs[r]).lastError())
		}
	}
}

// C_ names for the dtypes the tests use (test files cannot use cgo).
const (
	C_detcollInt32   = 2
	C_detcollUint64  = 5
	C_detcollFloat32 = 7
)

func entry(t *testing.T, h uintptr) *commEntry {
	t.Helper()
	e, err := lookup(h)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func lastMessage() string { return goString(threadMessage(slotThread)) }

func TestAbortUnblocksACollective(t *testing.T) {
	hs := inprocHandles(t, 2)
	buf := make([]float32, 8)
	done := make(chan result)
	go func() {
		// Rank 1 never joins: rank 0 blocks until aborted.
		done <- hostCollective("AR", opAllReduce, ptr(buf), ptr(buf), 8, C_detcollFloat32, hs[0])
	}()
	time.Sleep(50 * time.Millisecond)
	if rc := destroyHandle("abort", hs[0], true); rc != rcSuccess {
		t.Fatalf("abort: %d", rc)
	}
	select {
	case rc := <-done:
		if rc != rcClosed {
			t.Fatalf("blocked collective returned %d, want detcollClosed", rc)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("abort did not unblock the collective")
	}
	if _, err := lookup(hs[0]); classify(err) != rcClosed {
		t.Fatalf("lookup after abort: %v", err)
	}
}

func TestHandles(t *testing.T) {
	for _, h := range []uintptr{0, 0x1000, handleOf(1 << 40)} {
		if _, err := lookup(h); classify(err) != rcInvalidArgument {
			t.Errorf("lookup(%#x): %v", h, err)
		}
	}
	hs := inprocHandles(t, 1)
	if handleOf(uint64(hs[0]>>4)) != hs[0] || hs[0]&0xF != handleTag {
		t.Fatalf("handle %#x", hs[0])
	}
	if rc := destroyHandle("d", hs[0], false); rc != rcSuccess {
		t.Fatal(rc)
	}
	if rc := destroyHandle("d", hs[0], false); rc != rcClosed {
		t.Fatalf("second destroy: %d", rc)
	}
}

func TestGuardedRecoversPanics(t *testing.T) {
	rc := guarded("detcollTest", 0, func() error {
		var m map[string]int
		m["x"] = 1 // panics
		return nil
	})
	if rc != rcInternalError {
		t.Fatalf("rc %d", rc)
	}
	if msg := lastMessage(); !strings.HasPrefix(msg, "detcollTest: internal error: panic: assignment to entry in nil map") {
		t.Fatalf("message %q", msg)
	}
	testPanicHook = func(string) { panic("hook") }
	defer func() { testPanicHook = nil }()
	if rc := hostCollective("detcollHostAllReduce", opAllReduce, nil, nil, 0, C_detcollFloat32, 0); rc != rcInternalError {
		t.Fatalf("rc %d", rc)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		want result
	}{
		{argError("x"), rcInvalidArgument},
		{usageError("x"), rcInvalidUsage},
		{fmt.Errorf("w: %w", detcoll.ErrMismatch), rcMismatch},
		{&detcoll.Error{Op: "AllReduce", Peer: -1, Err: fmt.Errorf("%w: %w", detcoll.ErrPoisoned, detcoll.ErrMismatch)}, rcMismatch},
		{&detcoll.Error{Op: "AllReduce", Peer: -1, Err: detcoll.ErrClosed}, rcClosed},
		{&detcoll.Error{Op: "AllReduce", Peer: 1, Err: &transport.Error{Op: "recv", Peer: 1, Err: transport.ErrClosed}}, rcClosed},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), rcTimeout},
		{&detcoll.Error{Op: "AllReduce", Peer: 2, Err: &transport.Error{Op: "recv", Peer: 2, Err: transport.ErrPeerClosed}}, rcRemoteError},
		{&transport.Error{Op: "recv", Peer: 1, Err: errors.New("reset")}, rcRemoteError},
		{fmt.Errorf("cuda: %w", errDevice), rcDeviceError},
		{errors.New("listen: address in use"), rcSystemError},
		{coded(rcUnsupported, "x"), rcUnsupported},
	} {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	for r := rcSuccess; r <= rcNumResults; r++ {
		if resultText(r) == "" {
			t.Errorf("result %d has no text", r)
		}
	}
	if resultText(7) != resultText(99) || resultText(rcMismatch) == resultText(99) {
		t.Error("unknown results")
	}
}

func TestUniqueIDEncoding(t *testing.T) {
	u := uniqueID{addr: "10.1.2.3:4567"}
	u.token[0], u.key[15] = 1, 2
	b := u.encode()
	if string(b[:4]) != "DCID" || len(b) != 128 {
		t.Fatalf("%x", b[:8])
	}
	got, err := decodeUniqueID(b)
	if err != nil || got != u {
		t.Fatalf("%+v %v", got, err)
	}
	bad := b
	bad[4] = 9
	if _, err := decodeUniqueID(bad); classify(err) != rcInvalidArgument {
		t.Fatal(err)
	}
	bad = b
	bad[5] = 200
	if _, err := decodeUniqueID(bad); classify(err) != rcInvalidArgument {
		t.Fatal(err)
	}
	if _, err := decodeUniqueID([128]byte{}); classify(err) != rcInvalidArgument {
		t.Fatal(err)
	}
}

func noEnv(string) string { return "" }

// TestInitRankDisagreements: ranks that disagree on nranks, or two callers
// with the same rank, fail at once (InvalidUsage for the one that noticed,
// RemoteError for the other), instead of waiting for the timeout.
func TestInitRankDisagreements(t *testing.T) {
	for _, tc := range []struct {
		name           string
		nranks, ranks  [2]int
		usage, remote  int // how many of each result
		wantSubstrings string
	}{
		{"nranks", [2]int{2, 3}, [2]int{0, 1}, 1, 1, "nranks"},
		{"duplicate rank", [2]int{2, 2}, [2]int{1, 1}, 1, 1, "joined twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := getUniqueID(noEnv)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, _, err := initRank(ctx, noEnv, id, tc.nranks[i], tc.ranks[i])
					if c != nil {
						c.Close()
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			counts := map[result]int{}
			for _, err := range errs {
				counts[classify(err)]++
			}
			if counts[rcInvalidUsage] != tc.usage || counts[rcRemoteError] != tc.remote {
				t.Fatalf("results %v: %v", counts, errs)
			}
			if !strings.Contains(fmt.Sprint(errs), tc.wantSubstrings) {
				t.Fatalf("errors %v", errs)
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("took %v", time.Since(start))
			}
		})
	}
}

func TestInitRankInProcess(t *testing.T) {
	id, err := getUniqueID(noEnv)
	if err != nil {
		t.Fatal(err)
	}
	const w = 3
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hs := make([]uintptr, w)
	var wg sync.WaitGroup
	errs := make([]error, w)
	for r := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, release, err := initRank(ctx, func(k string) string {
				if k == envAccumulate {
					return "f32"
				}
				return ""
			}, id, w, r)
			if err == nil {
				hs[r] = register(c, release)
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// bf16 with DETCOLL_ACCUMULATE=f32: 1 + 2^-8 + 2^-8 is 1 rounded at every
	// node, 1+2^-7 rounded once.
	one, tiny := uint16(0x3F80), uint16(0x3B80) // 1.0, 2^-8
	outs := make([][]uint16, w)
	rcs := onRanks(hs, func(r int, h uintptr) result {
		in := []uint16{tiny}
		if r == 0 {
			in[0] = one
		}
		outs[r] = make([]uint16, 1)
		return hostCollective("AR", opAllReduce, ptr(in), ptr(outs[r]), 1, 9, h)
	})
	for r := range w {
		if rcs[r] != rcSuccess || outs[r][0] != 0x3F81 {
			t.Fatalf("rank %d: rc %d, %#x (want 0x3f81: f32 accumulation)", r, rcs[r], outs[r][0])
		}
	}
	for _, h := range hs {
		if rc := destroyHandle("d", h, false); rc != rcSuccess {
			t.Fatal(rc)
		}
	}
}

// fakeDevice records the calls of the device hook.
type fakeDevice struct {
	mu       sync.Mutex
	attached int
	calls    []string
	closed   bool
	aborted  bool
}

func (f *fakeDevice) Name() string { return "fake" }
func (f *fakeDevice) Attach(c *detcoll.Comm, o *origin) (deviceComm, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attached++
	return f, nil
}
func (f *fakeDevice) record(op string, send, recv uintptr, count int, dt detcoll.DType, stream uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s %#x %#x %d %v %#x", op, send, recv, count, dt, stream))
	return nil
}
func (f *fakeDevice) AllReduce(s, r uintptr, n int, dt detcoll.DType, st uintptr) error {
	return f.record("AllReduce", s, r, n, dt, st)
}
func (f *fakeDevice) AllGather(s, r uintptr, n int, dt detcoll.DType, st uintptr) error {
	return f.record("AllGather", s, r, n, dt, st)
}
func (f *fakeDevice) ReduceScatter(s, r uintptr, n int, dt detcoll.DType, st uintptr) error {
	if n == 13 {
		return fmt.Errorf("cudaErrorIllegalAddress: %w", errDevice)
	}
	return f.record("ReduceScatter", s, r, n, dt, st)
}
func (f *fakeDevice) Close() error { f.mu.Lock(); defer f.mu.Unlock(); f.closed = true; return nil }
func (f *fakeDevice) Abort() error { f.mu.Lock(); defer f.mu.Unlock(); f.aborted = true; return nil }

// detcollCommAbort aborts the device work (devcomm's Abort: ncclCommAbort)
// before the close it does not wait for; a destroy does not abort.
func TestDeviceAbortOnCommAbort(t *testing.T) {
	prev := currentDeviceBackend()
	defer registerDeviceBackend(prev)
	for _, abort := range []bool{false, true} {
		fake := &fakeDevice{}
		registerDeviceBackend(fake)
		hs := inprocHandles(t, 1)
		if rc := deviceCollective("detcollAllReduce", opAllReduce, 0xdead0000, 0xdead0040, 4, C_detcollFloat32, hs[0], 0); rc != rcSuccess {
			t.Fatalf("collective: %d (%s)", rc, lastMessage())
		}
		if rc := destroyHandle("d", hs[0], abort); rc != rcSuccess {
			t.Fatalf("destroy(abort=%v): %d", abort, rc)
		}
		fake.mu.Lock()
		got := fake.aborted
		fake.mu.Unlock()
		if got != abort {
			t.Fatalf("destroy(abort=%v): device aborted = %v", abort, got)
		}
	}
}

func TestDeviceBackendHook(t *testing.T) {
	// Without a backend first (the CUDA one, registered by default, is
	// tested in device_cuda_test.go).
	prev := currentDeviceBackend()
	registerDeviceBackend(nil)
	defer registerDeviceBackend(prev)
	hs := inprocHandles(t, 1)
	fake := &fakeDevice{}
	const dev, stream = 0xdead0000, 0x5151 // a device address and a cudaStream_t
	if rc := deviceCollective("detcollAllReduce", opAllReduce, dev, dev+64, 4, C_detcollFloat32, hs[0], stream); rc != rcUnsupported {
		t.Fatalf("no backend: %d", rc)
	}
	if rc := deviceCollective("detcollAllReduce", opAllReduce, 0, dev, 4, C_detcollFloat32, hs[0], stream); rc != rcInvalidArgument {
		t.Fatalf("NULL send: %d", rc)
	}
	registerDeviceBackend(fake)
	for _, c := range []struct {
		o    op
		dt   int32
		n    uint64
		want result
	}{
		{opAllReduce, 9, 4, rcSuccess},
		{opAllGather, C_detcollInt32, 3, rcSuccess},
		{opReduceScatter, 6, 5, rcSuccess},
		{opReduceScatter, 6, 13, rcDeviceError},
		{opAllReduce, C_detcollInt32, 4, rcUnsupported},
	} {
		if rc := deviceCollective("dev", c.o, dev, dev+64, c.n, c.dt, hs[0], stream); rc != c.want {
			t.Errorf("%v dtype %d count %d: %d, want %d (%s)", c.o, c.dt, c.n, rc, c.want, lastMessage())
		}
	}
	want := []string{"AllReduce 0xdead0000 0xdead0040 4 bf16 0x5151", "AllGather 0xdead0000 0xdead0040 12 byte 0x5151",
		"ReduceScatter 0xdead0000 0xdead0040 5 fp16 0x5151"}
	if fake.attached != 1 || !slices.Equal(fake.calls, want) {
		t.Fatalf("attached %d, calls %q, want %q", fake.attached, fake.calls, want)
	}
	destroyHandle("d", hs[0], false)
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if !fake.closed {
		t.Fatal("device state not closed on destroy")
	}
}

func TestEnvOptions(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	if _, err := commOptions(env(envTimeout, "soon")); classify(err) != rcInvalidUsage {
		t.Fatal(err)
	}
	if _, err := commOptions(env(envAccumulate, "fp8")); classify(err) != rcInvalidUsage {
		t.Fatal(err)
	}
	if opts, err := commOptions(env(envTimeout, "3s", envAccumulate, "native")); err != nil || len(opts) != 2 {
		t.Fatal(opts, err)
	}
	if _, _, d, err := initContext(env(envInitTimeout, "7s")); err != nil || d != 7*time.Second {
		t.Fatal(d, err)
	}
	if _, _, _, err := initContext(env(envInitTimeout, "-1s")); classify(err) != rcInvalidUsage {
		t.Fatal(err)
	}
	if got := strconv.Itoa(headerVersionCode); got != "100" {
		t.Fatalf("version code %s", got)
	}
}

func envOf(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// TestInitFromEnvInProcess covers detcollCommInitFromEnv's Go side in a
// world of one: a bad environment, several communicators over one job,
// re-joining (allowed alone, refused once a store that rank 0 served is
// gone), and the torchrun store port rule.
func TestInitFromEnvInProcess(t *testing.T) {
	envJob.Lock()
	if envJob.job != nil {
		envJob.Unlock()
		t.Skip("an environment job is live in this process")
	}
	envJob.released = false
	envJob.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if _, _, err := initFromEnv(ctx, envOf(map[string]string{"RANK": "3", "WORLD_SIZE": "2"}), time.Minute); classify(err) != rcInvalidUsage {
		t.Fatalf("bad environment: %v", err)
	}
	for round := 0; round < 2; round++ { // alone: joining again is fine
		var hs []uintptr
		for range 2 {
			c, release, err := initFromEnv(ctx, noEnv, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, register(c, release))
		}
		for _, h := range hs {
			buf := []float32{1, 2}
			if rc := hostCollective("AR", opAllReduce, ptr(buf), ptr(buf), 2, C_detcollFloat32, h); rc != rcSuccess {
				t.Fatal(rc, lastMessage())
			}
			if rc := destroyHandle("d", h, false); rc != rcSuccess {
				t.Fatal(rc, lastMessage())
			}
		}
	}

	// torchrun's variables: the store goes to MASTER_PORT+1, served here.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	torchrun := envOf(map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": strconv.Itoa(port - 1)})
	c, release, err := initFromEnv(ctx, torchrun, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := envJob.job.Env.StoreAddr; got != net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) {
		t.Fatalf("store at %s, want MASTER_PORT+1 = %d", got, port)
	}
	h := register(c, release)
	if rc := destroyHandle("d", h, false); rc != rcSuccess {
		t.Fatal(rc, lastMessage())
	}
	if _, _, err := initFromEnv(ctx, torchrun, time.Minute); classify(err) != rcInvalidUsage || !strings.Contains(err.Error(), "joins a job once") {
		t.Fatalf("re-join after the store left: %v", err)
	}
	envJob.Lock()
	envJob.released = false
	envJob.Unlock()
}
