package hiprtc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding/bindingtest"

	"github.com/detcoll/detcoll/internal/binding/rtc"
	"github.com/detcoll/detcoll/internal/hip"
	"github.com/detcoll/detcoll/internal/kcache"
)

func TestSymbolNames(t *testing.T) {
	// The constants are the documented names; hiprtc exports them unversioned
	// and needs every one.
	bindingtest.CheckPlainSymbols(t, syms.Symbols, "hiprtc")
	for _, s := range syms.Symbols {
		if s.Optional {
			t.Errorf("%s is optional", s.API)
		}
	}
	if syms.API(hiprtcCompileProgram) != "hiprtcCompileProgram" || syms.API(hiprtcGetCode) != "hiprtcGetCode" {
		t.Fatal("symbol table out of order")
	}
}

// hiprtc's candidates: its own sonames, then ROCm 5's runtime (which
// carries hiprtc), on the loader path and then under the ROCm roots
// (hip.UnderRoots, tested there); never ROCm 6/7's runtime.
func TestLibraryNames(t *testing.T) {
	t.Setenv("ROCM_PATH", "/opt/rocm-6.4.1")
	want := []string{"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so", "libamdhip64.so.5"}
	want = append(want, hip.UnderRoots(want...)...)
	n := LibraryNames()
	if strings.Join(n, " ") != strings.Join(want, " ") {
		t.Fatalf("names %v, want %v", n, want)
	}
	if j := strings.Join(n, " "); strings.Contains(j, "libamdhip64.so.6") || strings.Contains(j, "libamdhip64.so.7") {
		t.Errorf("ROCm 6/7 runtimes do not carry hiprtc: %v", n)
	}
	c := ComgrNames()
	if c[0] != "libamd_comgr.so.3" || c[1] != "libamd_comgr.so.2" {
		t.Fatalf("comgr names %v", c)
	}
	if LibraryEnv != "DETCOLL_HIPRTC_LIB" || ComgrEnv != "DETCOLL_COMGR_LIB" {
		t.Fatal("variable names")
	}
}

func TestParseTargetID(t *testing.T) {
	good := map[string]string{
		"gfx942:sramecc+:xnack-": "gfx942", "gfx90a": "gfx90a", "gfx1030": "gfx1030", "gfx950": "gfx950",
		" gfx908:xnack+ ": "gfx908", "gfx11-generic": "gfx11-generic", "gfx9-4-generic": "gfx9-4-generic",
	}
	for in, want := range good {
		p, _, err := ParseTargetID(in)
		if err != nil || p != want {
			t.Errorf("ParseTargetID(%q) = %q %v", in, p, err)
		}
	}
	_, f, _ := ParseTargetID("gfx942:sramecc+:xnack-")
	if strings.Join(f, ",") != "sramecc+,xnack-" {
		t.Errorf("features %v", f)
	}
	for _, bad := range []string{"", "sm_90", "gfx", "gfx942:sramecc", "gfx942;rm -rf", "--offload-arch=gfx942", "gfxZZZ"} {
		if _, _, err := ParseTargetID(bad); err == nil {
			t.Errorf("ParseTargetID(%q) accepted", bad)
		}
	}
}

func TestOptions(t *testing.T) {
	o, err := Options("gfx942")
	if err != nil {
		t.Fatal(err)
	}
	want := "--offload-arch=gfx942 -O3 -std=c++17 -ffp-contract=off -fno-fast-math -fno-gpu-flush-denormals-to-zero"
	if strings.Join(o, " ") != want {
		t.Fatalf("options %q", strings.Join(o, " "))
	}
	o, err = Options("gfx90a", "-g", "-DDETCOLL_X=1")
	if err != nil || o[len(o)-1] != "-DDETCOLL_X=1" {
		t.Fatalf("extra options %v %v", o, err)
	}
	for _, bad := range []string{"-ffast-math", "-fgpu-flush-denormals-to-zero", "-ffp-contract=fast", "-ffp-contract=on",
		"--offload-arch=gfx90a", "-mcpu=gfx90a", "-funsafe-math-optimizations", "-fapprox-func", "-fno-honor-nans",
		"-fdenormal-fp-math=preserve-sign", "-ffp-model=fast", "-fgpu-rdc", " -FFAST-MATH"} {
		if _, err := Options("gfx942", bad); err == nil {
			t.Errorf("option %q accepted", bad)
		}
	}
	if _, err := Options("gfx942:sramecc+"); err == nil {
		t.Error("a target ID with features accepted as a processor")
	}
}

