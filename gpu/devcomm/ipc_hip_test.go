package devcomm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/detcoll/detcoll/internal/hiprtc"
)

// TestHIPCompileIPC compiles the IPC program (reduce + fast + ipc.cu, the
// source the HIP IPC path builds) through hiprtc for gfx90a and checks that
// every IPC kernel is in the code object with IEEE arithmetic. Like
// gpu/kernels' TestHIPCompile it skips without hiprtc unless
// $DETCOLL_REQUIRE_HIPRTC=1 (CI). Compiled, never executed.
func TestHIPCompileIPC(t *testing.T) {
	if err := hiprtc.Available(); err != nil {
		if os.Getenv("DETCOLL_REQUIRE_HIPRTC") == "1" {
			t.Fatalf("DETCOLL_REQUIRE_HIPRTC=1 but no hiprtc: %v", err)
		}
		t.Skipf("no hiprtc (Debian: apt-get install libamdhip64-5; or ROCm): %v", err)
	}
	t.Setenv("DETCOLL_CACHE_DIR", filepath.Join(t.TempDir(), "cache"))
	const target = "gfx90a"
	p, err := hiprtc.Build(ipcProgram(8), "detcoll_ipc.hip", target)
	if err != nil {
		t.Fatalf("%s: %v", target, err)
	}
	for _, name := range ipcKernelNames() {
		if _, ok := p.Object.Kernel(name); !ok {
			t.Errorf("%s: IPC kernel %s missing from the code object", target, name)
		}
	}
	if err := p.Object.CheckArithmetic(); err != nil {
		t.Error(err)
	}
	t.Logf("%s: %d kernels, %d-byte code object", target, len(p.Object.Kernels), len(p.Image))
}
