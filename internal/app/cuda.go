package app

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/cudabench"
)

// The "cuda" device: detcoll's deterministic collectives on NVIDIA GPUs over
// NCCL (package gpu/ncclcomm), measured against NCCL's own collectives.
func init() {
	Backends["cuda"] = func(ctx context.Context, job *cluster.Job) (bench.Backend, error) {
		return cudabench.New(ctx, job)
	}
	DeviceProbes["cuda"] = cudabench.Available
}

// CUDAEnvReport is the NVIDIA section of `detcoll env`: the driver, CUDA,
// NVRTC and NCCL versions and files actually loaded, the GPUs and their peer
// access (gpu.Probe), whether the cuda benchmark backend can run, and the
// NCCL_* and DETCOLL_*_LIB variables of this process. It never fails.
func CUDAEnvReport() string {
	var b strings.Builder
	b.WriteString(gpu.Probe().String())
	if err := cudabench.Available(); err != nil {
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
