package gpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/detcoll/detcoll/gpu/devrt"
)

// ErrClosed is returned by methods of a closed Device.
var ErrClosed = errors.New("gpu: device closed")

// DevicePtr is a device address (cuda.DevicePtr and hip.DevicePtr are the
// same type).
type DevicePtr = devrt.Ptr

// Stream is a stream handle of the device's runtime.
type Stream = devrt.Stream

// GraphExec is an executable graph of the device's runtime.
type GraphExec = devrt.GraphExec

// Device is an opened GPU: a retain of its primary context (CUDA) or the
// device ordinal (HIP) plus what detcoll learned about it. See the package
// doc for the threading rules.
type Device struct {
	rt      devrt.Runtime
	ordinal int
	ctx     devrt.Context
	props   devrt.Props

	mu      sync.Mutex
	closed  bool
	kernels *ReduceKernels
}

// vendorLabel names a vendor's driver in messages ("no CUDA driver").
func vendorLabel(rt devrt.Runtime) string {
	if rt.Vendor() == "rocm" {
		return "HIP"
	}
	return "CUDA"
}

// Open opens GPU ordinal of the default runtime (devrt.Get(""): the
// vendor named by $DETCOLL_DEVICE, else the first usable one linked into the
// binary, CUDA first). On CUDA it retains the primary context.
func Open(ordinal int) (*Device, error) {
	rt, err := devrt.Get("")
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	return OpenWith(rt, ordinal)
}

// OpenWith opens GPU ordinal of runtime rt.
func OpenWith(rt devrt.Runtime, ordinal int) (*Device, error) {
	if err := rt.DriverAvailable(); err != nil {
		return nil, fmt.Errorf("gpu: no %s driver: %w", vendorLabel(rt), err)
	}
	n, err := rt.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("gpu: device %d does not exist (%d visible)", ordinal, n)
	}
	ctx, props, err := rt.Open(ordinal)
	if err != nil {
		return nil, err
	}
	return &Device{rt: rt, ordinal: ordinal, ctx: ctx, props: props}, nil
}

// Close unloads the kernels and releases the primary context retain. Memory
// and streams the caller still holds are not freed (free them first).
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	if d.kernels != nil {
		errs = append(errs, d.ctx.Do(func() error { return d.rt.ModuleUnload(d.kernels.mod) }))
		d.kernels = nil
	}
	errs = append(errs, d.ctx.Release())
	return errors.Join(errs...)
}

// Runtime is the device runtime this device was opened with; its calls run
// inside Do.
func (d *Device) Runtime() devrt.Runtime { return d.rt }

// Vendor is "cuda" or "rocm".
func (d *Device) Vendor() string { return d.rt.Vendor() }

// Ordinal is the device ordinal (CUDA or HIP).
func (d *Device) Ordinal() int { return d.ordinal }

// Name is the device name, e.g. "NVIDIA H200".
func (d *Device) Name() string { return d.props.Name }

// ComputeCapability is (major, minor), e.g. (9, 0); (0, 0) on AMD.
func (d *Device) ComputeCapability() (major, minor int) { return d.props.CCMajor, d.props.CCMinor }

// Props is what Open learned about the device (Arch is the compile target).
func (d *Device) Props() devrt.Props { return d.props }

// Multiprocessors is the SM (CUDA) or CU (AMD) count.
func (d *Device) Multiprocessors() int { return d.props.Multiprocessors }

// TotalMemory is the device memory in bytes.
func (d *Device) TotalMemory() uint64 { return d.props.TotalMem }

// Context is the runtime's handle of the opened device (cudart.Context
// turns a CUDA one into its primary context, for CUDA-only code).
func (d *Device) Context() devrt.Context { return d.ctx }

// UUID is the device's UUID (on AMD: its PCI bus id, see gpu/devrt/hiprt).
func (d *Device) UUID() ([16]byte, error) { return d.ctx.UUID() }

