package gpuffn

import (
	"context"
	"errors"
	"fmt"

	_ "embed"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devcomm"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
	"github.com/detcoll/detcoll/internal/ccl"
	"github.com/detcoll/detcoll/internal/cublas"
	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/internal/nccl"
	"github.com/detcoll/detcoll/internal/nvrtc"
	"github.com/detcoll/detcoll/reduce"
)

// SwiGLUSource is the CUDA C source of the activation kernels.
//
//go:embed kernels/swiglu.cu
var SwiGLUSource string

// CUBLASWorkspaceBytes is the workspace every layer gives its cuBLAS
// handle (cublasSetWorkspace): fixed, so that the kernel choice never
// depends on cuBLAS's internal pool (32 MiB, NVIDIA's recommendation for
// Hopper).
const CUBLASWorkspaceBytes = 32 << 20

const (
	kernelFwd    = "detcoll_swiglu_fwd_bf16"
	kernelBwd    = "detcoll_swiglu_bwd_bf16"
	blockThreads = 256
)

// ops is what a Layer does to a device: the GPU (gpuOps), or a host
// emulation in the tests. Enqueueing methods are stream-ordered.
type ops interface {
	alloc(bytes int) (cuda.DevicePtr, error)
	free(p cuda.DevicePtr) error
	upload(dst cuda.DevicePtr, src []byte) error
	download(dst []byte, src cuda.DevicePtr) error // after the stream's work
	do(fn func() error) error                      // a batch of enqueues
	gemm(g cublas.Gemm, batched bool) error
	reduce(out, base cuda.DevicePtr, strideBytes, w, count int) error // canonical tree over w slabs
	reduce2(out, a, b cuda.DevicePtr, count int) error                // out = a + b (bf16 native)
	zero(p cuda.DevicePtr, bytes int) error
	swigluFwd(a, g, u cuda.DevicePtr, perBlock, blocks, strideElems int) error
	swigluBwd(dg, du, g, u, da cuda.DevicePtr, perBlock, blocks, strideElems int) error
	allReduce(ctx context.Context, p cuda.DevicePtr, count int) error // in place over TP (bf16)
	span(name string, collective bool) func() error
	setTiming(on bool)
	timings() ([]Timing, error)
	sync() error
	close() error
}

// gpuOps runs a Layer on one GPU: one non-blocking stream, one cuBLAS
// handle bound to it with a fixed workspace, package gpu's reduce kernels,
// the SwiGLU kernels, and the TP communicator (nil at TP = 1).
type gpuOps struct {
	dev       *gpu.Device
	comm      *devcomm.Comm
	native    bool
	stream    cuda.Stream
	blas      cublas.Handle
	blasWS    cuda.DevicePtr
	red       *gpu.ReduceKernels
	mod       cuda.Module
	fwd, bwd  cuda.Function
	maxBlocks int
	args      cuda.Args

	timing bool
	events []cuda.Event
	used   int
	spans  []spanRec
}

type spanRec struct {
	name       string
	collective bool
	start, end cuda.Event
}

func newGPUOps(dev *gpu.Device, comm *devcomm.Comm, cfg Config) (*gpuOps, error) {
	if err := cublas.Available(); err != nil {
		return nil, fmt.Errorf("gpuffn: no cuBLAS: %w", err)
	}
	o := &gpuOps{dev: dev, comm: comm, native: cfg.NativeCollectives}
	if err := o.open(cfg); err != nil {
		_ = o.close() // releases what was made
		return nil, err
	}
	return o, nil
}

