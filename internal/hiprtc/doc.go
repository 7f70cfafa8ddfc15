// Package hiprtc compiles the kernels' C++ source to AMD GPU code objects at
// run time through hiprtc, loaded with dlopen: libhiprtc.so.7, .so.6 (its
// own library from ROCm 6 on), then libamdhip64.so.5 (ROCm 5.x carries
// hiprtc inside the runtime), each also under $ROCM_PATH/lib and
// /opt/rocm/lib, or only the file named by $DETCOLL_HIPRTC_LIB. No ROCm
// header or library is needed to build. Built without cgo, every call fails
// with an error wrapping ErrUnavailable. It is internal/nvrtc's counterpart
// for the same kernel source (gpu/kernels/reduce.cu).
//
// # Arithmetic options
//
// Options always pass -ffp-contract=off (no fused multiply-add or other
// contraction), -fno-fast-math (no reassociation, no approximate
// functions, NaN and infinity honoured) and -fno-gpu-flush-denormals-to-zero
// (f32 denormals kept; f64 and f16 never flush on AMDGPU), the clang
// spellings of NVRTC's --fmad=false --ftz=false, as docs/contract.md, "add(a, b) per dtype"
// requires. Options rejects extra options that would weaken them. Build
// then checks the result instead of trusting the flags: every kernel
// descriptor of the code object must say round-to-nearest-even and "flush
// nothing" for both f32 and f16/f64 (Inspect), or the image is refused.
//
// # Targets and wavefronts
//
// Code is compiled for the device's processor (--offload-arch=gfx942 for a
// gcnArchName of gfx942:sramecc+:xnack-; without target features the code
// object loads on every sramecc/xnack setting). hiprtc of ROCm 5.2 aborts
// the whole process when asked for a processor it does not know (gfx940
// and later), so Build first asks comgr (libamd_comgr, loaded the same way,
// $DETCOLL_COMGR_LIB) for the ISAs it supports and refuses an unknown one
// with ErrTargetUnsupported; when comgr cannot be loaded the list is
// unknown and the compile is attempted. The kernels assume no wavefront
// size: CDNA (gfx9) runs 64-wide wavefronts, RDNA 32 by default; Inspect
// reports each kernel's.
//
// # Caching
//
// Build caches code objects in memory (per process) and on disk, under
// $DETCOLL_CACHE_DIR or os.UserCacheDir()/detcoll/kernels (shared with
// internal/nvrtc; different keys and the .hsaco extension), keyed by sha256
// of (source, options, hiprtc version, the hiprtc library file, processor).
// A cache directory that cannot be written only disables the disk cache;
// files are written to a temporary name and renamed. Invalidate drops a bad
// entry.
//
// # Concurrency
//
// All functions are safe for concurrent use; compilations are serialised.
// Nothing here touches a device.
package hiprtc

//go:generate go run ../bindgen
