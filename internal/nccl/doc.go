// Package nccl binds NCCL (or, with the same code, RCCL) loaded at run
// time: libnccl.so.2 or $DETCOLL_NCCL_LIB by default; Load takes any list of
// names and its own override variable, so Load(RCCLEnv, RCCLNames...) gives
// RCCL, whose entry points have the same names and signatures. No header or
// library is needed to build; built without cgo, Load fails with an error
// wrapping ErrUnavailable.
//
// # Contract
//
//   - A *Lib is one loaded library; it lives for the process. Version
//     reports the version actually loaded (two copies may be installed) and
//     Path the file.
//   - Communicators are created with the CUDA (or HIP) device of the rank
//     current on the calling OS thread: call CommInitRank inside
//     cuda.Context.Do for the rank's primary context. Collective calls enqueue
//     on the given stream and return before the data moves.
//   - Point-to-point calls that must progress together (an all-to-all) go
//     between GroupStart and GroupEnd, on one goroutine.
//   - Buffers are device pointers (cuda.DevicePtr); counts are elements of
//     the DataType. A Comm is not safe for concurrent use; different Comms are.
//   - Errors are *Error with the ncclResult_t code, its name, the library's
//     description, the call and, when the library has ncclGetLastError, its
//     last message.
package nccl
