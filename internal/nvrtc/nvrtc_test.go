package nvrtc

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding/bindingtest"

	"github.com/detcoll/detcoll/internal/binding/rtc"
	"github.com/detcoll/detcoll/internal/kcache"
)

func TestSymbolNames(t *testing.T) {
	// The constants are the documented names; NVRTC exports them unversioned.
	bindingtest.CheckPlainSymbols(t, syms.Symbols, "nvrtc")
	if syms.API(nvrtcCompileProgram) != "nvrtcCompileProgram" || syms.API(nvrtcGetCUBIN) != "nvrtcGetCUBIN" {
		t.Fatal("symbol table out of order")
	}
	// Entry points newer than NVRTC 11.0 are optional; the compile path is not.
	for _, s := range []sym{nvrtcGetNumSupportedArchs, nvrtcGetSupportedArchs, nvrtcGetCUBINSize, nvrtcGetCUBIN} {
		if !syms.Symbols[s].Optional {
			t.Errorf("%s is required", syms.API(s))
		}
	}
	for _, s := range []sym{nvrtcCreateProgram, nvrtcCompileProgram, nvrtcGetPTX, nvrtcGetProgramLog, nvrtcDestroyProgram} {
		if syms.Symbols[s].Optional {
			t.Errorf("%s is optional", syms.API(s))
		}
	}
}

func TestLibraryNames(t *testing.T) {
	t.Setenv("CUDA_HOME", "/opt/cuda-x")
	n := LibraryNames()
	if n[0] != "libnvrtc.so.13" || n[1] != "libnvrtc.so.12" {
		t.Fatalf("names %v", n)
	}
	found := false
	for _, x := range n {
		if x == "/opt/cuda-x/lib64/libnvrtc.so.13" {
			found = true
		}
	}
	if !found {
		t.Fatalf("CUDA_HOME not used: %v", n)
	}
}

