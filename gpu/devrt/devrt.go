// Package devrt is the device runtime that detcoll's device code is written
// against: the small set of GPU driver/runtime calls that gpu.Device, the
// reduce kernels, gpu/devcomm and the device benchmark use, plus the
// run-time kernel compiler, behind one interface with neutral handle types.
//
// Two implementations register themselves at init: package gpu/devrt/cudart
// (the CUDA driver API through internal/cuda, NVRTC, NCCL) and package
// gpu/devrt/hiprt (the HIP runtime through internal/hip, hiprtc, RCCL). This
// package imports neither vendor, so a build carries a vendor only when one of
// the (build-constrained) import sites links its implementation in — see
// docs/rocm.md, "Build isolation", and docs/architecture.md.
//
// Handles (Stream, Event, Module, Function, GraphExec) are the vendor's own
// handle values (CUstream / hipStream_t, …) in a neutral type; a handle is
// only meaningful to the Runtime that made it. Ptr is a device address and is
// the same type as cuda.DevicePtr and hip.DevicePtr.
//
// Every call that touches the device must run inside Context.Do (a locked OS
// thread with the device current), exactly like the raw internal/cuda and
// internal/hip calls it forwards to.
package devrt

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/detcoll/detcoll/internal/binding/gpurt"
	"github.com/detcoll/detcoll/internal/ccl"
)

// Ptr is a device address: internal/binding/gpurt's DevicePtr (with its Add
// method), the type the bindings' memory calls take.
type Ptr = gpurt.DevicePtr

// Opaque vendor handles (CUstream / hipStream_t and so on).
type (
	Stream    uintptr
	Event     uintptr
	Module    uintptr
	Function  uintptr
	GraphExec uintptr
)

// IpcHandle is an exported device allocation (CUipcMemHandle and
// hipIpcMemHandle_t are both 64 bytes).
type IpcHandle [64]byte

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// HostMem is page-locked host memory that the device can address (the same
// address on the host and the device: unified virtual addressing). Bytes is
// a Go view of C memory, valid until Runtime.HostFree.
type HostMem struct {
	Bytes  []byte
	Handle any // the vendor's allocation record
}

// Len is the size in bytes.
func (h HostMem) Len() int { return len(h.Bytes) }

// Args lays out kernel parameters (cuda.Args / hip.Args behind a neutral
// face: the packed bytes are the vendor's own layout). Chain calls as with
// cuda.Args; Runtime.NewArgs makes one.
type Args interface {
	Reset()
	Err() error
	Raw(b []byte, align int) Args
	Ptr(p Ptr) Args
	U64(v uint64) Args
	I64(v int64) Args
	U32(v uint32) Args
	I32(v int32) Args
	F32(v float32) Args
	F64(v float64) Args
}

// Props is what detcoll learns about a device when it opens it.
type Props struct {
	Name            string
	CCMajor         int    // CUDA compute capability; 0 on AMD
	CCMinor         int    //
	Arch            string // "sm_90" on NVIDIA, the gcnArchName (e.g. "gfx90a:sramecc+:xnack-") on AMD
	Multiprocessors int    // SMs / CUs
	TotalMem        uint64
	WarpSize        int
}

// Program is a compiled kernel module.
type Program struct {
	Image    []byte
	Key      string   // cache key (Compiler.Invalidate)
	From     string   // "compiled", "memory" or "disk"
	Arch     string   // e.g. "sm_90" (CUBIN), "compute_90" (PTX) or "gfx90a"
	Version  string   // compiler version
	Options  []string // compiler options
	Compiled bool     // From == "compiled"
}

// Context is an opened device (CUDA: a primary context retain; HIP: the
// device ordinal).
type Context interface {
	// Do runs fn on a locked OS thread with the device current.
	Do(fn func() error) error
	// Release drops the retain taken by Runtime.Open.
	Release() error
	// UUID is the device's UUID (the IPC path matches peers by it).
	UUID() ([16]byte, error)
	// PCIBusID is the device's PCI bus id, e.g. "0000:19:00.0".
	PCIBusID() (string, error)
	// CanAccessPeer reports whether this device can map memory of the
	// visible device ordinal peer.
	CanAccessPeer(peer int) (bool, error)
	// Capture records the work fn enqueues on s into an executable graph
	// (thread-local capture mode, one locked thread).
	Capture(s Stream, fn func() error) (GraphExec, error)
}

