package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/internal/kparams"
)

// Result is a CUresult.
type Result int32

// The CUresult codes detcoll tests for. ResultSymbolNotFound and
// ResultUnavailable are detcoll's own (negative, never returned by CUDA).
const (
	ResultSuccess            Result = 0
	ResultInvalidValue       Result = 1
	ResultOutOfMemory        Result = 2
	ResultNotInitialized     Result = 3
	ResultStubLibrary        Result = 34
	ResultNoDevice           Result = 100
	ResultInvalidDevice      Result = 101
	ResultInvalidContext     Result = 201
	ResultNoBinaryForGPU     Result = 209
	ResultPeerAccessUnsupp   Result = 217
	ResultInvalidHandle      Result = 400
	ResultNotFound           Result = 500
	ResultNotReady           Result = 600
	ResultIllegalAddress     Result = 700
	ResultPeerAlreadyEnabled Result = 704
	ResultLaunchFailed       Result = 719
	ResultNotSupported       Result = 801
	ResultCaptureInvalidated Result = 901
	ResultUnknown            Result = 999

	ResultSymbolNotFound Result = -1
	ResultUnavailable    Result = -2
)

var resultNames = map[Result]string{
	0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
	3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED", 5: "CUDA_ERROR_PROFILER_DISABLED",
	34: "CUDA_ERROR_STUB_LIBRARY", 46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE", 102: "CUDA_ERROR_DEVICE_NOT_LICENSED",
	200: "CUDA_ERROR_INVALID_IMAGE", 201: "CUDA_ERROR_INVALID_CONTEXT", 202: "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
	205: "CUDA_ERROR_MAP_FAILED", 206: "CUDA_ERROR_UNMAP_FAILED", 207: "CUDA_ERROR_ARRAY_IS_MAPPED",
	208: "CUDA_ERROR_ALREADY_MAPPED", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU", 210: "CUDA_ERROR_ALREADY_ACQUIRED",
	211: "CUDA_ERROR_NOT_MAPPED", 212: "CUDA_ERROR_NOT_MAPPED_AS_ARRAY", 213: "CUDA_ERROR_NOT_MAPPED_AS_POINTER",
	214: "CUDA_ERROR_ECC_UNCORRECTABLE", 215: "CUDA_ERROR_UNSUPPORTED_LIMIT", 216: "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
	217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", 218: "CUDA_ERROR_INVALID_PTX", 219: "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT",
	220: "CUDA_ERROR_NVLINK_UNCORRECTABLE", 221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", 222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	223: "CUDA_ERROR_JIT_COMPILATION_DISABLED", 224: "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
	300: "CUDA_ERROR_INVALID_SOURCE", 301: "CUDA_ERROR_FILE_NOT_FOUND", 302: "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
	303: "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", 304: "CUDA_ERROR_OPERATING_SYSTEM",
	400: "CUDA_ERROR_INVALID_HANDLE", 401: "CUDA_ERROR_ILLEGAL_STATE", 402: "CUDA_ERROR_LOSSY_QUERY",
	500: "CUDA_ERROR_NOT_FOUND", 600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", 702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	703: "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", 704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
	705: "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", 708: "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", 709: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
	710: "CUDA_ERROR_ASSERT", 711: "CUDA_ERROR_TOO_MANY_PEERS", 712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", 714: "CUDA_ERROR_HARDWARE_STACK_ERROR", 715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
	716: "CUDA_ERROR_MISALIGNED_ADDRESS", 717: "CUDA_ERROR_INVALID_ADDRESS_SPACE", 718: "CUDA_ERROR_INVALID_PC",
	719: "CUDA_ERROR_LAUNCH_FAILED", 720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
	800: "CUDA_ERROR_NOT_PERMITTED", 801: "CUDA_ERROR_NOT_SUPPORTED", 802: "CUDA_ERROR_SYSTEM_NOT_READY",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", 901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	902: "CUDA_ERROR_STREAM_CAPTURE_MERGE", 903: "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
	904: "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", 905: "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
	906: "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", 907: "CUDA_ERROR_CAPTURED_EVENT",
	908: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", 909: "CUDA_ERROR_TIMEOUT", 910: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
	999: "CUDA_ERROR_UNKNOWN",
	-1:  "DETCOLL_SYMBOL_NOT_FOUND", -2: "DETCOLL_CUDA_UNAVAILABLE",
}

// ResultName is the CUDA_ERROR_* name of a code from the built-in table
// (used when cuGetErrorName is unavailable), or "CUDA_ERROR_<n>".
func ResultName(r Result) string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return fmt.Sprintf("CUDA_ERROR_%d", int32(r))
}

// Error is a failed driver call.
type Error struct {
	Code    Result
	Name    string // e.g. CUDA_ERROR_OUT_OF_MEMORY
	Message string // the driver's description, when known
	Call    string // the symbol called, e.g. cuMemAlloc_v2
}