func TestOptions(t *testing.T) {
	o, err := Options(90, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "--gpu-architecture=sm_90 --ftz=false --prec-div=true --prec-sqrt=true --fmad=false --std=c++17"
	if strings.Join(o, " ") != want {
		t.Fatalf("options %q", strings.Join(o, " "))
	}
	o, _ = Options(80, false, "-lineinfo")
	if o[0] != "--gpu-architecture=compute_80" || o[len(o)-1] != "-lineinfo" {
		t.Fatalf("ptx options %v", o)
	}
	for _, bad := range []string{"--use_fast_math", "--ftz=true", "--fmad=true", "--prec-div=false", "-arch=sm_70", "--gpu-arch=sm_80"} {
		if _, err := Options(90, true, bad); err == nil {
			t.Errorf("option %s accepted", bad)
		}
	}
}

func TestTarget(t *testing.T) {
	cases := []struct {
		cc        int
		supported []int
		arch      int
		cubin     bool
		err       bool
	}{
		{90, nil, 90, true, false},
		{90, []int{75, 80, 86, 89, 90, 100, 120}, 90, true, false},
		{121, []int{75, 80, 90, 100, 120}, 120, false, false}, // newer device: PTX, driver JIT
		{70, []int{75, 80}, 0, false, true},
		{0, nil, 0, false, true},
	}
	for _, c := range cases {
		a, cb, err := Target(c.cc, c.supported)
		if (err != nil) != c.err || a != c.arch || cb != c.cubin {
			t.Errorf("Target(%d, %v) = %d %v %v", c.cc, c.supported, a, cb, err)
		}
	}
}

func TestCacheKey(t *testing.T) {
	o := []string{"--gpu-arch=sm_90", "--fmad=false"}
	k := CacheKey("src", o, "13.0", 90, true)
	if len(k) != 64 || k != CacheKey("src", o, "13.0", 90, true) {
		t.Fatal("key not stable")
	}
	diff := []string{
		CacheKey("src2", o, "13.0", 90, true),
		CacheKey("src", o[:1], "13.0", 90, true),
		CacheKey("src", o, "12.8", 90, true),
		CacheKey("src", o, "13.0", 89, true),
		CacheKey("src", o, "13.0", 90, false),
		CacheKey("src", []string{"--gpu-arch=sm_90--fmad=false"}, "13.0", 90, true), // no ambiguity by concatenation
	}
	for i, d := range diff {
		if d == k {
			t.Errorf("variant %d has the same key", i)
		}
	}
	// The keys name users' disk cache files: a change invalidates every
	// cache. These are the keys of the code before internal/kcache.
	for _, g := range []struct{ got, want string }{
		{k, "05b90b14984431fa330fd6cc845531ac623376436d844fc7b293264256a1cb2d"},
		{CacheKey("k", nil, "12.8", 80, false), "b607ee912b17fe69161632e9ae5d8ebc3e49ea3fe1a526345fbaa562e9190bc0"},
	} {
		if g.got != g.want {
			t.Errorf("cache key %s, want %s (the disk cache format changed)", g.got, g.want)
		}
	}
}

// NVRTC's disk cache files are .cubin or .ptx, and Invalidate removes both
// (internal/kcache tests the caches themselves).
func TestCacheFiles(t *testing.T) {
	t.Setenv(CacheEnv, t.TempDir())
	if filepath.Ext(cachePath("abc", true)) != ".cubin" || filepath.Ext(cachePath("abc", false)) != ".ptx" {
		t.Fatalf("paths %s %s", cachePath("abc", true), cachePath("abc", false))
	}
	kcache.WriteAtomic(cachePath("abc", true), []byte("cubin"))
	kcache.WriteAtomic(cachePath("abc", false), []byte("ptx"))
	memCache.Put("abc", &Program{})
	Invalidate("abc")
	if kcache.Read(cachePath("abc", true)) != nil || kcache.Read(cachePath("abc", false)) != nil {
		t.Error("an image left on disk")
	}
	if _, ok := memCache.Get("abc"); ok {
		t.Error("left in memory")
	}
}

// A compilation error carries the log and reads "nvrtc: …" with NVRTC's name
// of the code (rtc.Library maps it; this is the binding's table).
func TestErrors(t *testing.T) {
	e := errorOf("nvrtcCompileProgram", rtc.ResultCompilation).(*Error)
	e.Log = "kernel.cu(3): error: expected a \";\""
	if msg := e.Error(); !strings.HasPrefix(msg, "nvrtc: nvrtcCompileProgram: NVRTC_ERROR_COMPILATION") || !strings.Contains(msg, "expected a") {
		t.Fatalf("message %q", msg)
	}
	if ResultName(99) != "NVRTC_ERROR_99" || !errors.Is(e, &Error{Code: rtc.ResultCompilation}) {
		t.Fatal("name or Is")
	}
}

func TestAvailableHere(t *testing.T) {
	if err := Available(); err != nil {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("error %v does not wrap ErrUnavailable", err)
		}
		t.Skipf("no NVRTC: %v", err)
	}
	ma, mi, err := lib.Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC %d.%d at %s", ma, mi, LibraryPath())
	t.Setenv(CacheEnv, t.TempDir())
	src := "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = __fadd_rn(x[threadIdx.x], 1.0f); }\n"
	p, err := Build(src, "k.cu", 90)
	if err != nil {
		t.Fatal(err)
	}
	if !p.CUBIN || len(p.Image) == 0 || p.From != "compiled" {
		t.Fatalf("program %+v", p)
	}
	p2, err := Build(src, "k.cu", 90)
	if err != nil || p2.From != "memory" {
		t.Fatalf("second build from %q: %v", p2.From, err)
	}
	_, _, err = Compile("this is not C++", "bad.cu", []string{"--gpu-architecture=sm_90"}, true)
	var ne *Error
	if !errors.As(err, &ne) || ne.Log == "" {
		t.Fatalf("compile error without log: %v", err)
	}
}
