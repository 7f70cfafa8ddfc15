// Package nvrtc compiles CUDA C source to device code at run time through
// NVRTC, loaded with dlopen (libnvrtc.so.13, .12, … or $DETCOLL_NVRTC_LIB);
// no NVRTC header or library is needed to build. Built without cgo, every
// call fails with an error wrapping ErrUnavailable.
//
// # Arithmetic options
//
// Options always disable every value-changing shortcut, as docs/contract.md
// section 3 requires: --ftz=false --prec-div=true --prec-sqrt=true
// --fmad=false (no fast math, no flush to zero, no contraction). Code is
// compiled for the device's own architecture (--gpu-architecture=sm_XY) and fetched
// as CUBIN, so no PTX JIT is involved; when the NVRTC in hand does not know
// that architecture, it compiles PTX for the newest virtual architecture it
// knows that is not newer than the device, and the driver JIT-compiles it.
//
// # Caching
//
// Build caches images in memory (per process) and on disk, under
// $DETCOLL_CACHE_DIR or os.UserCacheDir()/detcoll/kernels, keyed by
// sha256 of (source, options, NVRTC version, architecture, image kind).
// A cache directory that cannot be created or written only disables the disk
// cache. Files are written to a temporary name and renamed, so concurrent
// processes never see a partial image. Invalidate drops a bad entry.
//
// # Concurrency
//
// All functions are safe for concurrent use; compilations are serialised.
// Nothing here touches a CUDA context.
package nvrtc

//go:generate go run ../bindgen
