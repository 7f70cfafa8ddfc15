// Package nccl is NCCL for the CUDA side of detcoll: it loads libnccl.so.2
// (or the file named by $DETCOLL_NCCL_LIB) through the shared NCCL-API
// binding internal/ccl and types device buffers and streams as the CUDA
// driver binding's (cuda.DevicePtr, cuda.Stream): Lib and Comm are ccl's
// typed face instantiated with cuda.Runtime, the enums ccl's. RCCL, the same API on
// ROCm, is internal/rccl over the same binding; neither package imports the
// other's runtime, which is what keeps a -tags rocm build free of CUDA and
// a -tags cuda build free of ROCm (docs/rocm.md).
//
// No header or library is needed to build; built without cgo, Load fails
// with an error wrapping ErrUnavailable.
//
// # Contract
//
//   - A *Lib is one loaded library; it lives for the process. Version
//     reports the version actually loaded (two copies may be installed) and
//     Path the file.
//   - Communicators are created with the CUDA device of the rank current on
//     the calling OS thread: call CommInitRank inside cuda.Context.Do for
//     the rank's primary context. Collective calls enqueue on the given
//     stream and return before the data moves.
//   - Point-to-point calls that must progress together (an all-to-all) go
//     between GroupStart and GroupEnd, on one goroutine.
//   - Buffers are device pointers (cuda.DevicePtr); counts are elements of
//     the DataType. A Comm is not safe for concurrent use; different Comms are.
//   - Errors are *Error (internal/ccl's) with the ncclResult_t code, its
//     name, the library's description, the call and, when the library has
//     ncclGetLastError, its last message.
package nccl