func TestCacheKey(t *testing.T) {
	o := []string{"--offload-arch=gfx942", "-ffp-contract=off"}
	k := CacheKey("src", o, "5.2", "libamdhip64.so.5.2.21153", "gfx942")
	if len(k) != 64 || k != CacheKey("src", o, "5.2", "libamdhip64.so.5.2.21153", "gfx942") {
		t.Fatal("key not stable")
	}
	for i, d := range []string{
		CacheKey("src2", o, "5.2", "libamdhip64.so.5.2.21153", "gfx942"),
		CacheKey("src", o[:1], "5.2", "libamdhip64.so.5.2.21153", "gfx942"),
		CacheKey("src", o, "6.4", "libamdhip64.so.5.2.21153", "gfx942"),
		CacheKey("src", o, "5.2", "libamdhip64.so.5.2.21154", "gfx942"),
		CacheKey("src", o, "5.2", "libamdhip64.so.5.2.21153", "gfx90a"),
		CacheKey("src", []string{"--offload-arch=gfx942-ffp-contract=off"}, "5.2", "libamdhip64.so.5.2.21153", "gfx942"),
	} {
		if d == k {
			t.Errorf("variant %d has the same key", i)
		}
	}
	// The keys name users' disk cache files: a change invalidates every
	// cache. These are the keys of the code before internal/kcache.
	for _, g := range []struct{ got, want string }{
		{k, "1eab180448ebb58fd604ef71986a48636e85e911f30db74119b69419c3524462"},
		{CacheKey("k", nil, "", "", "gfx90a"), "61b16f53d4bd026d273aeeda7c57673d7ea74bcc25b3cba49474f9444180aa42"},
	} {
		if g.got != g.want {
			t.Errorf("cache key %s, want %s (the disk cache format changed)", g.got, g.want)
		}
	}
}

// hiprtc's disk cache files are .hsaco, removed by Invalidate; the
// directory is kcache's (internal/kcache tests the caches themselves).
func TestCacheFiles(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(CacheEnv, dir)
	if p := cachePath("abc"); p != filepath.Join(dir, "abc.hsaco") || CacheDir() != dir {
		t.Fatalf("path %s in %s", p, CacheDir())
	}
	kcache.WriteAtomic(cachePath("abc"), []byte("image"))
	memCache.Put("abc", &Program{})
	Invalidate("abc")
	if _, ok := memCache.Get("abc"); ok || kcache.Read(cachePath("abc")) != nil {
		t.Fatal("Invalidate left a copy")
	}
}

// hiprtc's own names of its codes (rtc.Library maps them), and its prefix.
func TestErrors(t *testing.T) {
	for code, name := range map[rtc.Result]string{99: "HIPRTC_ERROR_99", 100: "HIPRTC_ERROR_LINKING", rtc.ResultInvalidOpt: "HIPRTC_ERROR_INVALID_OPTION"} {
		if ResultName(code) != name {
			t.Errorf("ResultName(%d) = %s, want %s", code, ResultName(code), name)
		}
	}
	e := errorOf("hiprtcCompileProgram", rtc.ResultCompilation)
	if !strings.HasPrefix(e.Error(), "hiprtc: hiprtcCompileProgram: HIPRTC_ERROR_COMPILATION") || errors.Is(e, &Error{Code: rtc.ResultInvalidOpt}) {
		t.Fatalf("error %v", e)
	}
	if !errors.Is(&Error{Code: rtc.ResultUnavailable}, ErrUnavailable) {
		t.Fatal("unavailable")
	}
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInspect reads code objects that Debian's hiprtc produced (testdata),
// so that the kernel-descriptor checks run on every machine.
func TestInspect(t *testing.T) {
	obj, err := Inspect(readTestdata(t, "add_gfx90a.hsaco"))
	if err != nil {
		t.Fatal(err)
	}
	k, ok := obj.Kernel("detcoll_test_add")
	if !ok || len(obj.Kernels) != 1 || obj.Processor != "gfx90a" || obj.Mach != 0x3f {
		t.Fatalf("code object %+v", obj)
	}
	if k.DenormF32 != DenormFlushNone || k.DenormF16F64 != DenormFlushNone || k.RoundF32 != RoundNearestEven || k.WavefrontSize() != 64 {
		t.Fatalf("kernel %+v", k)
	}
	if err := obj.CheckArithmetic(); err != nil {
		t.Fatal(err)
	}

	// Negative control: -fgpu-flush-denormals-to-zero is visible and refused.
	ftz, err := Inspect(readTestdata(t, "add_gfx90a_ftz.hsaco"))
	if err != nil {
		t.Fatal(err)
	}
	if ftz.Kernels[0].DenormF32 != 0 {
		t.Fatalf("flushing kernel reads %+v", ftz.Kernels[0])
	}
	if err := ftz.CheckArithmetic(); err == nil || !strings.Contains(err.Error(), "detcoll_test_add") {
		t.Fatalf("flush-to-zero kernel accepted: %v", err)
	}
	if _, err := checkImage(readTestdata(t, "add_gfx90a_ftz.hsaco"), "gfx90a"); err == nil {
		t.Fatal("checkImage accepted a flushing code object")
	}
	if _, err := checkImage(readTestdata(t, "add_gfx90a.hsaco"), "gfx942"); err == nil {
		t.Fatal("checkImage accepted a code object for another processor")
	}

	// RDNA: 32-wide wavefronts by default; the kernels must not care.
	rdna, err := Inspect(readTestdata(t, "add_gfx1030.hsaco"))
	if err != nil || rdna.Processor != "gfx1030" || rdna.Kernels[0].WavefrontSize() != 32 {
		t.Fatalf("gfx1030 %+v %v", rdna, err)
	}

	for _, bad := range [][]byte{nil, []byte("\x7fELF not really"), readTestdata(t, "add.hip")} {
		if _, err := Inspect(bad); err == nil {
			t.Errorf("Inspect accepted %q", bad[:min(len(bad), 12)])
		}
	}
	if err := (&CodeObject{}).CheckArithmetic(); err == nil {
		t.Error("empty code object accepted")
	}
}

// requireHIPRTC skips t without hiprtc, or fails it when
// $DETCOLL_REQUIRE_HIPRTC=1 (set by .ci/run, which installs Debian's).
func requireHIPRTC(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("error %v does not wrap ErrUnavailable", err)
		}
		if os.Getenv("DETCOLL_REQUIRE_HIPRTC") == "1" {
			t.Fatalf("DETCOLL_REQUIRE_HIPRTC=1 but no hiprtc: %v", err)
		}
		t.Skipf("no hiprtc (install libamdhip64-5 on Debian, or ROCm): %v", err)
	}
}