func (e *Error) Error() string {
	s := "cuda: " + e.Call + ": " + e.Name
	if e.Message != "" {
		s += " (" + e.Message + ")"
	}
	return s
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code
	}
	return false
}

// Unwrap makes load failures match ErrUnavailable.
func (e *Error) Unwrap() error {
	if e.Code == ResultUnavailable {
		return ErrUnavailable
	}
	return nil
}

// ErrUnavailable is wrapped by every error that means "no usable CUDA
// driver here": library missing, built without cgo, cuInit failed.
var ErrUnavailable = errors.New("cuda: driver unavailable")

// Device is a CUdevice ordinal handle.
type Device int32

// Context is a CUcontext.
type Context uintptr

// DevicePtr is a CUdeviceptr: a device address.
type DevicePtr = devrt.Ptr // shared with internal/hip through gpu/devrt

// Stream is a CUstream; the zero value is the legacy default stream.
type Stream uintptr

// Event is a CUevent.
type Event uintptr

// Module is a CUmodule.
type Module uintptr

// Function is a CUfunction.
type Function uintptr

// Graph is a CUgraph.
type Graph uintptr

// GraphExec is a CUgraphExec.
type GraphExec uintptr

// IpcMemHandle is a CUipcMemHandle (CU_IPC_HANDLE_SIZE = 64 bytes).
type IpcMemHandle [64]byte

// HostMem is page-locked host memory from MemAllocHost. It is C memory: Go
// may read and write it through Bytes, and the driver may use it
// asynchronously. Free it with MemFreeHost.
type HostMem struct {
	p unsafe.Pointer
	n int
}

// Len is the size in bytes.
func (h HostMem) Len() int { return h.n }

// Bytes is a Go view of the memory (valid until MemFreeHost).
func (h HostMem) Bytes() []byte {
	if h.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.p), h.n)
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int32

// The device attributes detcoll reads.
const (
	AttrMaxThreadsPerBlock     DeviceAttribute = 1
	AttrClockRate              DeviceAttribute = 13 // kHz
	AttrMultiprocessorCount    DeviceAttribute = 16
	AttrPCIBusID               DeviceAttribute = 33
	AttrPCIDeviceID            DeviceAttribute = 34
	AttrMemoryClockRate        DeviceAttribute = 36 // kHz
	AttrGlobalMemoryBusWidth   DeviceAttribute = 37 // bits
	AttrL2CacheSize            DeviceAttribute = 38
	AttrUnifiedAddressing      DeviceAttribute = 41
	AttrPCIDomainID            DeviceAttribute = 50
	AttrComputeCapabilityMajor DeviceAttribute = 75
	AttrComputeCapabilityMinor DeviceAttribute = 76
)

// FunctionAttribute is a CUfunction_attribute.
type FunctionAttribute int32

// Function attributes (for reports: registers, spills).
const (
	FuncMaxThreadsPerBlock FunctionAttribute = 0
	FuncSharedSizeBytes    FunctionAttribute = 1
	FuncConstSizeBytes     FunctionAttribute = 2
	FuncLocalSizeBytes     FunctionAttribute = 3
	FuncNumRegs            FunctionAttribute = 4
	FuncPTXVersion         FunctionAttribute = 5
	FuncBinaryVersion      FunctionAttribute = 6
)

// Stream and event creation flags.
const (
	StreamDefault     uint32 = 0
	StreamNonBlocking uint32 = 1

	EventDefault       uint32 = 0
	EventBlockingSync  uint32 = 1
	EventDisableTiming uint32 = 2
	EventInterprocess  uint32 = 4
)

// CaptureMode is a CUstreamCaptureMode.
type CaptureMode int32

const (
	CaptureGlobal      CaptureMode = 0
	CaptureThreadLocal CaptureMode = 1
	CaptureRelaxed     CaptureMode = 2
)

// CaptureStatus is a CUstreamCaptureStatus.
type CaptureStatus int32

const (
	CaptureNone        CaptureStatus = 0
	CaptureActive      CaptureStatus = 1
	CaptureInvalidated CaptureStatus = 2
)

// Kernel parameter limits of Args.
const (
	MaxArgBytes = kparams.MaxArgBytes
	MaxArgs     = kparams.MaxArgs
)

// Args lays out kernel parameters, one call per parameter of the kernel, in
// order, each at its natural alignment: internal/kparams' packer, shared
// with internal/hip (the kernels are the same source), with errors that
// start "cuda: ". The zero value is ready to use; Reset reuses it. An Args is
// about 4.4 KB: keep one per launcher rather than one per launch.
// LaunchKernel copies the bytes into C memory, so the Args may be reused as
// soon as it returns.
type Args = kparams.Args[vendor, DevicePtr]

// vendor names this binding in Args' errors.
type vendor struct{}

func (vendor) Name() string { return "cuda" }
