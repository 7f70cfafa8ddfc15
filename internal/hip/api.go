package hip

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/detcoll/detcoll/internal/binding"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
)

var (
	initOnce sync.Once
	initErr  error
)

// Load opens the runtime library and resolves its symbols, once per
// process; it needs no GPU. Later calls return the first outcome.
func Load() error { return syms.Load(load) }

// Init loads the runtime and calls hipInit(0), once per process; later
// calls return the first outcome. Every wrapper that needs a device calls
// it. Without an AMD GPU it fails with an *Error wrapping ErrUnavailable.
func Init() error {
	initOnce.Do(func() {
		if initErr = Load(); initErr != nil {
			return
		}
		if r := rInit(); r != gpurt.ResultSuccess {
			initErr = fmt.Errorf("%w: %w", ErrUnavailable, errorOf(hipInit, r))
		}
	})
	return initErr
}

// Available reports why HIP cannot be used here, or nil. The error wraps
// ErrUnavailable.
func Available() error { return Init() }

// LibraryPath is the runtime library that was loaded ("" when Load failed).
func LibraryPath() string { return syms.LoadedPath(Load) }

// SymbolName is the exported symbol bound for a documented API name (e.g.
// "hipGetDeviceProperties" → "hipGetDevicePropertiesR0600" on ROCm 6): the
// one loaded when the library is loaded and exports one, else the preferred
// candidate; "" for an unknown name.
func SymbolName(api string) string {
	return syms.SymbolName(api)
}

// errorOf turns a hipError_t from symbol s into an *Error (nil on success).
func errorOf(s sym, r Result) error {
	return binding.ErrorOf[sym, Result, vendor](syms, s, r, gpurt.ResultSymbolNotFound, "HIP runtime", ResultName, describe)
}

// describe is the runtime's own name and description of r where they say
// more than the table: hipGetErrorName answers hipErrorUnknown for codes it
// does not know (the table keeps the code then), and its strings may only
// repeat the name.
func describe(r Result) (name, message string) {
	if r < 0 {
		return "", ""
	}
	name = ResultName(r)
	if n, ok := rErrorName(r); ok && n != "" && (n != "hipErrorUnknown" || r == gpurt.ResultUnknown) {
		name = n
	}
	if m, ok := rErrorString(r); ok && m != name && m != "hipErrorUnknown" {
		message = m
	}
	return name, message
}

// call is the common prologue of device calls: init, check an optional
// symbol, map the result.
func call(s sym, f func() Result) error {
	return binding.Call(syms, Init, errorOf, gpurt.ResultSymbolNotFound, s, f)
}

// callLoaded is call for entry points that work without a device (it loads
// the runtime, no hipInit).
func callLoaded(s sym, f func() Result) error {
	return binding.Call(syms, Load, errorOf, gpurt.ResultSymbolNotFound, s, f)
}

// rt is this binding's runtime type for internal/binding/gpurt's shared
// calls (the handle types, memory, copies, launches, IPC): its Binding plays
// each role by the symbol that symbols.txt gives it, through call.
type rt struct{}

// Runtime is the type argument of this binding's handle types (Stream is
// gpurt.Stream[Runtime]) and of gpurt's memory calls
// (gpurt.MemAlloc[Runtime]); gpu/devrt/rtshared is instantiated with it.
type Runtime = rt

func (rt) Binding() *gpurt.Binding { return shared }

var shared = gpurt.NewBinding[sym, Result, vendor](syms, call, ResultName, gpurt.ResultInvalidValue, abi)

// RuntimeVersion is hipRuntimeGetVersion (HIP_VERSION: major*10000000 +
// minor*100000 + patch, e.g. 50221153 for 5.2.21153). It needs no GPU.
func RuntimeVersion() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var v int32
	err := callLoaded(hipRuntimeGetVersion, func() Result { return rPint(hipRuntimeGetVersion, &v) })
	return int(v), err
}

// DriverVersion is hipDriverGetVersion, encoded like RuntimeVersion.
func DriverVersion() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var v int32
	err := callLoaded(hipDriverGetVersion, func() Result { return rPint(hipDriverGetVersion, &v) })
	return int(v), err
}

// VersionString formats a HIP_VERSION number (50221153 → "5.2.21153").
func VersionString(v int) string {
	return fmt.Sprintf("%d.%d.%d", v/10000000, v/100000%100, v%100000)
}

// VersionMajor is the ROCm major version of a HIP_VERSION number.
func VersionMajor(v int) int { return v / 10000000 }

// DeviceCount is the number of visible devices (HIP_VISIBLE_DEVICES and
// ROCR_VISIBLE_DEVICES apply).
func DeviceCount() (int, error) {
	var n int32
	err := call(hipGetDeviceCount, func() Result { return rPint(hipGetDeviceCount, &n) })
	return int(n), err
}

// CurrentDevice is the device current on the calling OS thread.
func CurrentDevice() (Device, error) {
	var n int32
	err := call(hipGetDevice, func() Result { return rPint(hipGetDevice, &n) })
	return Device(n), err
}

// SetCurrent makes d current on the calling OS thread (hipSetDevice). Only
// meaningful while the goroutine is locked to its thread (see Bind and Do).
func (d Device) SetCurrent() error {
	return call(hipSetDevice, func() Result { return rInt(hipSetDevice, int32(d)) })
}

// Bind locks the calling goroutine to its OS thread and makes d current
// there. The returned release unlocks the goroutine. Always call release,
// once.
func (d Device) Bind() (release func(), err error) {
	runtime.LockOSThread()
	if err := d.SetCurrent(); err != nil {
		runtime.UnlockOSThread()
		return func() {}, err
	}
	return runtime.UnlockOSThread, nil
}

