package cuda

import (
	"bytes"
	"fmt"
	"runtime"

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
	if r == ResultSuccess {
		return nil
	}
	e := &Error{Code: r, Call: syms.Resolved(s)}
	if r == ResultSymbolNotFound {
		e.Message = "the loaded driver does not export " + syms.API(s)
	}
	if n, ok := rErrorName(r); ok && r >= 0 {
		e.Name = n
	} else {
		e.Name = ResultName(r)
	}
	if e.Message == "" && r >= 0 {
		if m, ok := rErrorString(r); ok {
			e.Message = m
		}
	}
	return e
}

// call is the common prologue: load, check an optional symbol, map the result.
func call(s sym, f func() Result) error {
	if err := Init(); err != nil {
		return err
	}
	if !syms.Have(s) {
		return errorOf(s, ResultSymbolNotFound)
	}
	return errorOf(s, f())
}

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
	if e, ok := err.(*Error); ok && e.Code == ResultPeerAlreadyEnabled {
		return nil
	}
	return err
}

// MemGetInfo returns free and total memory of the current context's device.
func MemGetInfo() (free, total uint64, err error) {
	err = call(cuMemGetInfo, func() Result { return rMemGetInfo(&free, &total) })
	return free, total, err
}

func checkSize(call string, n int) error {
	if n < 0 {
		return &Error{Code: ResultInvalidValue, Name: ResultName(ResultInvalidValue), Message: fmt.Sprintf("negative size %d", n), Call: call}
	}
	return nil
}

// MemAlloc allocates n bytes of device memory in the current context (256-byte
// aligned). n == 0 returns 0 and no error.
func MemAlloc(n int) (DevicePtr, error) {
	if err := checkSize("cuMemAlloc", n); err != nil || n == 0 {
		return 0, err
	}
	var p DevicePtr
	err := call(cuMemAlloc, func() Result { return rMemAlloc(&p, n) })
	return p, err
}

// MemFree frees memory from MemAlloc; 0 is a no-op.
func MemFree(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	return call(cuMemFree, func() Result { return rMemFree(p) })
}

// MemGetAddressRange returns the base and size of the allocation that
// contains p (cuMemGetAddressRange). p must lie inside memory allocated in
// the current context; any other address is an *Error (typically
// CUDA_ERROR_NOT_FOUND or CUDA_ERROR_INVALID_VALUE), never a crash.
func MemGetAddressRange(p DevicePtr) (base DevicePtr, size uint64, err error) {
	err = call(cuMemGetAddressRange, func() Result { return rMemGetAddressRange(&base, &size, p) })
	return base, size, err
}

// MemAllocHost allocates n bytes of page-locked host memory.
func MemAllocHost(n int) (HostMem, error) {
	if err := checkSize("cuMemAllocHost", n); err != nil || n == 0 {
		return HostMem{}, err
	}
	var h HostMem
	err := call(cuMemAllocHost, func() Result { return rMemAllocHost(&h, n) })
	return h, err
}

// MemFreeHost frees memory from MemAllocHost.
func MemFreeHost(h HostMem) error {
	if h.p == nil {
		return nil
	}
	return call(cuMemFreeHost, func() Result { return rMemFreeHost(h) })
}

// MemcpyHtoD copies src to device memory, synchronously.
func MemcpyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return call(cuMemcpyHtoD, func() Result { return rMemcpyHtoD(dst, src) })
}

// MemcpyDtoH copies device memory into dst, synchronously.
func MemcpyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return call(cuMemcpyDtoH, func() Result { return rMemcpyDtoH(dst, src) })
}

// MemcpyDtoD copies n bytes between device buffers.
func MemcpyDtoD(dst, src DevicePtr, n int) error {
	if err := checkSize("cuMemcpyDtoD", n); err != nil || n == 0 {
		return err
	}
	return call(cuMemcpyDtoD, func() Result { return rMemcpyDtoD(dst, src, n) })
}

func checkHost(callName string, h HostMem, off, n int) error {
	if off < 0 || n < 0 || off+n > h.n {
		return &Error{Code: ResultInvalidValue, Name: ResultName(ResultInvalidValue),
			Message: fmt.Sprintf("range [%d, %d) outside host buffer of %d bytes", off, off+n, h.n), Call: callName}
	}
	return nil
}

