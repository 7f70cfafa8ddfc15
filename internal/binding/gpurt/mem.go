package gpurt

import (
	"fmt"
	"unsafe"
)

// The memory, launch and IPC calls below are the same calls on both vendors
// with one difference of C type: a CUDA device pointer (CUdeviceptr) is an
// integer, a HIP one a void*. Go holds both as a DevicePtr; the trampolines
// call each entry point through its real C type, chosen by the binding's ABI.

// ABI is what differs between the bindings' C signatures of the shared
// memory calls.
type ABI struct {
	// IntegerDevicePtr: device pointers are an integer type (CUdeviceptr),
	// not void* (hipDeviceptr_t).
	IntegerDevicePtr bool
	// HostAllocFlags: the pinned-host allocator takes a flags argument
	// (hipHostMalloc(void**, size_t, unsigned); cuMemAllocHost has none).
	HostAllocFlags bool
}

// DevicePtr is a device address (CUdeviceptr, hipDeviceptr_t); gpu/devrt's
// Ptr is this type.
type DevicePtr uint64

// Add offsets p by n bytes.
func (p DevicePtr) Add(n int) DevicePtr { return p + DevicePtr(n) }

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// IpcMemHandle is an exported device allocation (CUipcMemHandle,
// hipIpcMemHandle_t: both 64 bytes).
type IpcMemHandle[R Runtime] [64]byte

// HostMem is page-locked host memory from MemAllocHost. It is C memory: Go
// may read and write it through Bytes, and the device may use it
// asynchronously. Free it with MemFreeHost.
type HostMem[R Runtime] struct {
	p unsafe.Pointer
	n int
}

// Len is the size in bytes.
func (h HostMem[R]) Len() int { return h.n }

// Bytes is a Go view of the memory (valid until MemFreeHost).
func (h HostMem[R]) Bytes() []byte {
	if h.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.p), h.n)
}

// Packer is a kernel-parameter packer (internal/kparams' Args): its error,
// the laid-out bytes and the offset of each parameter.
type Packer interface {
	Err() error
	Layout() ([]byte, []int32)
}

// ArgsPtr is a pointer to a packer whose zero value is ready (kparams.Args).
type ArgsPtr[A any] interface {
	*A
	Packer
}

func abi[R Runtime]() ABI {
	var r R
	return r.Binding().abi
}

func invalid[R Runtime](op Op, format string, a ...any) error {
	var r R
	return r.Binding().invalid(op, fmt.Sprintf(format, a...))
}

func checkSize[R Runtime](op Op, n int) error {
	if n < 0 {
		return invalid[R](op, "negative size %d", n)
	}
	return nil
}

func checkHost[R Runtime](op Op, h HostMem[R], off, n int) error {
	if off < 0 || n < 0 || off+n > h.n {
		return invalid[R](op, "range [%d, %d) outside host buffer of %d bytes", off, off+n, h.n)
	}
	return nil
}

// MemGetInfo returns free and total memory of the current device.
func MemGetInfo[R Runtime]() (free, total uint64, err error) {
	err = call[R](OpMemGetInfo, func(fn uintptr) int32 { return cMemInfo(fn, &free, &total) })
	return free, total, err
}

// MemAlloc allocates n bytes of device memory on the current context or
// device. n == 0 returns 0 and no error.
func MemAlloc[R Runtime](n int) (DevicePtr, error) {
	if err := checkSize[R](OpMemAlloc, n); err != nil || n == 0 {
		return 0, err
	}
	var p DevicePtr
	err := call[R](OpMemAlloc, func(fn uintptr) int32 { return cAlloc(fn, abi[R](), &p, n) })
	return p, err
}

// MemFree frees memory from MemAlloc; 0 is a no-op.
func MemFree[R Runtime](p DevicePtr) error {
	if p == 0 {
		return nil
	}
	return call[R](OpMemFree, func(fn uintptr) int32 { return cDptr(fn, abi[R](), p) })
}

// MemGetAddressRange returns the base and size of the allocation that
// contains p. Any address outside memory allocated on the current context
// or device is an error from the library (typically not-found or
// invalid-value), never a crash.
func MemGetAddressRange[R Runtime](p DevicePtr) (base DevicePtr, size uint64, err error) {
	err = call[R](OpMemGetAddressRange, func(fn uintptr) int32 { return cAddrRange(fn, abi[R](), &base, &size, p) })
	return base, size, err
}

// MemAllocHost allocates n bytes of page-locked host memory (default flags).
func MemAllocHost[R Runtime](n int) (HostMem[R], error) {
	if err := checkSize[R](OpMemAllocHost, n); err != nil || n == 0 {
		return HostMem[R]{}, err
	}
	var h HostMem[R]
	err := call[R](OpMemAllocHost, func(fn uintptr) int32 {
		var p unsafe.Pointer
		r := cAllocHost(fn, abi[R](), &p, n)
		if r == 0 {
			h = HostMem[R]{p: p, n: n}
		}
		return r
	})
	return h, err
}

// MemFreeHost frees memory from MemAllocHost.
func MemFreeHost[R Runtime](h HostMem[R]) error {
	if h.p == nil {
		return nil
	}
	return call[R](OpMemFreeHost, func(fn uintptr) int32 { return cFreeHost(fn, h.p) })
}

// MemcpyHtoD copies src to device memory, synchronously.
func MemcpyHtoD[R Runtime](dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return call[R](OpMemcpyHtoD, func(fn uintptr) int32 { return cHtoD(fn, abi[R](), dst, unsafe.Pointer(&src[0]), len(src)) })
}

