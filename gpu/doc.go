// Package gpu is detcoll's device layer, for both vendors: devices and
// their memory, streams and graphs, and the deterministic reduce kernels —
// CUDA C embedded in the binary (package gpu/kernels), compiled on first
// use for the device's own architecture and cached, by NVRTC on NVIDIA and
// by hiprtc on AMD. It is written against the vendor-neutral runtime of
// package gpu/devrt (Open picks the runtime as devrt.Get does; OpenWith
// takes one) and imports no vendor binding. The AMD side has never run on AMD hardware
// (docs/rocm.md).
//
// # The arithmetic contract
//
// ReduceKernels.Reduce and ReduceStrided compute, for every element, the
// tree of docs/contract.md ("The tree") over the W inputs in rank order with
// the addition of its "add(a, b) per dtype", bit for bit equal to reduce.Oracle: fp32 and fp64
// with IEEE round-to-nearest-even additions (no FMA, no flush-to-zero);
// fp16 and bf16 either rounding every node to the type (reduce.Native) or
// summing in float32 and rounding once (reduce.F32); NaN results written as
// the canonical quiet NaN; signed zeros, infinities and subnormals per IEEE.
//
// # Devices, threads and contexts
//
// A *Device owns one retain of its GPU's primary context (the context the
// CUDA runtime and NCCL also use; on AMD, the device of the HIP runtime). Every Device method, and every launch of
// ReduceKernels, locks the calling goroutine to its OS thread, makes the
// context current there and unlocks again, so callers need not care which
// thread they run on. Code that calls the runtime (or internal/cuda)
// directly for a device wraps it in Device.Do. Methods are safe for concurrent use; work on one
// stream is ordered as it is enqueued.
//
// # Memory and ownership
//
// Device memory is addressed by devrt.Ptr (cuda.DevicePtr and
// hip.DevicePtr are the same type). Alloc'd memory belongs to
// the caller, who frees it with Free before Close. Copies and fills with Go
// slices (CopyHtoD, CopyDtoH, CopyDtoD, Memset) are complete when they
// return, but they run on the legacy stream and do not wait for work queued
// on other streams: synchronise a stream before reading what it wrote.
// Streams come from NewStream and go back with DestroyStream; the zero stream is the legacy default stream (which cannot
// be captured into a graph).
//
// # Errors
//
// Argument errors (nil pointers with count > 0, count < 0, W < 1 or too
// large, an unsupported dtype or mode, misaligned or partially overlapping
// buffers) wrap reduce.ErrArgs and are detected before anything is
// enqueued. Driver and compiler failures are the vendor's errors
// (*cuda.Error and *nvrtc.Error, or *hip.Error and *hiprtc.Error). Without
// a usable driver (no GPU, or a build without cgo) Open fails with an error
// wrapping the vendor's ErrUnavailable.
package gpu
