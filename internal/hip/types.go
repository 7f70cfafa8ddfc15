package hip

import (
	"errors"
	"fmt"

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

// ErrUnavailable is wrapped by every error that means "no usable HIP
// runtime here": library missing, built without cgo, hipInit failed (no
// AMD GPU).
var ErrUnavailable = errors.New("hip: runtime unavailable")

// Device is a HIP device ordinal.
type Device int32

// The handles are gpurt's, instantiated for HIP, so that code written once
// for both vendors (internal/binding/gpurt, gpu/devrt) takes them:
// DevicePtr is a hipDeviceptr_t (shared with internal/cuda), Stream a
// hipStream_t (the zero value is the null stream), Event a hipEvent_t,
// Module a hipModule_t, Function a hipFunction_t, GraphExec a
// hipGraphExec_t; Dim3 is a grid or block shape. IpcEventHandle is a
// hipIpcEventHandle_t (64 bytes).
type (
	DevicePtr      = gpurt.DevicePtr
	Stream         = gpurt.Stream[rt]
	Event          = gpurt.Event[rt]
	Module         = gpurt.Module[rt]
	Function       = gpurt.Function[rt]
	GraphExec      = gpurt.GraphExec[rt]
	Dim3           = gpurt.Dim3
	IpcEventHandle [64]byte
)

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

// Args is internal/kparams' kernel-parameter packer, as internal/cuda's
// Args (the kernels are the same source) but with errors that start "hip: ".
// FunctionAttribute is a hipFunction_attribute; CaptureMode and
// CaptureStatus are hipStreamCaptureMode and hipStreamCaptureStatus, whose
// values, like the stream and event flags, are gpurt's: HIP mirrors the
// CUDA driver's.
type (
	Args              = kparams.Args[vendor, DevicePtr]
	FunctionAttribute = gpurt.FunctionAttribute
	CaptureMode       = gpurt.CaptureMode
	CaptureStatus     = gpurt.CaptureStatus
)

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
