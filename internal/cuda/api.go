package cuda

import (
	"bytes"
	"fmt"
	"runtime"

	"github.com/detcoll/detcoll/internal/binding"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
)

// Init loads the driver library and calls cuInit(0), once per process; later
// calls return the first outcome. Every wrapper calls it.
func Init() error { return syms.Load(load) }

// Available reports why CUDA cannot be used here, or nil. The error wraps
// ErrUnavailable.
func Available() error { return Init() }

// LibraryPath is the driver library that was loaded ("" before a successful
// Init).
func LibraryPath() string { return syms.LoadedPath(Init) }

// SymbolName is the exported symbol bound for a documented API name (e.g.
// "cuMemAlloc" → "cuMemAlloc_v2"): the one loaded when the driver is loaded,
// else the preferred candidate; "" for an unknown name.
func SymbolName(api string) string {
	return syms.SymbolName(api)
}

// errorOf turns a CUresult from symbol s into an *Error (nil on success).
func errorOf(s sym, r Result) error {
	return binding.ErrorOf[sym, Result, vendor](syms, s, r, gpurt.ResultSymbolNotFound, "driver", ResultName, describe)
}

// describe is the driver's own name and description of r, when it has them
// (detcoll's negative codes it has not).
func describe(r Result) (name, message string) {
	if r < 0 {
		return "", ""
	}
	name, _ = rErrorName(r)
	message, _ = rErrorString(r)
	return name, message
}

// call is the common prologue: load, check an optional symbol, map the result.
func call(s sym, f func() Result) error {
	return binding.Call(syms, Init, errorOf, gpurt.ResultSymbolNotFound, s, f)
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

// DriverVersion is cuDriverGetVersion: the CUDA version the driver supports,
// 1000*major + 10*minor (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	var v int32
	err := call(cuDriverGetVersion, func() Result { return rDriverGetVersion(&v) })
	return int(v), err
}

// VersionString formats a CUDA version number (13000 → "13.0").
func VersionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// DeviceCount is the number of visible devices.
func DeviceCount() (int, error) {
	var n int32
	err := call(cuDeviceGetCount, func() Result { return rDeviceGetCount(&n) })
	return int(n), err
}

// DeviceGet returns the device with the given ordinal.
func DeviceGet(ordinal int) (Device, error) {
	var d Device
	err := call(cuDeviceGet, func() Result { return rDeviceGet(&d, ordinal) })
	return d, err
}

// Name is the marketing name, e.g. "NVIDIA H200".
func (d Device) Name() (string, error) {
	buf := make([]byte, 256)
	if err := call(cuDeviceGetName, func() Result { return rDeviceGetName(buf, d) }); err != nil {
		return "", err
	}
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf), nil
}

// Attribute reads one device attribute.
func (d Device) Attribute(a DeviceAttribute) (int, error) {
	var v int32
	err := call(cuDeviceGetAttribute, func() Result { return rDeviceGetAttribute(&v, a, d) })
	return int(v), err
}

// ComputeCapability returns (major, minor), e.g. (9, 0) for Hopper.
func (d Device) ComputeCapability() (major, minor int, err error) {
	if major, err = d.Attribute(AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	minor, err = d.Attribute(AttrComputeCapabilityMinor)
	return major, minor, err
}

// TotalMem is the device memory in bytes.
func (d Device) TotalMem() (uint64, error) {
	var b uint64
	err := call(cuDeviceTotalMem, func() Result { return rDeviceTotalMem(&b, d) })
	return b, err
}

// UUID is the device UUID (16 bytes).
func (d Device) UUID() ([16]byte, error) {
	var u [16]byte
	err := call(cuDeviceGetUuid, func() Result { return rDeviceGetUUID(&u, d) })
	return u, err
}

// PCIBusID is the PCI address, e.g. "0000:19:00.0".
func (d Device) PCIBusID() (string, error) {
	buf := make([]byte, 64)
	if err := call(cuDeviceGetPCIBusId, func() Result { return rDeviceGetPCIBusID(buf, d) }); err != nil {
		return "", err
	}
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf), nil
}

