package hip

import (
	"fmt"
	"runtime"
	"sync"

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
		if r := rInit(); r != ResultSuccess {
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
	if r == ResultSuccess {
		return nil
	}
	e := &Error{Code: r, Call: syms.Resolved(s)}
	if r == ResultSymbolNotFound {
		e.Message = "the loaded HIP runtime does not export " + syms.API(s)
	}
	e.Name = ResultName(r)
	if r >= 0 {
		// hipGetErrorName answers hipErrorUnknown for codes it does not
		// know; the table keeps the code then.
		if n, ok := rErrorName(r); ok && n != "" && (n != "hipErrorUnknown" || r == ResultUnknown) {
			e.Name = n
		}
		if e.Message == "" {
			if m, ok := rErrorString(r); ok && m != e.Name && m != "hipErrorUnknown" {
				e.Message = m
			}
		}
	}
	return e
}

// call is the common prologue of device calls: init, check an optional
// symbol, map the result.
func call(s sym, f func() Result) error {
	if err := Init(); err != nil {
		return err
	}
	return callLoaded(s, f)
}

// callLoaded is call for entry points that work without a device.
func callLoaded(s sym, f func() Result) error {
	if !syms.Have(s) {
		return errorOf(s, ResultSymbolNotFound)
	}
	return errorOf(s, f())
}

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
	if e, ok := err.(*Error); ok && e.Code == ResultPeerAlreadyEnabled {
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

// MemGetInfo returns free and total memory of the current device.
func MemGetInfo() (free, total uint64, err error) {
	err = call(hipMemGetInfo, func() Result { return rMemGetInfo(&free, &total) })
	return free, total, err
}

func invalid(call, format string, a ...any) error {
	return &Error{Code: ResultInvalidValue, Name: ResultName(ResultInvalidValue), Message: fmt.Sprintf(format, a...), Call: call}
}

func checkSize(call string, n int) error {
	if n < 0 {
		return invalid(call, "negative size %d", n)
	}
	return nil
}

// MemAlloc allocates n bytes of device memory on the current device. n == 0
// returns 0 and no error.
func MemAlloc(n int) (DevicePtr, error) {
	if err := checkSize("hipMalloc", n); err != nil || n == 0 {
		return 0, err
	}
	var p DevicePtr
	err := call(hipMalloc, func() Result { return rMalloc(&p, n) })
	return p, err
}

// MemFree frees memory from MemAlloc; 0 is a no-op.
func MemFree(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	return call(hipFree, func() Result { return rPtr(hipFree, p) })
}

// MemGetAddressRange returns the base and size of the allocation that
// contains p.
func MemGetAddressRange(p DevicePtr) (base DevicePtr, size uint64, err error) {
	err = call(hipMemGetAddressRange, func() Result { return rMemGetAddressRange(&base, &size, p) })
	return base, size, err
}

// MemAllocHost allocates n bytes of pinned host memory (hipHostMalloc,
// default flags).
func MemAllocHost(n int) (HostMem, error) {
	if err := checkSize("hipHostMalloc", n); err != nil || n == 0 {
		return HostMem{}, err
	}
	var h HostMem
	err := call(hipHostMalloc, func() Result { return rHostMalloc(&h, n) })
	return h, err
}

// MemFreeHost frees memory from MemAllocHost.
func MemFreeHost(h HostMem) error {
	if h.p == nil {
		return nil
	}
	return call(hipHostFree, func() Result { return rHostFree(h) })
}

// MemcpyHtoD copies src to device memory, synchronously.
func MemcpyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return call(hipMemcpyHtoD, func() Result { return rMemcpyHtoD(dst, src) })
}

// MemcpyDtoH copies device memory into dst, synchronously.
func MemcpyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return call(hipMemcpyDtoH, func() Result { return rMemcpyDtoH(dst, src) })
}

// MemcpyDtoD copies n bytes between device buffers.
func MemcpyDtoD(dst, src DevicePtr, n int) error {
	if err := checkSize("hipMemcpyDtoD", n); err != nil || n == 0 {
		return err
	}
	return call(hipMemcpyDtoD, func() Result { return rMemcpyDtoD(dst, src, n) })
}

