package cuda

import (
	"errors"

	"github.com/detcoll/detcoll/internal/binding/gpurt"
	"github.com/detcoll/detcoll/internal/kparams"
)

// Result is a CUresult: gpurt's (the codes CUDA and HIP share are its
// Result* constants).
type Result = gpurt.Result

// The CUresult codes detcoll names that HIP does not have.
const (
	ResultStubLibrary    Result = 34
	ResultInvalidContext Result = 201
)

// ErrUnavailable is wrapped by every error that means "no usable CUDA
// driver here": library missing, built without cgo, cuInit failed.
var ErrUnavailable = errors.New("cuda: driver unavailable")

// Device is a CUdevice ordinal handle.
type Device int32

// Context is a CUcontext.
type Context uintptr

// DevicePtr is a CUdeviceptr: a device address (gpurt's, shared with
// internal/hip and gpu/devrt).
type DevicePtr = gpurt.DevicePtr

// Stream is a CUstream; the zero value is the legacy default stream.
type Stream = gpurt.Stream[rt]

// Event is a CUevent.
type Event = gpurt.Event[rt]

// Module is a CUmodule.
type Module = gpurt.Module[rt]

// Function is a CUfunction.
type Function = gpurt.Function[rt]

// GraphExec is a CUgraphExec.
type GraphExec = gpurt.GraphExec[rt]

// Dim3 is a grid or block shape.
type Dim3 = gpurt.Dim3

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

// FunctionAttribute is a CUfunction_attribute (the values CUDA shares with
// HIP are gpurt's Func* constants).
type FunctionAttribute = gpurt.FunctionAttribute

// The function attributes HIP does not name.
const (
	FuncPTXVersion    FunctionAttribute = 5
	FuncBinaryVersion FunctionAttribute = 6
)

// CaptureMode is a CUstreamCaptureMode, CaptureStatus a
// CUstreamCaptureStatus (their values, and the stream and event flags, are
// gpurt's constants: the same on both vendors).
type (
	CaptureMode   = gpurt.CaptureMode
	CaptureStatus = gpurt.CaptureStatus
)

// Args lays out kernel parameters, one call per parameter of the kernel, in
// order, each at its natural alignment: internal/kparams' packer, shared
// with internal/hip (the kernels are the same source), with errors that
// start "cuda: ". The zero value is ready to use; Reset reuses it. An Args is
// about 4.4 KB: keep one per launcher rather than one per launch.
// LaunchKernel copies the bytes into C memory, so the Args may be reused as
// soon as it returns.
type Args = kparams.Args[vendor, DevicePtr]