func (o *gpuOps) open(cfg Config) error {
	dev := o.dev
	var err error
	if o.red, err = dev.Kernels(); err != nil {
		return err
	}
	if err = o.loadKernels(); err != nil {
		return err
	}
	o.maxBlocks = max(1, dev.Multiprocessors()*2048/blockThreads)
	s, err := dev.NewStream()
	if err != nil {
		return err
	}
	o.stream = cuda.Stream(s)
	if o.blasWS, err = dev.Alloc(CUBLASWorkspaceBytes); err != nil {
		return err
	}
	err = dev.Do(func() error {
		h, err := cublas.Create()
		if err != nil {
			return err
		}
		o.blas = h
		// SetStream resets the workspace, so the workspace comes after it.
		if err := h.SetStream(o.stream); err != nil {
			return err
		}
		if err := h.SetWorkspace(o.blasWS, CUBLASWorkspaceBytes); err != nil {
			return err
		}
		if err := h.SetMathMode(cfg.math()); err != nil {
			return err
		}
		if err := h.SetAtomicsMode(cublas.AtomicsNotAllowed); err != nil &&
			!errors.Is(err, &cublas.Error{Code: cublas.StatusSymbolNotFound}) {
			return err // without the symbol, atomics are off (the default)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("gpuffn: setting up cuBLAS: %w", err)
	}
	return nil
}

func (o *gpuOps) loadKernels() error {
	major, minor := o.dev.ComputeCapability()
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		prog, err := nvrtc.Build(SwiGLUSource, "detcoll_swiglu.cu", major*10+minor)
		if err != nil {
			return fmt.Errorf("gpuffn: compiling the SwiGLU kernels: %w", err)
		}
		last = o.dev.Do(func() error {
			m, err := cuda.ModuleLoadData(prog.Image)
			if err != nil {
				return err
			}
			f, err := m.Function(kernelFwd)
			if err == nil {
				o.bwd, err = m.Function(kernelBwd)
			}
			if err != nil {
				_ = m.Unload()
				return err
			}
			o.mod, o.fwd = m, f
			return nil
		})
		if last == nil {
			return nil
		}
		if prog.From == "compiled" {
			break
		}
		nvrtc.Invalidate(prog.Key) // a stale cache entry: compile afresh once
	}
	return fmt.Errorf("gpuffn: loading the SwiGLU kernels: %w", last)
}

func (o *gpuOps) alloc(n int) (cuda.DevicePtr, error) { return o.dev.Alloc(n) }
func (o *gpuOps) free(p cuda.DevicePtr) error         { return o.dev.Free(p) }
func (o *gpuOps) upload(dst cuda.DevicePtr, src []byte) error {
	return o.dev.CopyHtoD(dst, src)
}

func (o *gpuOps) download(dst []byte, src cuda.DevicePtr) error {
	if err := o.sync(); err != nil {
		return err
	}
	return o.dev.CopyDtoH(dst, src)
}

func (o *gpuOps) do(fn func() error) error { return o.dev.Do(fn) }

func (o *gpuOps) gemm(g cublas.Gemm, batched bool) error {
	return o.dev.Do(func() error {
		if batched {
			return o.blas.GemmStridedBatchedEx(g)
		}
		return o.blas.GemmEx(g)
	})
}

func (o *gpuOps) reduce(out, base cuda.DevicePtr, strideBytes, w, count int) error {
	return o.red.ReduceStrided(gpu.Stream(o.stream), dtype.BF16, reduce.Native, out, base, strideBytes, w, count)
}

func (o *gpuOps) reduce2(out, a, b cuda.DevicePtr, count int) error {
	return o.red.Reduce(gpu.Stream(o.stream), dtype.BF16, reduce.Native, out, []cuda.DevicePtr{a, b}, count)
}

func (o *gpuOps) zero(p cuda.DevicePtr, n int) error {
	return o.dev.Do(func() error { return gpurt.MemsetD8Async(p, 0, n, o.stream) })
}

func (o *gpuOps) launch(f cuda.Function, total int) error {
	grid := (total + blockThreads - 1) / blockThreads
	grid = max(1, min(grid, o.maxBlocks))
	return o.dev.Do(func() error {
		return gpurt.LaunchKernel(f, cuda.Dim3{X: uint32(grid), Y: 1, Z: 1}, cuda.Dim3{X: blockThreads, Y: 1, Z: 1}, 0, o.stream, &o.args)
	})
}

func (o *gpuOps) swigluFwd(a, g, u cuda.DevicePtr, perBlock, blocks, stride int) error {
	if perBlock*blocks == 0 {
		return nil
	}
	o.args.Reset()
	o.args.Ptr(a).Ptr(g).Ptr(u).I64(int64(perBlock)).I64(int64(blocks)).I64(int64(stride))
	return o.launch(o.fwd, perBlock*blocks)
}

func (o *gpuOps) swigluBwd(dg, du, g, u, da cuda.DevicePtr, perBlock, blocks, stride int) error {
	if perBlock*blocks == 0 {
		return nil
	}
	o.args.Reset()
	o.args.Ptr(dg).Ptr(du).Ptr(g).Ptr(u).Ptr(da).I64(int64(perBlock)).I64(int64(blocks)).I64(int64(stride))
	return o.launch(o.bwd, perBlock*blocks)
}

func (o *gpuOps) allReduce(ctx context.Context, p cuda.DevicePtr, count int) error {
	if o.comm == nil {
		return nil
	}
	if o.native {
		return o.dev.Do(func() error {
			nc := nccl.WrapComm(o.comm.CCL())
			if nc == nil {
				return fmt.Errorf("gpuffn: no NCCL communicator: %w", o.comm.Err())
			}
			return nc.AllReduce(p, p, count, ccl.BFloat16, ccl.Sum, o.stream)
		})
	}
	buf := devcomm.Buffer{Ptr: p, Bytes: count * 2}
	return o.comm.AllReduce(ctx, buf, buf, count, dtype.BF16,
		devcomm.OnStream(devcomm.Stream(o.stream)), devcomm.WithAccumulate(detcoll.AccumulateNative))
}

func (o *gpuOps) setTiming(on bool) { o.timing = on }

func (o *gpuOps) event() (cuda.Event, error) {
	if o.used < len(o.events) {
		o.used++
		return o.events[o.used-1], nil
	}
	var e cuda.Event
	err := o.dev.Do(func() (err error) { e, err = cuda.EventCreate(gpurt.EventDefault); return err })
	if err != nil {
		return 0, err
	}
	o.events = append(o.events, e)
	o.used++
	return e, nil
}

func (o *gpuOps) record() (cuda.Event, error) {
	e, err := o.event()
	if err != nil {
		return 0, err
	}
	return e, o.dev.Do(func() error { return e.Record(o.stream) })
}

func noop() error { return nil }

func (o *gpuOps) span(name string, collective bool) func() error {
	if !o.timing {
		return noop
	}
	start, err := o.record()
	if err != nil {
		return func() error { return err }
	}
	return func() error {
		end, err := o.record()
		if err != nil {
			return err
		}
		o.spans = append(o.spans, spanRec{name: name, collective: collective, start: start, end: end})
		return nil
	}
}

func (o *gpuOps) timings() ([]Timing, error) {
	defer func() { o.used, o.spans = 0, o.spans[:0] }()
	if err := o.sync(); err != nil {
		return nil, err
	}
	out := make([]Timing, 0, len(o.spans))
	err := o.dev.Do(func() error {
		for _, s := range o.spans {
			ms, err := cuda.ElapsedTime(s.start, s.end)
			if err != nil {
				return fmt.Errorf("timing %s: %w", s.name, err)
			}
			out = append(out, Timing{Name: s.name, Collective: s.collective, Microseconds: float64(ms) * 1000})
		}
		return nil
	})
	return out, err
}

func (o *gpuOps) sync() error { return o.dev.Synchronize(gpu.Stream(o.stream)) }

func (o *gpuOps) close() error {
	var errs []error
	if o.stream != 0 {
		errs = append(errs, o.sync())
		if o.comm != nil {
			errs = append(errs, o.comm.ReleaseStream(devcomm.Stream(o.stream)))
		}
	}
	errs = append(errs, o.dev.Do(func() error {
		var errs []error
		if o.blas != 0 {
			errs = append(errs, o.blas.Destroy())
			o.blas = 0
		}
		for _, e := range o.events {
			errs = append(errs, e.Destroy())
		}
		o.events = nil
		if o.mod != 0 {
			errs = append(errs, o.mod.Unload())
			o.mod = 0
		}
		if o.stream != 0 {
			errs = append(errs, o.stream.Destroy())
			o.stream = 0
		}
		return errors.Join(errs...)
	}))
	if o.blasWS != 0 {
		errs = append(errs, o.dev.Free(o.blasWS))
		o.blasWS = 0
	}
	return errors.Join(errs...)
}