// MemcpyDtoH copies device memory into dst, synchronously.
func MemcpyDtoH[R Runtime](dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return call[R](OpMemcpyDtoH, func(fn uintptr) int32 { return cDtoH(fn, abi[R](), unsafe.Pointer(&dst[0]), src, len(dst)) })
}

// MemcpyDtoD copies n bytes between device buffers.
func MemcpyDtoD[R Runtime](dst, src DevicePtr, n int) error {
	if err := checkSize[R](OpMemcpyDtoD, n); err != nil || n == 0 {
		return err
	}
	return call[R](OpMemcpyDtoD, func(fn uintptr) int32 { return cDtoD(fn, abi[R](), dst, src, n, 0, false) })
}

// MemcpyHtoDAsync enqueues a copy of src[off:off+n] to dst on s.
func MemcpyHtoDAsync[R Runtime](dst DevicePtr, src HostMem[R], off, n int, s Stream[R]) error {
	if err := checkHost(OpMemcpyHtoDAsync, src, off, n); err != nil || n == 0 {
		return err
	}
	return call[R](OpMemcpyHtoDAsync, func(fn uintptr) int32 {
		return cHtoDAsync(fn, abi[R](), dst, unsafe.Add(src.p, off), n, uintptr(s))
	})
}

// MemcpyDtoHAsync enqueues a copy of n bytes from src into dst[off:] on s.
func MemcpyDtoHAsync[R Runtime](dst HostMem[R], off int, src DevicePtr, n int, s Stream[R]) error {
	if err := checkHost(OpMemcpyDtoHAsync, dst, off, n); err != nil || n == 0 {
		return err
	}
	return call[R](OpMemcpyDtoHAsync, func(fn uintptr) int32 {
		return cDtoHAsync(fn, abi[R](), unsafe.Add(dst.p, off), src, n, uintptr(s))
	})
}

// MemcpyDtoDAsync enqueues a device-to-device copy on s.
func MemcpyDtoDAsync[R Runtime](dst, src DevicePtr, n int, s Stream[R]) error {
	if err := checkSize[R](OpMemcpyDtoDAsync, n); err != nil || n == 0 {
		return err
	}
	return call[R](OpMemcpyDtoDAsync, func(fn uintptr) int32 { return cDtoD(fn, abi[R](), dst, src, n, uintptr(s), true) })
}

// MemsetD8 sets n bytes to v, synchronously.
func MemsetD8[R Runtime](dst DevicePtr, v byte, n int) error {
	if err := checkSize[R](OpMemsetD8, n); err != nil || n == 0 {
		return err
	}
	return call[R](OpMemsetD8, func(fn uintptr) int32 { return cMemset(fn, abi[R](), dst, v, n, 0, false) })
}

// MemsetD8Async enqueues a byte fill on s.
func MemsetD8Async[R Runtime](dst DevicePtr, v byte, n int, s Stream[R]) error {
	if err := checkSize[R](OpMemsetD8Async, n); err != nil || n == 0 {
		return err
	}
	return call[R](OpMemsetD8Async, func(fn uintptr) int32 { return cMemset(fn, abi[R](), dst, v, n, uintptr(s), true) })
}

// LoadModule is ModuleLoadData with the binding's check: an empty image is
// an invalid-value error, not a call.
func LoadModule[R Runtime](image []byte) (Module[R], error) {
	if len(image) == 0 {
		return 0, invalid[R](OpModuleLoadData, "empty module image")
	}
	return ModuleLoadData[R](image)
}

// LaunchKernel enqueues f on s with the parameters laid out in args (nil:
// no parameters). The parameters are copied into C memory for the call, so
// args may be reused as soon as it returns.
func LaunchKernel[R Runtime, A any, P ArgsPtr[A]](f Function[R], grid, block Dim3, sharedMem uint32, s Stream[R], args P) error {
	if args == nil {
		args = new(A)
	}
	if err := args.Err(); err != nil {
		return err
	}
	if grid.X == 0 || grid.Y == 0 || grid.Z == 0 || block.X == 0 || block.Y == 0 || block.Z == 0 {
		return invalid[R](OpLaunchKernel, "empty launch grid %v block %v", grid, block)
	}
	buf, offs := args.Layout()
	return call[R](OpLaunchKernel, func(fn uintptr) int32 {
		return cLaunch(fn, uintptr(f), grid, block, sharedMem, uintptr(s), buf, offs)
	})
}

// ipcLazyEnablePeerAccess is CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS and
// hipIpcMemLazyEnablePeerAccess, the one flag either open call takes.
const ipcLazyEnablePeerAccess = 1

// IpcGetMemHandle exports the allocation that contains p for another
// process.
func IpcGetMemHandle[R Runtime](p DevicePtr) (IpcMemHandle[R], error) {
	var h IpcMemHandle[R]
	err := call[R](OpIpcGetMemHandle, func(fn uintptr) int32 { return cIpcGet(fn, abi[R](), (*[64]byte)(&h), p) })
	return h, err
}

// IpcOpenMemHandle maps another process's allocation into this one (with
// lazy peer access). Close it with IpcCloseMemHandle before the exporter
// frees it.
func IpcOpenMemHandle[R Runtime](h IpcMemHandle[R]) (DevicePtr, error) {
	var p DevicePtr
	err := call[R](OpIpcOpenMemHandle, func(fn uintptr) int32 {
		return cIpcOpen(fn, abi[R](), &p, (*[64]byte)(&h), ipcLazyEnablePeerAccess)
	})
	return p, err
}

// IpcCloseMemHandle unmaps memory from IpcOpenMemHandle.
func IpcCloseMemHandle[R Runtime](p DevicePtr) error {
	return call[R](OpIpcCloseMemHandle, func(fn uintptr) int32 { return cDptr(fn, abi[R](), p) })
}
