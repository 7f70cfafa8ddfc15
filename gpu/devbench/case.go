package devbench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devcomm"
	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/internal/ccl"
)

type graphKey struct {
	native    bool
	symmetric bool
	inPlace   bool
	alg       detcoll.Algorithm
	acc       detcoll.Accumulate
	iters     int
}

type gpuCase struct {
	c      *devcomm.Comm
	dev    *gpu.Device
	spec   bench.CaseSpec
	count  int // the count argument: AllReduce and AllGather per-rank input, ReduceScatter output
	send   devcomm.Buffer
	recv   devcomm.Buffer
	nrecv  devcomm.Buffer
	start  devrt.Event
	stop   devrt.Event
	host   []byte
	nhost  []byte
	graphs map[graphKey]gpu.GraphExec

	natFree0 uint64
	natPeak  int

	// The symmetric-buffer baseline (SymmetricCase): ncclMemAlloc'd input
	// and output, registered as NCCL_WIN_COLL_SYMMETRIC windows on the
	// first run.
	ssend, srecv uint64
	swin         []*ccl.Window

	// The in-place buffer (bench.InPlaceCase): all_reduce the input's
	// size, all_gather the output's.
	inplace  devcomm.Buffer
	ihost    []byte
	detFree0 uint64
	detPeak  int
}

func (k *gpuCase) det(ctx context.Context, alg detcoll.Algorithm, acc detcoll.Accumulate) func() error {
	opts := []devcomm.CallOption{devcomm.WithAlgorithm(alg), devcomm.WithAccumulate(acc)}
	dt := k.spec.DType
	switch k.spec.Op {
	case bench.AllReduce:
		return func() error { return k.c.AllReduce(ctx, k.send, k.recv, k.count, dt, opts...) }
	case bench.AllGather:
		return func() error { return k.c.AllGather(ctx, k.send, k.recv, k.count, dt, opts...) }
	}
	return func() error { return k.c.ReduceScatter(ctx, k.send, k.recv, k.count, dt, opts...) }
}

func (k *gpuCase) native() (func() error, error) {
	return k.nativeOn(uint64(k.send.Ptr), uint64(k.nrecv.Ptr))
}

// nativeOn is the native collective from send into recv.
func (k *gpuCase) nativeOn(send, recv uint64) (func() error, error) {
	nc := k.c.CCL()
	if nc == nil {
		return nil, k.c.Err()
	}
	ndt, err := ccl.DataTypeOf(k.spec.DType)
	if err != nil {
		return nil, err
	}
	s := uintptr(k.c.Stream())
	n := k.count
	switch k.spec.Op {
	case bench.AllReduce:
		return func() error { return nc.AllReduce(send, recv, n, ndt, ccl.Sum, s) }, nil
	case bench.AllGather:
		return func() error { return nc.AllGather(send, recv, n, ndt, s) }, nil
	}
	return func() error { return nc.ReduceScatter(send, recv, n, ndt, ccl.Sum, s) }, nil
}

// PrepareSymmetric allocates the symmetric input and output with
// ncclMemAlloc and uploads the input; bench.ErrNoSymmetric when the loaded
// library lacks the window API (NCCL < 2.27, RCCL).
func (k *gpuCase) PrepareSymmetric(ctx context.Context) error {
	nc := k.c.CCL()
	if nc == nil {
		return k.c.Err()
	}
	if !nc.Lib().HasWindows() {
		return fmt.Errorf("%w: %s %s has no ncclCommWindowRegister", bench.ErrNoSymmetric, nc.Lib().Vendor(), k.c.NCCLVersion())
	}
	if k.ssend != 0 {
		return nil
	}
	in, out := k.spec.InputBytes, k.spec.OutputBytes()
	err := k.dev.Do(func() (err error) {
		if k.ssend, err = nc.Lib().MemAlloc(in); err != nil {
			return err
		}
		k.srecv, err = nc.Lib().MemAlloc(out)
		return err
	})
	if err == nil {
		err = k.dev.CopyHtoD(gpu.DevicePtr(k.ssend), bench.Input(k.spec, k.spec.Rank))
	}
	if err != nil {
		return fmt.Errorf("devbench: symmetric buffers: %w", err)
	}
	return nil
}

// register registers the symmetric buffers as windows (collective).
func (k *gpuCase) register() error {
	if k.swin != nil {
		return nil
	}
	nc := k.c.CCL()
	return k.dev.Do(func() error {
		for _, b := range []struct {
			p uint64
			n int
		}{{k.ssend, k.spec.InputBytes}, {k.srecv, k.spec.OutputBytes()}} {
			w, err := nc.WindowRegister(b.p, b.n, ccl.WinCollSymmetric)
			if err != nil {
				return fmt.Errorf("devbench: registering a symmetric window: %w", err)
			}
			k.swin = append(k.swin, w)
		}
		return nil
	})
}