// Do runs fn with the goroutine locked to its OS thread and d current
// there: the safe way to issue a sequence of runtime calls from Go.
func (d Device) Do(fn func() error) error {
	release, err := d.Bind()
	defer release()
	if err != nil {
		return err
	}
	return fn()
}

// Name is the marketing name, e.g. "AMD Instinct MI300X".
func (d Device) Name() (string, error) {
	buf := make([]byte, nameLen)
	if err := call(hipDeviceGetName, func() Result { return rDeviceGetString(hipDeviceGetName, buf, d) }); err != nil {
		return "", err
	}
	return cString(buf), nil
}

// Attribute reads one device attribute.
func (d Device) Attribute(a DeviceAttribute) (int, error) {
	var v int32
	err := call(hipDeviceGetAttribute, func() Result { return rDeviceGetAttribute(&v, a, d) })
	return int(v), err
}

// WarpSize is the wavefront size (64 on CDNA GPUs such as the MI300X).
func (d Device) WarpSize() (int, error) { return d.Attribute(AttrWarpSize) }

// TotalMem is the device memory in bytes.
func (d Device) TotalMem() (uint64, error) {
	var b uint64
	err := call(hipDeviceTotalMem, func() Result { return rDeviceTotalMem(&b, d) })
	return b, err
}

// PCIBusID is the PCI address, e.g. "0000:0c:00.0".
func (d Device) PCIBusID() (string, error) {
	buf := make([]byte, 64)
	if err := call(hipDeviceGetPCIBusId, func() Result { return rDeviceGetString(hipDeviceGetPCIBusId, buf, d) }); err != nil {
		return "", err
	}
	return cString(buf), nil
}

// CanAccessPeer reports whether d can map peer's memory.
func (d Device) CanAccessPeer(peer Device) (bool, error) {
	var c int32
	err := call(hipDeviceCanAccessPeer, func() Result { return rDeviceCanAccessPeer(&c, d, peer) })
	return c != 0, err
}

// EnablePeerAccess lets the current device access peer's memory. An
// already-enabled peer is not an error.
func EnablePeerAccess(peer Device) error {
	err := call(hipDeviceEnablePeerAccess, func() Result { return rDeviceEnablePeerAccess(peer) })
	if e, ok := err.(*Error); ok && e.Code == gpurt.ResultPeerAlreadyEnabled {
		return nil
	}
	return err
}

// Properties reads hipDeviceProp_t (see the package doc for the layouts)
// and returns the fields detcoll uses, cross-checked.
func (d Device) Properties() (DeviceProps, error) {
	name, err := d.Name()
	if err != nil {
		return DeviceProps{}, err
	}
	warp, err := d.WarpSize()
	if err != nil {
		warp = -1
	}
	buf := make([]byte, propBufferSize)
	if err := call(hipGetDeviceProperties, func() Result { return rGetDeviceProperties(buf, d) }); err != nil {
		return DeviceProps{}, err
	}
	return parseProps(buf, syms.Resolved(hipGetDeviceProperties), name, warp)
}

// DeviceSynchronize waits for all work of the current device.
func DeviceSynchronize() error {
	return call(hipDeviceSynchronize, func() Result { return rVoid(hipDeviceSynchronize) })
}

// ModuleLoadData loads a code object (from hiprtc) on the current device
// (an empty image is an invalid-value error).
func ModuleLoadData(image []byte) (Module, error) { return gpurt.LoadModule[rt](image) }

// IpcGetEventHandle exports an event created with EventInterprocess (and
// EventDisableTiming).
func IpcGetEventHandle(e Event) (IpcEventHandle, error) {
	var h IpcEventHandle
	err := call(hipIpcGetEventHandle, func() Result { return rIpcGetEventHandle(&h, e) })
	return h, err
}

// IpcOpenEventHandle opens a peer's exported event; destroy it with
// Event.Destroy.
func IpcOpenEventHandle(h IpcEventHandle) (Event, error) {
	var e uintptr
	err := call(hipIpcOpenEventHandle, func() Result { return rIpcOpenEventHandle(&e, &h) })
	return Event(e), err
}

// IPCAvailable reports whether the loaded runtime exports the IPC calls
// that detcoll's one-shot and two-shot paths need (memory and events).
func IPCAvailable() error {
	if err := Load(); err != nil {
		return err
	}
	for _, s := range []sym{hipIpcGetMemHandle, hipIpcOpenMemHandle, hipIpcCloseMemHandle, hipIpcGetEventHandle, hipIpcOpenEventHandle} {
		if !syms.Have(s) {
			return errorOf(s, gpurt.ResultSymbolNotFound)
		}
	}
	return nil
}

// StreamCreate creates a stream (flags: StreamDefault or StreamNonBlocking).
func StreamCreate(flags uint32) (Stream, error) { return gpurt.StreamCreate[rt](flags) }

// EventCreate creates an event (EventDefault records timing).
func EventCreate(flags uint32) (Event, error) { return gpurt.EventCreate[rt](flags) }

// ElapsedTime is the time in milliseconds between two recorded events.
func ElapsedTime(start, end Event) (float32, error) { return gpurt.ElapsedTime(start, end) }

// Capture records what fn enqueues on s into an executable graph. It runs on
// one locked OS thread with d current; the graph itself is destroyed after
// instantiation. The caller destroys the returned GraphExec.
func Capture(d Device, s Stream, mode CaptureMode, fn func() error) (GraphExec, error) {
	return gpurt.Capture(d.Do, s, mode, fn)
}
