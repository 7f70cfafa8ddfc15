package gpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/detcoll/detcoll/internal/cuda"
)

// ErrClosed is returned by methods of a closed Device.
var ErrClosed = errors.New("gpu: device closed")

// Device is an opened GPU: a retain of its primary context plus what detcoll
// learned about it. See the package doc for the threading rules.
type Device struct {
	ordinal int
	dev     cuda.Device
	ctx     cuda.Context
	name    string
	ccMajor int
	ccMinor int
	sms     int
	mem     uint64

	mu      sync.Mutex
	closed  bool
	kernels *ReduceKernels
}

// Open retains the primary context of GPU ordinal.
func Open(ordinal int) (*Device, error) {
	if err := cuda.Available(); err != nil {
		return nil, fmt.Errorf("gpu: no CUDA driver: %w", err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("gpu: device %d does not exist (%d visible)", ordinal, n)
	}
	dev, err := cuda.DeviceGet(ordinal)
	if err != nil {
		return nil, err
	}
	d := &Device{ordinal: ordinal, dev: dev}
	if d.name, err = dev.Name(); err != nil {
		return nil, err
	}
	if d.ccMajor, d.ccMinor, err = dev.ComputeCapability(); err != nil {
		return nil, err
	}
	if d.sms, err = dev.Attribute(cuda.AttrMultiprocessorCount); err != nil {
		return nil, err
	}
	if d.mem, err = dev.TotalMem(); err != nil {
		return nil, err
	}
	if d.ctx, err = dev.PrimaryCtxRetain(); err != nil {
		return nil, err
	}
	return d, nil
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
		errs = append(errs, d.ctx.Do(func() error { return d.kernels.mod.Unload() }))
		d.kernels = nil
	}
	errs = append(errs, d.dev.PrimaryCtxRelease())
	return errors.Join(errs...)
}

// Ordinal is the CUDA device ordinal.
func (d *Device) Ordinal() int { return d.ordinal }

// Name is the device name, e.g. "NVIDIA H200".
func (d *Device) Name() string { return d.name }

// ComputeCapability is (major, minor), e.g. (9, 0).
func (d *Device) ComputeCapability() (major, minor int) { return d.ccMajor, d.ccMinor }

// Multiprocessors is the SM count.
func (d *Device) Multiprocessors() int { return d.sms }

// TotalMemory is the device memory in bytes.
func (d *Device) TotalMemory() uint64 { return d.mem }

// Context is the primary context (for internal/cuda and internal/nccl calls
// made inside Do).
func (d *Device) Context() cuda.Context { return d.ctx }

// CUDADevice is the driver's device handle.
func (d *Device) CUDADevice() cuda.Device { return d.dev }

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
func (d *Device) Alloc(bytes int) (cuda.DevicePtr, error) {
	var p cuda.DevicePtr
	err := d.Do(func() (err error) { p, err = cuda.MemAlloc(bytes); return err })
	return p, err
}

// Free frees memory from Alloc (0 is a no-op).
func (d *Device) Free(p cuda.DevicePtr) error {
	return d.Do(func() error { return cuda.MemFree(p) })
}

// CopyHtoD copies src to dst and waits until the data is on the device.
// (cuMemcpyHtoD from pageable memory may return before the DMA ends; the
// legacy stream is synchronised so that any stream may read dst next.)
func (d *Device) CopyHtoD(dst cuda.DevicePtr, src []byte) error {
	return d.Do(func() error {
		if err := cuda.MemcpyHtoD(dst, src); err != nil {
			return err
		}
		return cuda.Stream(0).Synchronize()
	})
}

// CopyDtoH copies len(dst) bytes from src and waits. It does not wait for
// work on other streams: synchronise the stream that wrote src first.
func (d *Device) CopyDtoH(dst []byte, src cuda.DevicePtr) error {
	return d.Do(func() error { return cuda.MemcpyDtoH(dst, src) })
}

// CopyDtoD copies n bytes between device buffers and waits.
func (d *Device) CopyDtoD(dst, src cuda.DevicePtr, n int) error {
	return d.Do(func() error {
		if err := cuda.MemcpyDtoD(dst, src, n); err != nil {
			return err
		}
		return cuda.Stream(0).Synchronize()
	})
}

// Memset fills n bytes at p with v and waits.
func (d *Device) Memset(p cuda.DevicePtr, v byte, n int) error {
	return d.Do(func() error {
		if err := cuda.MemsetD8(p, v, n); err != nil {
			return err
		}
		return cuda.Stream(0).Synchronize()
	})
}

// MemInfo returns the free and total device memory.
func (d *Device) MemInfo() (free, total uint64, err error) {
	err = d.Do(func() (err error) { free, total, err = cuda.MemGetInfo(); return err })
	return free, total, err
}

// NewStream creates a non-blocking stream.
func (d *Device) NewStream() (cuda.Stream, error) {
	var s cuda.Stream
	err := d.Do(func() (err error) { s, err = cuda.StreamCreate(cuda.StreamNonBlocking); return err })
	return s, err
}

// DestroyStream destroys a stream from NewStream.
func (d *Device) DestroyStream(s cuda.Stream) error {
	return d.Do(func() error { return s.Destroy() })
}

// Synchronize waits for the work queued on s.
func (d *Device) Synchronize(s cuda.Stream) error {
	return d.Do(func() error { return s.Synchronize() })
}

// Capture records the work fn enqueues on s (which must not be the default
// stream) into an executable graph, in thread-local capture mode on one
// locked thread. Destroy the graph with DestroyGraph.
func (d *Device) Capture(s cuda.Stream, fn func() error) (cuda.GraphExec, error) {
	if s == 0 {
		return 0, fmt.Errorf("gpu: the legacy default stream cannot be captured; use NewStream")
	}
	var g cuda.GraphExec
	err := d.Do(func() (err error) {
		g, err = cuda.Capture(d.ctx, s, cuda.CaptureThreadLocal, fn)
		return err
	})
	return g, err
}

// LaunchGraph enqueues an executable graph on s.
func (d *Device) LaunchGraph(g cuda.GraphExec, s cuda.Stream) error {
	return d.Do(func() error { return g.Launch(s) })
}

// DestroyGraph destroys an executable graph.
func (d *Device) DestroyGraph(g cuda.GraphExec) error {
	return d.Do(func() error { return g.Destroy() })
}
