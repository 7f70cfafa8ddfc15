// Package cublas is a minimal binding of cuBLAS, loaded at run time through
// internal/dl (libcublas.so.13, .12, .11, libcublas.so, then the same names
// under $CUDA_HOME/lib64, $CUDA_PATH/lib64 and /usr/local/cuda/lib64; or only
// the file named by $DETCOLL_CUBLAS_LIB). It declares its own C prototypes:
// no CUDA header and no CUDA library is needed to build, and a build without
// cgo compiles to stubs whose calls fail with an error wrapping
// ErrUnavailable.
//
// Bound: cublasCreate_v2, cublasDestroy_v2, cublasSetStream_v2,
// cublasSetWorkspace_v2, cublasSetMathMode, cublasGetMathMode,
// cublasSetAtomicsMode, cublasGetVersion_v2, cublasGetProperty,
// cublasGemmEx, cublasGemmStridedBatchedEx, cublasGetStatusName and
// cublasGetStatusString (the last four optional).
//
// # Contexts and threads
//
// A cuBLAS handle belongs to the CUDA context that is current when Create is
// called (cuBLAS uses the CUDA runtime, which picks up the driver context
// current on the calling thread). Every call on a handle must be made with
// that context current: wrap calls in gpu.Device.Do or cuda.Context.Do. A
// handle is not safe for concurrent use; serialise calls on it.
//
// # Determinism (what cuBLAS promises, and what detcoll relies on)
//
// cuBLAS documents that its routines give bit-identical results from run to
// run for one toolkit version, on GPUs of the same architecture and the same
// number of SMs, when one stream is active per handle (or each stream has
// its own workspace) and atomics are not allowed (the default; SetAtomicsMode
// makes it explicit). Results may differ across cuBLAS versions, GPU models,
// SM counts, math modes, compute types, and (because the kernel is chosen
// from them) across GEMM shapes, leading dimensions, batch counts, pointer
// alignments and workspace sizes. Callers that need identical bits from two
// computations therefore make the same calls: same parameters, same
// alignment, same configuration (see package gpu/gpuffn).
//
// # Memory and cgo pointer rules
//
// Matrices are device addresses (cuda.DevicePtr). The scalars alpha and
// beta are passed by value and copied to C memory inside the shim (host
// pointer mode), so no Go pointer is handed to cuBLAS; they are float32,
// which is why only the CUBLAS_COMPUTE_32F family of compute types is
// accepted.
//
// # Errors
//
// Failing calls return *Error with the cublasStatus_t code, its name and
// description (from cuBLAS when it exports them, else a built-in table) and
// the symbol called. Arguments are checked in Go before any call (errors
// with code StatusInvalidValue), so a bad leading dimension never reaches
// the library. Load failures wrap ErrUnavailable.
package cublas

//go:generate go run ../bindgen