// MemcpyHtoDAsync enqueues a copy of src[off:off+n] to dst on s.
func MemcpyHtoDAsync(dst DevicePtr, src HostMem, off, n int, s Stream) error {
	if err := checkHost("cuMemcpyHtoDAsync", src, off, n); err != nil || n == 0 {
		return err
	}
	return call(cuMemcpyHtoDAsync, func() Result { return rMemcpyHtoDAsync(dst, src, off, n, s) })
}

// MemcpyDtoHAsync enqueues a copy of n bytes from src into dst[off:] on s.
func MemcpyDtoHAsync(dst HostMem, off int, src DevicePtr, n int, s Stream) error {
	if err := checkHost("cuMemcpyDtoHAsync", dst, off, n); err != nil || n == 0 {
		return err
	}
	return call(cuMemcpyDtoHAsync, func() Result { return rMemcpyDtoHAsync(dst, off, src, n, s) })
}

// MemcpyDtoDAsync enqueues a device-to-device copy on s.
func MemcpyDtoDAsync(dst, src DevicePtr, n int, s Stream) error {
	if err := checkSize("cuMemcpyDtoDAsync", n); err != nil || n == 0 {
		return err
	}
	return call(cuMemcpyDtoDAsync, func() Result { return rMemcpyDtoDAsync(dst, src, n, s) })
}

// MemsetD8 sets n bytes to v, synchronously.
func MemsetD8(dst DevicePtr, v byte, n int) error {
	if err := checkSize("cuMemsetD8", n); err != nil || n == 0 {
		return err
	}
	return call(cuMemsetD8, func() Result { return rMemsetD8(dst, v, n) })
}

// MemsetD8Async enqueues a byte fill on s.
func MemsetD8Async(dst DevicePtr, v byte, n int, s Stream) error {
	if err := checkSize("cuMemsetD8Async", n); err != nil || n == 0 {
		return err
	}
	return call(cuMemsetD8Async, func() Result { return rMemsetD8Async(dst, v, n, s) })
}

// ModuleLoadData loads a CUBIN or a NUL-terminated PTX image into the
// current context.
func ModuleLoadData(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, &Error{Code: ResultInvalidValue, Name: ResultName(ResultInvalidValue), Message: "empty module image", Call: "cuModuleLoadData"}
	}
	return gpurt.ModuleLoadData[rt](image)
}

// LaunchKernel enqueues f on s with the parameters laid out in args.
func LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, args *Args) error {
	if args == nil {
		args = new(Args)
	}
	if err := args.Err(); err != nil {
		return err
	}
	if grid.X == 0 || grid.Y == 0 || grid.Z == 0 || block.X == 0 || block.Y == 0 || block.Z == 0 {
		return &Error{Code: ResultInvalidValue, Name: ResultName(ResultInvalidValue),
			Message: fmt.Sprintf("empty launch grid %v block %v", grid, block), Call: "cuLaunchKernel"}
	}
	return call(cuLaunchKernel, func() Result { return rLaunchKernel(f, grid, block, sharedMem, s, args) })
}

// IpcGetMemHandle exports a MemAlloc allocation to other processes.
func IpcGetMemHandle(p DevicePtr) (IpcMemHandle, error) {
	var h IpcMemHandle
	err := call(cuIpcGetMemHandle, func() Result { return rIpcGetMemHandle(&h, p) })
	return h, err
}

// IpcOpenMemHandle maps another process's allocation into the current
// context (with lazy peer access). Close with IpcCloseMemHandle.
func IpcOpenMemHandle(h IpcMemHandle) (DevicePtr, error) {
	var p DevicePtr
	err := call(cuIpcOpenMemHandle, func() Result { return rIpcOpenMemHandle(&p, &h) })
	return p, err
}

// IpcCloseMemHandle unmaps memory from IpcOpenMemHandle.
func IpcCloseMemHandle(p DevicePtr) error {
	return call(cuIpcCloseMemHandle, func() Result { return rIpcCloseMemHandle(p) })
}

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
