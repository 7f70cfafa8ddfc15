package gpuattn

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/detcoll/detcoll/internal/hiprtc"
)

// TestHIPCompileGatherRows compiles the row-gather kernel (the source the
// rccl_ag_rs path builds through gpu/devrt/hiprt) with hiprtc for gfx90a and
// checks the kernel is in the code object. Like gpu/kernels' TestHIPCompile
// it skips without hiprtc unless $DETCOLL_REQUIRE_HIPRTC=1 (CI). Compiled,
// never executed.
func TestHIPCompileGatherRows(t *testing.T) {
	if err := hiprtc.Available(); err != nil {
		if os.Getenv("DETCOLL_REQUIRE_HIPRTC") == "1" {
			t.Fatalf("DETCOLL_REQUIRE_HIPRTC=1 but no hiprtc: %v", err)
		}
		t.Skipf("no hiprtc (Debian: apt-get install libamdhip64-5; or ROCm): %v", err)
	}
	t.Setenv("DETCOLL_CACHE_DIR", filepath.Join(t.TempDir(), "cache"))
	const target = "gfx90a"
	p, err := hiprtc.Build(GatherRowsSource, "detcoll_gather_rows.cu", target)
	if err != nil {
		t.Fatalf("%s: %v", target, err)
	}
	if _, ok := p.Object.Kernel(kernelGather); !ok {
		t.Errorf("%s: %s missing from the code object", target, kernelGather)
	}
	t.Logf("%s: %d kernels, %d-byte code object", target, len(p.Object.Kernels), len(p.Image))
}