func checkHost(callName string, h HostMem, off, n int) error {
	if off < 0 || n < 0 || off+n > h.n {
		return invalid(callName, "range [%d, %d) outside host buffer of %d bytes", off, off+n, h.n)
	}
	return nil
}

// MemcpyHtoDAsync enqueues a copy of src[off:off+n] to dst on s.
func MemcpyHtoDAsync(dst DevicePtr, src HostMem, off, n int, s Stream) error {
	if err := checkHost("hipMemcpyHtoDAsync", src, off, n); err != nil || n == 0 {
		return err
	}
	return call(hipMemcpyHtoDAsync, func() Result { return rMemcpyHtoDAsync(dst, src, off, n, s) })
}

// MemcpyDtoHAsync enqueues a copy of n bytes from src into dst[off:] on s.
func MemcpyDtoHAsync(dst HostMem, off int, src DevicePtr, n int, s Stream) error {
	if err := checkHost("hipMemcpyDtoHAsync", dst, off, n); err != nil || n == 0 {
		return err
	}
	return call(hipMemcpyDtoHAsync, func() Result { return rMemcpyDtoHAsync(dst, off, src, n, s) })
}

// MemcpyDtoDAsync enqueues a device-to-device copy on s.
func MemcpyDtoDAsync(dst, src DevicePtr, n int, s Stream) error {
	if err := checkSize("hipMemcpyDtoDAsync", n); err != nil || n == 0 {
		return err
	}
	return call(hipMemcpyDtoDAsync, func() Result { return rMemcpyDtoDAsync(dst, src, n, s) })
}

// MemsetD8 sets n bytes to v, synchronously.
func MemsetD8(dst DevicePtr, v byte, n int) error {
	if err := checkSize("hipMemsetD8", n); err != nil || n == 0 {
		return err
	}
	return call(hipMemsetD8, func() Result { return rMemsetD8(dst, v, n) })
}

// MemsetD8Async enqueues a byte fill on s.
func MemsetD8Async(dst DevicePtr, v byte, n int, s Stream) error {
	if err := checkSize("hipMemsetD8Async", n); err != nil || n == 0 {
		return err
	}
	return call(hipMemsetD8Async, func() Result { return rMemsetD8Async(dst, v, n, s) })
}

// ModuleLoadData loads a code object (from hiprtc) on the current device.
func ModuleLoadData(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, invalid("hipModuleLoadData", "empty module image")
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
		return invalid("hipModuleLaunchKernel", "empty launch grid %v block %v", grid, block)
	}
	return call(hipModuleLaunchKernel, func() Result { return rLaunchKernel(f, grid, block, sharedMem, s, args) })
}

// IpcGetMemHandle exports the allocation that contains p (on the current
// device) for another process (hipIpcGetMemHandle).
func IpcGetMemHandle(p DevicePtr) (IpcMemHandle, error) {
	var h IpcMemHandle
	err := call(hipIpcGetMemHandle, func() Result { return rIpcGetMemHandle(&h, p) })
	return h, err
}

// IpcOpenMemHandle maps a peer's exported allocation into this process
// (hipIpcOpenMemHandle with hipIpcMemLazyEnablePeerAccess, the only flag).
// Close it with IpcCloseMemHandle before the exporter frees it.
func IpcOpenMemHandle(h IpcMemHandle) (DevicePtr, error) {
	var p DevicePtr
	err := call(hipIpcOpenMemHandle, func() Result { return rIpcOpenMemHandle(&p, &h, IpcMemLazyEnablePeerAccess) })
	return p, err
}

// IpcCloseMemHandle unmaps memory from IpcOpenMemHandle.
func IpcCloseMemHandle(p DevicePtr) error {
	return call(hipIpcCloseMemHandle, func() Result { return rPtr(hipIpcCloseMemHandle, p) })
}

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
			return errorOf(s, ResultSymbolNotFound)
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
