// Package cuda is a minimal binding of the CUDA driver API, loaded at run
// time (libcuda.so.1, or the file named by $DETCOLL_CUDA_LIB) through
// internal/dl. It declares its own C prototypes: no CUDA header and no CUDA
// library is needed to build, and a build without cgo compiles to stubs that
// report ErrUnavailable.
//
// # Loading
//
// The first call that needs the driver (Available, Init, or any wrapper)
// opens the library, resolves every symbol of the list in symbols.txt (the
// versioned variants such as cuMemAlloc_v2 that the CUDA headers would
// select) and calls cuInit(0). The outcome, success or error, is remembered
// for the life of the process. Symbols marked optional may be missing (older
// drivers); calling their wrapper then returns an *Error with code
// gpurt.ResultSymbolNotFound.
//
// symbols.txt is the one list of the entry points and result names;
// internal/bindgen writes symbols_gen.go from it (go generate). The stream,
// event, module, function and graph types are internal/binding/gpurt's,
// shared with internal/hip (the same C ABI); the rest is this package's.
//
// # Contexts and OS threads
//
// The CUDA "current context" is a property of the calling OS thread, and Go
// moves goroutines between threads. Wrappers that act on device state
// (allocation, copies, streams, modules, launches, graphs) use whatever
// context is current on the thread they happen to run on, exactly like the
// driver API. Callers therefore either
//
//   - run the whole sequence inside Context.Do (locks the goroutine to its
//     thread, makes the context current, runs the function, unlocks), or
//   - call Context.Bind and keep the goroutine locked until they release it.
//
// detcoll uses only primary contexts (Device.PrimaryCtxRetain), which are
// shared with the CUDA runtime and therefore with NCCL. Making a context
// current is cheap (tens of nanoseconds), so higher layers bind per operation.
//
// # Memory and cgo pointer rules
//
// DevicePtr is a device address (an integer, never dereferenced by Go).
// The memory, copy, launch and IPC calls are internal/binding/gpurt's,
// shared with HIP and instantiated with this binding's Runtime
// (gpurt.MemAlloc[cuda.Runtime](n), gpurt.MemcpyHtoDAsync(dst, h, 0, n,
// stream)): synchronous copies take Go slices, which the driver reads or
// writes only during the call; asynchronous copies take gpurt.HostMem,
// page-locked C memory from gpurt.MemAllocHost, because the driver keeps
// using the buffer after the call returns. Kernel parameters are laid out
// by Args and copied into C memory before cuLaunchKernel sees them, so no
// Go pointer is retained by C.
//
// # Errors
//
// Every failing driver call returns a *Error carrying the CUresult code, its
// name and description (from cuGetErrorName/String when available, else from
// a built-in table) and the exact symbol that was called. errors.Is matches
// *Error values by code (e.g. errors.Is(err, &cuda.Error{Code:
// gpurt.ResultOutOfMemory})). Errors from loading wrap ErrUnavailable.
//
// Handles (Context, Stream, Event, Module, Function, GraphExec) are
// plain values; the zero Stream is the legacy default stream. Ownership is
// the caller's: whoever creates a handle destroys it, once.
package cuda

//go:generate go run ../bindgen
