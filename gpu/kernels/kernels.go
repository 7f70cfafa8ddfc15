// Package kernels holds the device source that every GPU backend compiles
// at run time: reduce.cu, the deterministic tree reduce kernels
// (docs/contract.md). NVIDIA builds compile it with NVRTC
// (package gpu), AMD builds with hiprtc (internal/hiprtc); the same source,
// the same contract, the same bits. This package imports nothing, so a
// ROCm-only build can embed the source without any CUDA package and a
// CUDA-only build without any ROCm one.
package kernels

import _ "embed"

// ReduceSource is the C++ source of the reduce kernels (CUDA and HIP).
//
//go:embed reduce.cu
var ReduceSource string