// CanAccessPeer reports whether d can map peer's memory.
func (d Device) CanAccessPeer(peer Device) (bool, error) {
	var c int32
	err := call(cuDeviceCanAccessPeer, func() Result { return rDeviceCanAccessPeer(&c, d, peer) })
	return c != 0, err
}

// PrimaryCtxRetain retains the device's primary context (the one the CUDA
// runtime and NCCL use). Balance with PrimaryCtxRelease.
func (d Device) PrimaryCtxRetain() (Context, error) {
	var c Context
	err := call(cuDevicePrimaryCtxRetain, func() Result { return rPrimaryCtxRetain(&c, d) })
	return c, err
}

// PrimaryCtxRelease releases one retain of the primary context.
func (d Device) PrimaryCtxRelease() error {
	return call(cuDevicePrimaryCtxRelease, func() Result { return rPrimaryCtxRelease(d) })
}

// SetCurrent makes c current on the calling OS thread. Only meaningful while
// the goroutine is locked to its thread (see Bind and Do).
func (c Context) SetCurrent() error {
	return call(cuCtxSetCurrent, func() Result { return rCtxSetCurrent(c) })
}

// CurrentContext is the context current on the calling OS thread (0 if none).
func CurrentContext() (Context, error) {
	var c Context
	err := call(cuCtxGetCurrent, func() Result { return rCtxGetCurrent(&c) })
	return c, err
}

// Bind locks the calling goroutine to its OS thread and makes c current
// there. The returned release unlocks the goroutine (the context stays
// current on that thread, which is harmless). Always call release, once.
func (c Context) Bind() (release func(), err error) {
	runtime.LockOSThread()
	if err := c.SetCurrent(); err != nil {
		runtime.UnlockOSThread()
		return func() {}, err
	}
	return runtime.UnlockOSThread, nil
}

// Do runs fn with the goroutine locked to its OS thread and c current there:
// the safe way to issue a sequence of driver calls from Go.
func (c Context) Do(fn func() error) error {
	release, err := c.Bind()
	defer release()
	if err != nil {
		return err
	}
	return fn()
}

// CtxSynchronize waits for all work of the current context.
func CtxSynchronize() error {
	return call(cuCtxSynchronize, rCtxSynchronize)
}

// EnablePeerAccess lets the current context access peer's memory. An
// already-enabled peer is not an error.
func EnablePeerAccess(peer Context) error {
	err := call(cuCtxEnablePeerAccess, func() Result { return rCtxEnablePeerAccess(peer) })
	if e, ok := err.(*Error); ok && e.Code == gpurt.ResultPeerAlreadyEnabled {
		return nil
	}
	return err
}

// ModuleLoadData loads a CUBIN or a NUL-terminated PTX image into the
// current context (an empty image is an invalid-value error).
func ModuleLoadData(image []byte) (Module, error) { return gpurt.LoadModule[rt](image) }

// StreamCreate creates a stream (flags: StreamDefault or StreamNonBlocking).
func StreamCreate(flags uint32) (Stream, error) { return gpurt.StreamCreate[rt](flags) }

// EventCreate creates an event (EventDefault records timing).
func EventCreate(flags uint32) (Event, error) { return gpurt.EventCreate[rt](flags) }

// ElapsedTime is the time in milliseconds between two recorded events.
func ElapsedTime(start, end Event) (float32, error) { return gpurt.ElapsedTime(start, end) }

// Capture records what fn enqueues on s into an executable graph. It runs on
// one locked OS thread with c current; the graph itself is destroyed after
// instantiation. The caller destroys the returned GraphExec.
func Capture(c Context, s Stream, mode CaptureMode, fn func() error) (GraphExec, error) {
	return gpurt.Capture(c.Do, s, mode, fn)
}
