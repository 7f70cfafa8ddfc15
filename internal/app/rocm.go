//go:build cgo && (rocm || !cuda)

// This file brings AMD GPUs (ROCm) into the build: every build with cgo,
// unless it was made CUDA-only with -tags cuda (then no ROCm package is
// linked). See docs/rocm.md, "Build isolation".

package app

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/detcoll/detcoll/gpu/rocm"
	"github.com/detcoll/detcoll/internal/hip"
	"github.com/detcoll/detcoll/internal/hiprtc"
	"github.com/detcoll/detcoll/internal/rccl"
)

func init() {
	DeviceProbes["rocm"] = ROCmAvailable
	registerEnv(EnvSection{Kind: "rocm", Key: "rocm", Text: ROCmEnvReport, JSON: func() any { return rocm.Probe() }})
}

// errROCmBackend says what the rocm device lacks in this version.
var errROCmBackend = errors.New("detcoll has no ROCm benchmark or verify backend yet (docs/rocm.md: the libraries, the kernel compiler and the probe are in; the device communicator has never run on AMD hardware)")

// ROCmAvailable reports why `--device rocm` cannot run here: the HIP
// runtime with a GPU, hiprtc and RCCL must load, and then the missing
// backend is the reason.
func ROCmAvailable() error {
	if err := hip.Available(); err != nil {
		return err
	}
	if err := hiprtc.Available(); err != nil {
		return err
	}
	if err := rccl.Available(); err != nil {
		return err
	}
	return errROCmBackend
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