// RunNativeSymmetric is RunNative on the registered symmetric buffers.
func (k *gpuCase) RunNativeSymmetric(ctx context.Context, iters int) (time.Duration, error) {
	if k.ssend == 0 {
		return 0, fmt.Errorf("devbench: symmetric buffers not prepared")
	}
	if err := k.register(); err != nil {
		return 0, err
	}
	one, err := k.nativeOn(k.ssend, k.srecv)
	if err != nil {
		return 0, err
	}
	d, err := k.run(graphKey{native: true, symmetric: true, iters: iters}, iters, func() error { return k.dev.Do(one) })
	if err != nil {
		return 0, fmt.Errorf("devbench: native %s on symmetric buffers: %w", k.spec.Op, err)
	}
	return d, nil
}

// InPlaceSupported: all_reduce and all_gather (detcoll's reduce-scatter is
// not in place).
func (k *gpuCase) InPlaceSupported() bool { return k.spec.Op != bench.ReduceScatter }

// ResetInPlace writes this rank's input into the in-place buffer (its own
// block of it for all_gather, the rest poisoned with 0xFF).
func (k *gpuCase) ResetInPlace() error {
	if !k.InPlaceSupported() {
		return fmt.Errorf("devbench: %s does not run in place", k.spec.Op)
	}
	if err := k.c.Synchronize(); err != nil {
		return err
	}
	if k.inplace.Ptr == 0 {
		b, err := k.c.Alloc(k.spec.OutputBytes())
		if err != nil {
			return fmt.Errorf("devbench: in-place buffer: %w", err)
		}
		k.inplace = b
		k.ihost = make([]byte, k.spec.OutputBytes())
	}
	off := 0
	if k.spec.Op == bench.AllGather {
		if err := k.dev.Memset(k.inplace.Ptr, 0xFF, k.inplace.Bytes); err != nil {
			return err
		}
		off = k.spec.Rank * k.spec.InputBytes
	}
	return k.dev.CopyDtoD(k.inplace.Ptr.Add(off), k.send.Ptr, k.spec.InputBytes)
}

// RunInPlace runs the deterministic collective in place.
func (k *gpuCase) RunInPlace(ctx context.Context, alg detcoll.Algorithm, acc detcoll.Accumulate, iters int) (time.Duration, error) {
	if k.inplace.Ptr == 0 {
		if err := k.ResetInPlace(); err != nil {
			return 0, err
		}
	}
	opts := []devcomm.CallOption{devcomm.WithAlgorithm(alg), devcomm.WithAccumulate(acc)}
	dt, buf := k.spec.DType, k.inplace
	one := func() error { return k.c.AllReduce(ctx, buf, buf, k.count, dt, opts...) }
	if k.spec.Op == bench.AllGather {
		mine := buf.Slice(k.spec.Rank*k.spec.InputBytes, k.spec.InputBytes)
		one = func() error { return k.c.AllGather(ctx, mine, buf, k.count, dt, opts...) }
	}
	return k.run(graphKey{inPlace: true, alg: alg, acc: acc, iters: iters}, iters, one)
}

// InPlaceOutput copies the in-place buffer to the host.
func (k *gpuCase) InPlaceOutput() ([]byte, error) {
	if err := k.c.Synchronize(); err != nil {
		return nil, err
	}
	return k.ihost, k.dev.CopyDtoH(k.ihost, k.inplace.Ptr)
}

// timed runs enqueue between two events on the stream and returns the
// elapsed device time divided by iters.
func (k *gpuCase) timed(iters int, enqueue func() error) (time.Duration, error) {
	if iters < 1 {
		return 0, fmt.Errorf("devbench: %d iterations", iters)
	}
	s := k.c.Stream()
	var ms float32
	err := k.dev.Do(func() error {
		rt := k.dev.Runtime()
		if err := rt.EventRecord(k.start, s); err != nil {
			return err
		}
		if err := enqueue(); err != nil {
			return err
		}
		if err := rt.EventRecord(k.stop, s); err != nil {
			return err
		}
		if err := rt.EventSynchronize(k.stop); err != nil {
			return err
		}
		var err error
		ms, err = rt.EventElapsed(k.start, k.stop)
		return err
	})
	return time.Duration(float64(ms) * 1e6 / float64(iters)), err
}

