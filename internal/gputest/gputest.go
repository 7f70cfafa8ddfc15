// Package gputest is support for the GPU tests that run as every rank of a
// launched job (detcoll launch … -- ./pkg.test -test.run GPU): it skips a
// test, saying why, when this process is not such a rank or the GPU
// libraries it needs are missing, so the same test binaries pass on the CPU
// machine and CI.
package gputest

import (
	"os"
	"testing"

	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/internal/nccl"
	"github.com/detcoll/detcoll/internal/nvrtc"
	"github.com/detcoll/detcoll/launch"
)

// RequireLaunchedGPU skips t unless a launcher started this process and the
// CUDA driver, a GPU, NCCL and (with nvrtc) NVRTC are usable. binary names
// the test binary in the hint printed when it was not launched.
func RequireLaunchedGPU(t testing.TB, binary string, nvrtcNeeded bool) {
	t.Helper()
	if !launch.Launched(os.Getenv) {
		t.Skipf("not started by a launcher: run this test binary as every rank, e.g. detcoll launch --standalone --nproc-per-node 2 -- ./%s -test.run GPU", binary)
	}
	if err := cuda.Available(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no GPU (%d devices, %v)", n, err)
	}
	if nvrtcNeeded {
		if err := nvrtc.Available(); err != nil {
			t.Skipf("no NVRTC: %v", err)
		}
	}
	if err := nccl.Available(); err != nil {
		t.Skipf("no NCCL: %v", err)
	}
}
