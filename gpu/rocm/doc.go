// Package rocm is detcoll's AMD GPU layer (ROCm): what package gpu is for
// NVIDIA, over internal/hip (runtime), internal/hiprtc (kernel compiler)
// and internal/rccl (RCCL, the transport). It imports nothing of CUDA, so a
// -tags rocm build carries no CUDA package (docs/rocm.md).
//
// What is here today: Probe (the ROCm section of `detcoll env`) and Target,
// the compilation target of a device. The kernels are package kernels'
// reduce.cu, compiled by hiprtc for the device's gfx processor with IEEE
// options and checked (internal/hiprtc). No AMD GPU has been available to
// this project: nothing here has run on AMD hardware; CI compiles the
// kernels for gfx90a with Debian's hiprtc and runs every test that needs no
// GPU.
package rocm