// run times iters calls of one, eagerly or as one launch of a cached graph.
func (k *gpuCase) run(key graphKey, iters int, one func() error) (time.Duration, error) {
	if !k.spec.Graph {
		return k.timed(iters, func() error {
			for i := 0; i < iters; i++ {
				if err := one(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	g, ok := k.graphs[key]
	if !ok {
		if err := one(); err != nil {
			return 0, err
		}
		if err := k.c.Synchronize(); err != nil {
			return 0, err
		}
		var err error
		g, err = k.dev.Capture(k.c.Stream(), func() error {
			for i := 0; i < iters; i++ {
				if err := one(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("devbench: capturing %d iterations: %w", iters, err)
		}
		k.graphs[key] = g
	}
	return k.timed(iters, func() error { return k.dev.Runtime().GraphLaunch(g, k.c.Stream()) })
}

func (k *gpuCase) freeMem() uint64 {
	free, _, err := k.dev.MemInfo()
	if err != nil {
		return 0
	}
	return free
}

func drop(before, now uint64) int {
	if before == 0 || now >= before {
		return 0
	}
	return int(before - now)
}

func (k *gpuCase) RunDeterministic(ctx context.Context, alg detcoll.Algorithm, acc detcoll.Accumulate, iters int) (time.Duration, error) {
	if k.detFree0 == 0 {
		k.detFree0 = k.freeMem()
	}
	d, err := k.run(graphKey{alg: alg, acc: acc, iters: iters}, iters, k.det(ctx, alg, acc))
	k.detPeak = max(k.detPeak, drop(k.detFree0, k.freeMem()))
	return d, err
}

func (k *gpuCase) RunNative(ctx context.Context, iters int) (time.Duration, error) {
	one, err := k.native()
	if err != nil {
		return 0, err
	}
	if k.natFree0 == 0 {
		k.natFree0 = k.freeMem()
	}
	wrapped := func() error { return k.dev.Do(one) }
	d, err := k.run(graphKey{native: true, iters: iters}, iters, wrapped)
	k.natPeak = max(k.natPeak, drop(k.natFree0, k.freeMem()))
	if err != nil {
		return 0, fmt.Errorf("devbench: native %s: %w", k.spec.Op, err)
	}
	return d, nil
}

func (k *gpuCase) ResetOutput() error {
	if err := k.c.Synchronize(); err != nil {
		return err
	}
	return k.dev.Memset(k.recv.Ptr, 0xFF, k.recv.Bytes)
}

func (k *gpuCase) Output() ([]byte, error) {
	if err := k.c.Synchronize(); err != nil {
		return nil, err
	}
	return k.host, k.dev.CopyDtoH(k.host, k.recv.Ptr)
}

func (k *gpuCase) NativeOutput() ([]byte, error) {
	if err := k.c.Synchronize(); err != nil {
		return nil, err
	}
	return k.nhost, k.dev.CopyDtoH(k.nhost, k.nrecv.Ptr)
}

// ReleaseWorkspace destroys the deterministic graphs (they use the
// workspace), frees the workspace and restarts the row's peaks.
func (k *gpuCase) ReleaseWorkspace() {
	_ = k.c.Synchronize()
	for key, g := range k.graphs {
		if !key.native {
			_ = k.dev.DestroyGraph(g)
			delete(k.graphs, key)
		}
	}
	_ = k.c.ReleaseWorkspace()
	k.detFree0 = k.freeMem()
	k.detPeak = 0
}

func (k *gpuCase) Workspace() (retained, peak int) {
	retained = k.c.Stats().WorkspaceBytes
	return retained, max(k.c.PeakSinceRelease(), k.detPeak, retained)
}

func (k *gpuCase) NativePeak() int { return k.natPeak }

func (k *gpuCase) Close() error {
	var errs []error
	errs = append(errs, k.c.Synchronize())
	for key, g := range k.graphs {
		errs = append(errs, k.dev.DestroyGraph(g))
		delete(k.graphs, key)
	}
	for _, w := range k.swin {
		errs = append(errs, k.dev.Do(w.Deregister))
	}
	k.swin = nil
	if nc := k.c.CCL(); nc != nil {
		for _, p := range []uint64{k.ssend, k.srecv} {
			if p != 0 {
				errs = append(errs, k.dev.Do(func() error { return nc.Lib().MemFree(p) }))
			}
		}
	}
	k.ssend, k.srecv = 0, 0
	for _, b := range []devcomm.Buffer{k.send, k.recv, k.nrecv, k.inplace} {
		if b.Ptr != 0 {
			errs = append(errs, k.c.Free(b))
		}
	}
	k.send, k.recv, k.nrecv, k.inplace = devcomm.Buffer{}, devcomm.Buffer{}, devcomm.Buffer{}, devcomm.Buffer{}
	errs = append(errs, k.dev.Do(func() error {
		return errors.Join(k.dev.Runtime().EventDestroy(k.start), k.dev.Runtime().EventDestroy(k.stop))
	}))
	k.start, k.stop = 0, 0
	return errors.Join(errs...)
}