// PCIBusID is the device's PCI bus id.
func (d *Device) PCIBusID() (string, error) { return d.ctx.PCIBusID() }

// Do runs fn on a locked OS thread with the device's context current.
func (d *Device) Do(fn func() error) error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return d.ctx.Do(fn)
}

// Alloc allocates device memory (256-byte aligned); bytes == 0 gives 0.
func (d *Device) Alloc(bytes int) (DevicePtr, error) {
	var p DevicePtr
	err := d.Do(func() (err error) { p, err = d.rt.MemAlloc(bytes); return err })
	return p, err
}

// Free frees memory from Alloc (0 is a no-op).
func (d *Device) Free(p DevicePtr) error {
	return d.Do(func() error { return d.rt.MemFree(p) })
}

// CopyHtoD copies src to dst and waits until the data is on the device.
// (cuMemcpyHtoD from pageable memory may return before the DMA ends; the
// legacy stream is synchronised so that any stream may read dst next.)
func (d *Device) CopyHtoD(dst DevicePtr, src []byte) error {
	return d.Do(func() error {
		if err := d.rt.MemcpyHtoD(dst, src); err != nil {
			return err
		}
		return d.rt.SyncLegacy()
	})
}

// CopyDtoH copies len(dst) bytes from src and waits. It does not wait for
// work on other streams: synchronise the stream that wrote src first.
func (d *Device) CopyDtoH(dst []byte, src DevicePtr) error {
	return d.Do(func() error { return d.rt.MemcpyDtoH(dst, src) })
}

// CopyDtoD copies n bytes between device buffers and waits.
func (d *Device) CopyDtoD(dst, src DevicePtr, n int) error {
	return d.Do(func() error {
		if err := d.rt.MemcpyDtoD(dst, src, n); err != nil {
			return err
		}
		return d.rt.SyncLegacy()
	})
}

// Memset fills n bytes at p with v and waits.
func (d *Device) Memset(p DevicePtr, v byte, n int) error {
	return d.Do(func() error {
		if err := d.rt.MemsetD8(p, v, n); err != nil {
			return err
		}
		return d.rt.SyncLegacy()
	})
}

// MemInfo returns the free and total device memory.
func (d *Device) MemInfo() (free, total uint64, err error) {
	err = d.Do(func() (err error) { free, total, err = d.rt.MemGetInfo(); return err })
	return free, total, err
}

// NewStream creates a non-blocking stream.
func (d *Device) NewStream() (Stream, error) {
	var s Stream
	err := d.Do(func() (err error) { s, err = d.rt.StreamCreate(); return err })
	return s, err
}

// DestroyStream destroys a stream from NewStream.
func (d *Device) DestroyStream(s Stream) error {
	return d.Do(func() error { return d.rt.StreamDestroy(s) })
}

// Synchronize waits for the work queued on s.
func (d *Device) Synchronize(s Stream) error {
	return d.Do(func() error { return d.rt.StreamSynchronize(s) })
}

// Capture records the work fn enqueues on s (which must not be the default
// stream) into an executable graph, in thread-local capture mode on one
// locked thread. Destroy the graph with DestroyGraph.
func (d *Device) Capture(s Stream, fn func() error) (GraphExec, error) {
	if s == 0 {
		return 0, fmt.Errorf("gpu: the legacy default stream cannot be captured; use NewStream")
	}
	var g GraphExec
	err := d.Do(func() (err error) {
		g, err = d.ctx.Capture(s, fn)
		return err
	})
	return g, err
}

// LaunchGraph enqueues an executable graph on s.
func (d *Device) LaunchGraph(g GraphExec, s Stream) error {
	return d.Do(func() error { return d.rt.GraphLaunch(g, s) })
}

// DestroyGraph destroys an executable graph.
func (d *Device) DestroyGraph(g GraphExec) error {
	return d.Do(func() error { return d.rt.GraphDestroy(g) })
}