// Runtime is one vendor's device runtime, kernel compiler and collective
// library.
type Runtime interface {
	// Vendor is "cuda" or "rocm".
	Vendor() string
	// CCLName is "NCCL" or "RCCL".
	CCLName() string
	// Available reports why the runtime cannot be used here, or nil: the
	// driver with at least one GPU, the kernel compiler and the collective
	// library must load.
	Available() error
	// DriverAvailable checks the driver/runtime library only.
	DriverAvailable() error
	// CompilerName is "NVRTC" or "hiprtc"; CompilerAvailable and
	// CCLAvailable check the kernel compiler and the collective library
	// alone (Available checks all three and a GPU).
	CompilerName() string
	CompilerAvailable() error
	CCLAvailable() error
	DeviceCount() (int, error)
	Open(ordinal int) (Context, Props, error)
	// CCL loads the collective library (NCCL or RCCL) once per process.
	CCL() (*ccl.Lib, error)

	// Build compiles source for the device described by p (cached);
	// Invalidate drops a cached image that failed to load.
	Build(source, name string, p Props) (*Program, error)
	Invalidate(key string)

	// The calls below run inside Context.Do.
	MemAlloc(n int) (Ptr, error)
	MemFree(p Ptr) error
	MemGetAddressRange(p Ptr) (base Ptr, size uint64, err error)
	MemGetInfo() (free, total uint64, err error)
	MemcpyHtoD(dst Ptr, src []byte) error
	MemcpyDtoH(dst []byte, src Ptr) error
	MemcpyDtoD(dst, src Ptr, n int) error
	MemcpyDtoDAsync(dst, src Ptr, n int, s Stream) error
	MemsetD8(p Ptr, v byte, n int) error
	// SyncLegacy waits for the legacy default stream (after a pageable copy).
	SyncLegacy() error

	StreamCreate() (Stream, error) // non-blocking
	StreamDestroy(s Stream) error
	StreamSynchronize(s Stream) error
	StreamWaitEvent(s Stream, e Event) error
	// StreamCapturing reports whether s is being captured into a graph.
	StreamCapturing(s Stream) (bool, error)

	EventCreate(timing bool) (Event, error)
	EventRecord(e Event, s Stream) error
	EventSynchronize(e Event) error
	EventDestroy(e Event) error
	EventElapsed(start, end Event) (ms float32, err error)

	ModuleLoad(image []byte) (Module, error)
	ModuleUnload(m Module) error
	ModuleFunction(m Module, name string) (Function, error)
	// FunctionResources is the register count and local (spill + stack)
	// bytes per thread.
	FunctionResources(f Function) (registers, localBytes int, err error)
	NewArgs() Args
	Launch(f Function, grid, block Dim3, sharedMem uint32, s Stream, a Args) error

	GraphLaunch(g GraphExec, s Stream) error
	GraphDestroy(g GraphExec) error

	HostAlloc(n int) (HostMem, error)
	HostFree(h HostMem) error
	IpcGetMemHandle(p Ptr) (IpcHandle, error)
	IpcOpenMemHandle(h IpcHandle) (Ptr, error)
	IpcCloseMemHandle(p Ptr) error
	// DeviceUUID is the UUID of visible device ordinal (no Do needed).
	DeviceUUID(ordinal int) ([16]byte, error)
}

// DeviceEnv picks the vendor when more than one is registered ("cuda" or
// "rocm"); unset: the first available, CUDA first.
const DeviceEnv = "DETCOLL_DEVICE"

var (
	mu       sync.Mutex
	runtimes = map[string]Runtime{}
)

// Register makes a runtime available under its Vendor name (called from the
// implementations' init).
func Register(r Runtime) {
	mu.Lock()
	defer mu.Unlock()
	runtimes[r.Vendor()] = r
}

// Registered lists the vendors linked into this binary, sorted ("cuda"
// before "rocm").
func Registered() []string {
	mu.Lock()
	defer mu.Unlock()
	out := make([]string, 0, len(runtimes))
	for k := range runtimes {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ErrNoRuntime means that no device runtime of the wanted vendor is linked
// into this binary or usable here.
var ErrNoRuntime = errors.New("devrt: no device runtime")

// Get returns the runtime of vendor ("cuda" or "rocm"); "" or "auto" means
// $DETCOLL_DEVICE if set, else the first registered runtime that is
// Available (CUDA first), else the first registered one (its Available
// error then says why).
func Get(vendor string) (Runtime, error) {
	vendor = strings.ToLower(strings.TrimSpace(vendor))
	if vendor == "" || vendor == "auto" {
		vendor = strings.ToLower(strings.TrimSpace(os.Getenv(DeviceEnv)))
	}
	names := Registered()
	mu.Lock()
	defer mu.Unlock()
	if vendor != "" && vendor != "auto" {
		if r, ok := runtimes[vendor]; ok {
			return r, nil
		}
		return nil, fmt.Errorf("%w: %q is not linked into this build (have %v)", ErrNoRuntime, vendor, names)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: this build links no GPU vendor", ErrNoRuntime)
	}
	for _, n := range names {
		if runtimes[n].Available() == nil {
			return runtimes[n], nil
		}
	}
	return runtimes[names[0]], nil
}
