// Package gputest is support for the GPU tests that run as every rank of a
// launched job (detcoll launch … -- ./pkg.test -test.run GPU): it skips a
// test, saying why, when this process is not such a rank or the GPU
// libraries it needs are missing, so the same test binaries pass on the CPU
// machine and CI.
//
// It is vendor-aware: the GPU runtime is the one the code under test will
// use, gpu/devrt.Get("") — $DETCOLL_DEVICE ("cuda" or "rocm") when set,
// else the first usable runtime the test binary links (CUDA first). The test
// binary links the runtimes (gpu/devrt/cudart, gpu/devrt/hiprt); this
// package imports neither vendor.
package gputest

import (
	"fmt"
	"os"
	"testing"

	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/launch"
)

// RequireLaunchedGPU skips t unless a launcher started this process and the
// chosen vendor's driver (CUDA driver or HIP runtime), a GPU, its collective
// library (NCCL or RCCL) and, with compiler, its kernel compiler (NVRTC or
// hiprtc) are usable. binary names the test binary in the hint printed when
// it was not launched. It returns the runtime the test will run on.
func RequireLaunchedGPU(t testing.TB, binary string, compiler bool) devrt.Runtime {
	t.Helper()
	if !launch.Launched(os.Getenv) {
		t.Skipf("not started by a launcher: run this test binary as every rank, e.g. detcoll launch --standalone --nproc-per-node 2 -- ./%s -test.run GPU", binary)
	}
	rt, err := devrt.Get("")
	if why := Why(rt, err, compiler); why != "" {
		t.Skip(why)
	}
	return rt
}

// Why is the reason RequireLaunchedGPU skips (after the launcher check),
// given the result of devrt.Get, or "" when the tests can run on rt.
func Why(rt devrt.Runtime, err error, compiler bool) string {
	if err != nil {
		return "no GPU runtime for this test binary: " + err.Error()
	}
	driver := "CUDA driver"
	if rt.Vendor() == "rocm" {
		driver = "HIP runtime"
	}
	if err := rt.DriverAvailable(); err != nil {
		return fmt.Sprintf("no %s: %v", driver, err)
	}
	if n, err := rt.DeviceCount(); err != nil || n == 0 {
		return fmt.Sprintf("no GPU (%d devices, %v)", n, err)
	}
	if compiler {
		if err := rt.CompilerAvailable(); err != nil {
			return fmt.Sprintf("no %s: %v", rt.CompilerName(), err)
		}
	}
	if err := rt.CCLAvailable(); err != nil {
		return fmt.Sprintf("no %s: %v", rt.CCLName(), err)
	}
	return ""
}
