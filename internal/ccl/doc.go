// Package ccl binds the NCCL API — the entry points, enums, result codes and
// the 128-byte unique id that NCCL and RCCL both export under the same names
// (ncclCommInitRank, ncclAllGather, …) — loaded at run time through
// internal/dl. It is the one binding of both vendors' libraries; it names no
// library and no vendor runtime type:
//
//   - internal/nccl loads NCCL (libnccl.so.2, $DETCOLL_NCCL_LIB) and types
//     buffers and streams as CUDA's (cuda.DevicePtr, cuda.Stream);
//   - internal/rccl loads RCCL (librccl.so.1, $DETCOLL_RCCL_LIB) and types
//     them as HIP's (hip.DevicePtr, hip.Stream).
//
// Keeping the binding free of both runtimes is what lets a ROCm-only build
// (-tags rocm) carry no CUDA package and a CUDA-only build no ROCm package
// (docs/rocm.md, "Build isolation"), while the calling code stays one.
//
// Device addresses are uint64 and streams uintptr here: the typed packages
// convert. No header or library is needed to build; built without cgo, Load
// fails with an error wrapping ErrUnavailable.
//
// # Contract
//
//   - A *Lib is one loaded library; it lives for the process. Version
//     reports the version actually loaded (two copies may be installed) and
//     Path the file; Vendor says "nccl" or "rccl".
//   - Communicators are created with the device of the rank current on the
//     calling OS thread (a CUDA context, or HIP's current device): call
//     CommInitRank on that thread. Collective calls enqueue on the given
//     stream and return before the data moves.
//   - Point-to-point calls that must progress together (an all-to-all) go
//     between GroupStart and GroupEnd, on one goroutine.
//   - Counts are elements of the DataType. A Comm is not safe for
//     concurrent use; different Comms are.
//   - Errors are *Error with the ncclResult_t code, its name, the library's
//     description, the call and, when the library has ncclGetLastError, its
//     last message.
package ccl

//go:generate go run ../bindgen
