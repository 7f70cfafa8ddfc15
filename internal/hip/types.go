package hip

import (
	"errors"
	"fmt"

	"github.com/detcoll/detcoll/internal/binding"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
	"github.com/detcoll/detcoll/internal/kparams"
)

// Result is a hipError_t: gpurt's (HIP mirrors the CUDA driver's codes;
// the shared ones are its Result* constants).
type Result = gpurt.Result

// ResultInvalidImage is a hipError_t detcoll names that the driver API
// names otherwise.
const ResultInvalidImage Result = 200

// resultNames is hipError_t of ROCm 6 (a superset of ROCm 5's: the codes
// kept their values). Aliases (hipErrorMemoryAllocation = 2, …) are
// omitted: the first name of each code is the one HIP reports.

// ResultName is the hipError* name of a code from the built-in table (used
// when hipGetErrorName is unavailable or does not know the code), or
// "hipError(<n>)".
func ResultName(r Result) string {
	return binding.Name(resultNames, resultFallback, r)
}

// Error is a failed runtime call: Code, Name (the library's name of the code),
// Message (its description, when known) and Call (the exported symbol
// called). Its message starts "hip: "; errors.Is matches it by code, and a
// load failure (gpurt.ResultUnavailable) wraps ErrUnavailable. It is
// internal/binding's error type, instantiated for this binding.
type Error = binding.Error[Result, vendor]

// ErrUnavailable is wrapped by every error that means "no usable HIP
// runtime here": library missing, built without cgo, hipInit failed (no
// AMD GPU).
var ErrUnavailable = errors.New("hip: runtime unavailable")

// Device is a HIP device ordinal.
type Device int32

// DevicePtr is a device address (hipDeviceptr_t; gpurt's, shared with
// internal/cuda and gpu/devrt).
type DevicePtr = gpurt.DevicePtr

// Stream is a hipStream_t; the zero value is the null stream.
type Stream = gpurt.Stream[rt]

// Event is a hipEvent_t.
type Event = gpurt.Event[rt]

// Module is a hipModule_t.
type Module = gpurt.Module[rt]

// Function is a hipFunction_t.
type Function = gpurt.Function[rt]

// GraphExec is a hipGraphExec_t.
type GraphExec = gpurt.GraphExec[rt]

// IpcEventHandle is a hipIpcEventHandle_t (64 bytes).
type IpcEventHandle [64]byte

// Dim3 is a grid or block shape.
type Dim3 = gpurt.Dim3

// DeviceAttribute is a hipDeviceAttribute_t (values of ROCm 5.x and 6.x,
// which agree).
type DeviceAttribute int32

// The device attributes detcoll reads.
const (
	AttrClockRate              DeviceAttribute = 5 // kHz
	AttrIntegrated             DeviceAttribute = 16
	AttrL2CacheSize            DeviceAttribute = 19
	AttrComputeCapabilityMajor DeviceAttribute = 23
	AttrMaxThreadsPerBlock     DeviceAttribute = 56
	AttrMemoryBusWidth         DeviceAttribute = 59 // bits
	AttrMemoryClockRate        DeviceAttribute = 60 // kHz
	AttrComputeCapabilityMinor DeviceAttribute = 61
	AttrMultiprocessorCount    DeviceAttribute = 63 // compute units
	AttrPCIBusID               DeviceAttribute = 67
	AttrPCIDeviceID            DeviceAttribute = 68
	AttrPCIDomainID            DeviceAttribute = 69
	AttrUnifiedAddressing      DeviceAttribute = 85
	AttrWarpSize               DeviceAttribute = 87 // the wavefront: 64 on CDNA (gfx9), 32 or 64 on RDNA
)

// FunctionAttribute is a hipFunction_attribute; CaptureMode and
// CaptureStatus are hipStreamCaptureMode and hipStreamCaptureStatus. Their
// values, and the stream and event flags, are gpurt's constants: HIP mirrors
// the CUDA driver's.
type (
	FunctionAttribute = gpurt.FunctionAttribute
	CaptureMode       = gpurt.CaptureMode
	CaptureStatus     = gpurt.CaptureStatus
)

// Args lays out kernel parameters, one call per parameter of the kernel, in
// order, each at its natural alignment: internal/kparams' packer, shared
// with internal/cuda (the kernels are the same source), with errors that
// start "hip: ". The zero value is ready to use; Reset reuses it. An Args is
// about 4.4 KB: keep one per launcher rather than one per launch.
// LaunchKernel copies the bytes into C memory, so the Args may be reused as
// soon as it returns.
type Args = kparams.Args[vendor, DevicePtr]

// vendor names this binding in Args' errors.
type vendor struct{}

func (vendor) Name() string { return "hip" }

// Unavailable is the error load failures wrap.
func (vendor) Unavailable() error { return ErrUnavailable }

// DeviceProps are the hipDeviceProp_t fields detcoll uses.
type DeviceProps struct {
	Name        string // marketing name, e.g. "AMD Instinct MI300X"
	GCNArchName string // target ID, e.g. "gfx942:sramecc+:xnack-"
	WarpSize    int    // wavefront size: 64 on CDNA
	Layout      string // the symbol that filled the struct, e.g. hipGetDevicePropertiesR0600
}

// parseProps reads DeviceProps from a hipDeviceProp_t filled by symbol
// (see propLayouts) and checks them against what the runtime reports
// through other calls (name from hipDeviceGetName, warp size from
// hipDeviceAttributeWarpSize; a negative warp size skips that check).
func parseProps(buf []byte, symbol, wantName string, wantWarp int) (DeviceProps, error) {
	lay, ok := propLayouts[symbol]
	if !ok {
		return DeviceProps{}, fmt.Errorf("hip: unknown hipDeviceProp_t layout for %s", symbol)
	}
	if len(buf) < lay.size {
		return DeviceProps{}, fmt.Errorf("hip: %s: buffer of %d bytes for a %d-byte struct", symbol, len(buf), lay.size)
	}
	p := DeviceProps{
		Name:        cString(buf[:nameLen]),
		GCNArchName: cString(buf[lay.gcnArchName : lay.gcnArchName+nameLen]),
		WarpSize:    int(int32(uint32(buf[lay.warpSize]) | uint32(buf[lay.warpSize+1])<<8 | uint32(buf[lay.warpSize+2])<<16 | uint32(buf[lay.warpSize+3])<<24)),
		Layout:      symbol,
	}
	switch {
	case wantName != "" && p.Name != wantName:
		return p, fmt.Errorf("hip: %s: the name field reads %q, hipDeviceGetName says %q: not the struct layout detcoll knows", symbol, p.Name, wantName)
	case wantWarp >= 0 && p.WarpSize != wantWarp:
		return p, fmt.Errorf("hip: %s: warpSize reads %d, hipDeviceAttributeWarpSize says %d: not the struct layout detcoll knows", symbol, p.WarpSize, wantWarp)
	case len(p.GCNArchName) < 4 || p.GCNArchName[:3] != "gfx":
		return p, fmt.Errorf("hip: %s: gcnArchName reads %q, not a gfx target: not the struct layout detcoll knows", symbol, p.GCNArchName)
	}
	return p, nil
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
