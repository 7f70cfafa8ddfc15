package kernels_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/detcoll/detcoll/gpu/kernels"
	"github.com/detcoll/detcoll/internal/hiprtc"
)

// fastSourcePath is gpu/devcomm's fast kernels, appended to ReduceSource
// on NVIDIA GPUs; read from the checkout (that package is CUDA's and
// cannot be imported into a ROCm build).
const fastSourcePath = "../devcomm/kernels/fast.cu"

// hipTargets are the AMD processors the kernels are compiled for: MI200
// (CDNA2) and MI300 (CDNA3), both with 64-wide wavefronts. Debian 12's
// hiprtc (HIP 5.2) knows gfx90a but not gfx942, which needs ROCm 5.7 or
// later; a target the loaded hiprtc does not know is skipped, saying so.
var hipTargets = []string{"gfx90a", "gfx942"}

// kernelNames lists the kernels the sources define (DC_KERNEL and
// DC_FAST_W instantiations).
func kernelNames(reduce, fast string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^DC_KERNEL\((\w+),`).FindAllStringSubmatch(reduce, -1) {
		out = append(out, "detcoll_reduce_"+m[1])
	}
	for _, m := range regexp.MustCompile(`(?m)^DC_FAST_W\((\w+),`).FindAllStringSubmatch(fast, -1) {
		for _, w := range []string{"2", "4", "8"} {
			out = append(out, "detcoll_fast_"+m[1]+"_w"+w)
		}
	}
	sort.Strings(out)
	return out
}

// TestHIPCompile compiles the reduce kernels and the fast kernels, the
// source the NVIDIA build compiles with NVRTC, through hiprtc for AMD
// targets, and checks every kernel's descriptor: IEEE round-to-nearest-even,
// no denormal flushing, 64-wide wavefronts. Without hiprtc it skips, unless
// $DETCOLL_REQUIRE_HIPRTC=1 (set by .ci/run, which installs Debian's):
// then a kernel that does not compile under HIP fails CI.
func TestHIPCompile(t *testing.T) {
	required := os.Getenv("DETCOLL_REQUIRE_HIPRTC") == "1"
	if err := hiprtc.Available(); err != nil {
		if required {
			t.Fatalf("DETCOLL_REQUIRE_HIPRTC=1 but no hiprtc: %v", err)
		}
		t.Skipf("no hiprtc (Debian: apt-get install libamdhip64-5; or ROCm): %v", err)
	}
	fast, err := os.ReadFile(fastSourcePath)
	if err != nil {
		t.Fatalf("the fast kernels' source: %v", err)
	}
	want := kernelNames(kernels.ReduceSource, string(fast))
	if len(want) != 6+18 {
		t.Fatalf("found %d kernel instantiations in the sources, want 24: %v", len(want), want)
	}
	src := kernels.ReduceSource + "\n" + string(fast)
	t.Setenv("DETCOLL_CACHE_DIR", filepath.Join(t.TempDir(), "cache")) // compile for real
	t.Logf("hiprtc %s at %s", hiprtc.VersionString(), hiprtc.LibraryPath())
	compiled := 0
	for _, target := range hipTargets {
		t.Run(target, func(t *testing.T) {
			if err := hiprtc.CheckTarget(target); errors.Is(err, hiprtc.ErrTargetUnsupported) {
				t.Skipf("this hiprtc cannot compile for %s: %v", target, err)
			}
			p, err := hiprtc.Build(src, "detcoll_reduce_fast.hip", target)
			if err != nil {
				t.Fatalf("%s: %v", target, err)
			}
			if len(p.Image) == 0 || p.From != "compiled" || p.Object.Processor != target {
				t.Fatalf("program for %s: %d bytes from %s, processor %q", target, len(p.Image), p.From, p.Object.Processor)
			}
			for _, name := range want {
				k, ok := p.Object.Kernel(name)
				if !ok {
					t.Errorf("%s: kernel %s missing from the code object", target, name)
					continue
				}
				if k.WavefrontSize() != 64 {
					t.Errorf("%s: %s has %d-wide wavefronts, want 64 on CDNA", target, name, k.WavefrontSize())
				}
			}
			if len(p.Object.Kernels) != len(want) {
				t.Errorf("%s: %d kernels in the code object, want %d", target, len(p.Object.Kernels), len(want))
			}
			if err := p.Object.CheckArithmetic(); err != nil {
				t.Error(err)
			}
			t.Logf("%s: %d kernels, %d-byte code object", target, len(p.Object.Kernels), len(p.Image))
			compiled++
		})
	}
	if compiled == 0 {
		t.Fatalf("no target of %v compiled (hiprtc %s knows none of them)", hipTargets, hiprtc.VersionString())
	}
}

func TestKernelNames(t *testing.T) {
	got := kernelNames("DC_KERNEL(fp32, dc_fp32)\n  DC_KERNEL(no, x)\n", "DC_FAST_W(bf16_native, dc_bf16_native)\n")
	want := []string{"detcoll_fast_bf16_native_w2", "detcoll_fast_bf16_native_w4", "detcoll_fast_bf16_native_w8", "detcoll_reduce_fp32"}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%v", got)
		}
	}
}
