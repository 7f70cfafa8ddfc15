//go:build cgo && (rocm || !cuda)

// This file brings AMD GPUs (ROCm) into the build: every build with cgo,
// unless it was made CUDA-only with -tags cuda (then no ROCm package is
// linked). See docs/rocm.md, "Build isolation".

package app

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/gpu/devbench"
	"github.com/detcoll/detcoll/gpu/devrt/hiprt"
	"github.com/detcoll/detcoll/gpu/rocm"
)

// The "rocm" device: detcoll's deterministic collectives on AMD GPUs over
// RCCL (package gpu/devcomm on the HIP runtime, gpu/devrt/hiprt), measured
// against RCCL's own collectives. Never run on an AMD GPU (docs/rocm.md).
func init() {
	Backends["rocm"] = func(ctx context.Context, job *cluster.Job) (bench.Backend, error) {
		return devbench.NewVendor(ctx, job, "rocm")
	}
	DeviceProbes["rocm"] = ROCmAvailable
	devbench.Versions["rocm"] = hiprt.Versions
	JobVerifiers["rocm"] = VerifyROCmJob
	registerEnv(EnvSection{Kind: "rocm", Key: "rocm", Text: ROCmEnvReport, JSON: func() any { return rocm.Probe() }})
}

// ROCmAvailable reports why `--device rocm` cannot run here, or nil: the
// HIP runtime with a GPU, hiprtc and RCCL must load.
func ROCmAvailable() error { return hiprt.Runtime.Available() }

// VerifyROCmJob is VerifyCUDAJob on AMD GPUs over RCCL.
func VerifyROCmJob(ctx context.Context, job *cluster.Job) ([]VerifyResult, error) {
	return verifyDeviceJob(ctx, job, "rocm", "rccl")
}

// ROCmEnvReport is the AMD section of `detcoll env`: the HIP runtime,
// hiprtc (and the targets it can compile for), RCCL, the GPUs with their
// gfx targets and wavefront sizes (rocm.Probe), whether `--device rocm`
// can run, and the ROCm/RCCL and DETCOLL_*_LIB variables of this process.
// It never fails.
func ROCmEnvReport() string {
	var b strings.Builder
	b.WriteString(rocm.Probe().String())
	if err := ROCmAvailable(); err != nil {
		fmt.Fprintf(&b, "%-14s unavailable: %v\n", "rocm backend", err)
	} else {
		fmt.Fprintf(&b, "%-14s available (detcoll bench --device rocm; never run on AMD hardware, docs/rocm.md)\n", "rocm backend")
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "HIP_") || strings.HasPrefix(k, "ROCR_") || strings.HasPrefix(k, "HSA_") ||
			strings.HasPrefix(k, "RCCL_") || k == "ROCM_PATH" || k == "ROCM_HOME" || k == rocm.ArchEnv ||
			(strings.HasPrefix(k, "DETCOLL_") && strings.HasSuffix(k, "_LIB") &&
				(strings.Contains(k, "HIP") || strings.Contains(k, "RCCL") || strings.Contains(k, "COMGR"))) {
			fmt.Fprintf(&b, "env            %s\n", kv)
		}
	}
	return b.String()
}
