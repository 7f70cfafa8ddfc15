//go:build cgo && (cuda || !rocm)

// This file brings NVIDIA GPUs into the build: every build with cgo, unless
// it was made ROCm-only with -tags rocm (then no CUDA package is linked;
// -tags cuda,rocm has both). See docs/rocm.md, "Build isolation".

package app

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/gpu/devbench"
	"github.com/detcoll/detcoll/gpu/devrt/cudart"
)

// The "cuda" device: detcoll's deterministic collectives on NVIDIA GPUs over
// NCCL (package gpu/devcomm), measured against NCCL's own collectives.
func init() {
	Backends["cuda"] = func(ctx context.Context, job *cluster.Job) (bench.Backend, error) {
		return devbench.New(ctx, job)
	}
	DeviceProbes["cuda"] = devbench.Available
	devbench.Versions["cuda"] = func() (string, string) { p := cudart.Probe(); return p.DriverVersion, p.CUDAVersion }
	JobVerifiers["cuda"] = VerifyCUDAJob
	registerEnv(EnvSection{Kind: "cuda", Key: "gpu", Text: CUDAEnvReport, JSON: func() any { return cudart.Probe() }})
}

// CUDAEnvReport is the NVIDIA section of `detcoll env`: the driver, CUDA,
// NVRTC and NCCL versions and files actually loaded, the GPUs and their peer
// access (gpu.Probe), whether the cuda benchmark backend can run, and the
// NCCL_* and DETCOLL_*_LIB variables of this process. It never fails.
func CUDAEnvReport() string {
	var b strings.Builder
	b.WriteString(cudart.Probe().String())
	if err := devbench.Available(); err != nil {
		fmt.Fprintf(&b, "%-14s unavailable: %v\n", "cuda backend", err)
	} else {
		fmt.Fprintf(&b, "%-14s available (detcoll bench --device cuda)\n", "cuda backend")
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "NCCL_") || strings.HasPrefix(k, "CUDA_VISIBLE") ||
			(strings.HasPrefix(k, "DETCOLL_") && (strings.HasSuffix(k, "_LIB") || strings.HasPrefix(k, "DETCOLL_NCCL"))) {
			fmt.Fprintf(&b, "env            %s\n", kv)
		}
	}
	return b.String()
}

// VerifyCUDAJob checks the deterministic device collectives of the launched
// job (every rank calls it) against the host oracle: devverify.VerifyJob. Rows
// are this rank's.
func VerifyCUDAJob(ctx context.Context, job *cluster.Job) ([]VerifyResult, error) {
	return verifyDeviceJob(ctx, job, "cuda", "nccl")
}
