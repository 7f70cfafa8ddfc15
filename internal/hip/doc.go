// Package hip is a minimal binding of the HIP runtime (ROCm), loaded at run
// time through internal/dl: libamdhip64.so.7, .so.6, .so.5, .so, then the
// same under $ROCM_PATH/lib and /opt/rocm/lib, or only the file named by
// $DETCOLL_HIP_LIB. It declares its own C prototypes: no HIP header and no
// ROCm library is needed to build, and a build without cgo compiles to
// stubs that report ErrUnavailable. It is internal/cuda's counterpart and
// follows its shape (symbols.txt → symbols_gen.go, types.go, api.go,
// raw_cgo.go / raw_nocgo.go) and shares its stream, event, module, function
// and graph types through internal/binding/gpurt; nothing here imports
// anything of CUDA.
//
// # Loading
//
// Load opens the library and resolves the list in symbols.txt; it needs no
// GPU, so RuntimeVersion and LibraryPath work on any machine with ROCm
// installed (detcoll env, CI). Init additionally calls hipInit(0), which
// fails on a machine without an AMD GPU (hipErrorNoDevice or
// hipErrorInvalidDevice): the *Error then wraps ErrUnavailable. Both
// outcomes are remembered for the life of the process. Symbols marked
// optional may be missing; their wrappers then return an *Error with code
// gpurt.ResultSymbolNotFound.
//
// # Devices and OS threads
//
// HIP has no user-visible contexts: the current device is a property of the
// calling OS thread (hipSetDevice), and Go moves goroutines between
// threads. Wrappers that act on device state (allocation, copies, streams,
// modules, launches, graphs, IPC) use the device current on the thread they
// run on, exactly like HIP. Callers therefore either run the whole sequence
// inside Device.Do (locks the goroutine to its thread, makes the device
// current, runs the function, unlocks) or call Device.Bind and keep the
// goroutine locked until they release it.
//
// # Device properties across ROCm versions
//
// hipDeviceProp_t changed layout in ROCm 6 (hipGetDeviceProperties is a
// macro for hipGetDevicePropertiesR0600 there). Properties calls
// hipGetDevicePropertiesR0600 when the library exports it, else
// hipGetDevicePropertiesR0000 or the plain hipGetDeviceProperties of
// ROCm 5, into an oversized buffer, and reads the fields detcoll needs at
// the offsets of that layout (symbols.go: propLayouts). It checks the
// result: the name must equal hipDeviceGetName's, the warp size
// hipDeviceAttributeWarpSize's, and gcnArchName must start with "gfx";
// otherwise it returns an error instead of a wrong architecture.
// Integer properties come from hipDeviceGetAttribute, whose enum values are
// the same in ROCm 5 and 6.
//
// # Memory and cgo pointer rules
//
// DevicePtr is a device address (an integer, never dereferenced by Go).
// The memory, copy, launch and IPC calls are internal/binding/gpurt's,
// shared with CUDA and instantiated with this binding's Runtime
// (gpurt.MemAlloc[hip.Runtime](n)): synchronous copies take Go slices;
// asynchronous copies take gpurt.HostMem, pinned C memory from
// gpurt.MemAllocHost (hipHostMalloc). Kernel parameters are laid out by
// Args and copied into C memory before hipModuleLaunchKernel sees them.
//
// # Errors
//
// Every failing call returns a *Error carrying the hipError_t code, its name
// (hipGetErrorName when it knows the code, else the built-in table), the
// library's description (hipGetErrorString) and the exact symbol called.
// errors.Is matches *Error values by code. Errors from loading wrap
// ErrUnavailable.
//
// Handles (Stream, Event, Module, Function, GraphExec) are plain
// values; the zero Stream is the null stream. Whoever creates a handle
// destroys it, once.
package hip

//go:generate go run ../bindgen