const addSource = `extern "C" __global__ void detcoll_test_add(float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fadd_rn(x[i], y[i]);
}
`

func TestBuildHere(t *testing.T) {
	requireHIPRTC(t)
	t.Logf("hiprtc %s at %s", VersionString(), LibraryPath())
	targets, err := SupportedTargets()
	if err != nil {
		t.Logf("comgr not loadable, target list unknown: %v", err)
	} else {
		t.Logf("comgr %s: %v", ComgrPath(), targets)
		found := false
		for _, p := range targets {
			found = found || p == "gfx90a"
		}
		if !found {
			t.Fatalf("gfx90a not among the supported targets %v", targets)
		}
		if err := CheckTarget("gfx9999"); !errors.Is(err, ErrTargetUnsupported) {
			t.Fatalf("CheckTarget(gfx9999) = %v", err)
		}
	}
	t.Setenv(CacheEnv, t.TempDir())
	p, err := Build(addSource, "add.hip", "gfx90a:sramecc+:xnack-")
	if err != nil {
		t.Fatal(err)
	}
	if p.From != "compiled" || p.Processor != "gfx90a" || p.Object == nil || len(p.Object.Kernels) != 1 {
		t.Fatalf("program %+v", p)
	}
	if p2, err := Build(addSource, "add.hip", "gfx90a"); err != nil || p2.From != "memory" || p2.Key != p.Key {
		t.Fatalf("second build from %q: %v", p2.From, err)
	}
	memCache.Delete(p.Key)
	if p3, err := Build(addSource, "add.hip", "gfx90a"); err != nil || p3.From != "disk" {
		t.Fatalf("third build from %q: %v", p3.From, err)
	}
	// The real toolchain: the check bites when flushing is asked for.
	opts := append([]string{"--offload-arch=gfx90a"}, "-fgpu-flush-denormals-to-zero")
	img, _, err := Compile(addSource, "add_ftz.hip", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkImage(img, "gfx90a"); err == nil {
		t.Fatal("a flush-to-zero build passed the arithmetic check")
	}
	_, _, err = Compile("this is not C++", "bad.hip", []string{"--offload-arch=gfx90a"})
	var he *Error
	if !errors.As(err, &he) || he.Code != rtc.ResultCompilation || he.Log == "" {
		t.Fatalf("compile error without log: %v", err)
	}
	if _, err := Build(addSource, "add.hip", "sm_90"); err == nil {
		t.Fatal("an NVIDIA target accepted")
	}
}
