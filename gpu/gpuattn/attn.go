package gpuattn

import (
	"context"
	"encoding/binary"
	"fmt"

	_ "embed"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devcomm"
	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/parallel"
)

// GatherRowsSource is the CUDA C source of the row-gather kernel (compiled
// by NVRTC on NVIDIA and by hiprtc on AMD).
//
//go:embed kernels/gather_rows.cu
var GatherRowsSource string

const (
	kernelGather = "detcoll_gather_rows"
	blockThreads = 256
)

// BackendName is the name of the CP ag_rs backend on a device of vendor
// ("cuda" or "rocm", as gpu.Device.Vendor and devrt.Runtime.Vendor report
// it), as package parallel names the host path: cuda_ag_rs (NCCL moves the
// bytes) or rccl_ag_rs (RCCL moves them). Another vendor is an error.
func BackendName(vendor string) (parallel.Backend, error) {
	switch vendor {
	case "cuda":
		return parallel.CUDAAgRs, nil
	case "rocm":
		return parallel.RCCLAgRs, nil
	}
	return "", fmt.Errorf("gpuattn: no ag_rs backend for GPU vendor %q (want cuda or rocm)", vendor)
}

// DevicePtr is a device address of the vendor's runtime.
type DevicePtr = gpu.DevicePtr

// ops is what the flow does to a device: the GPU (gpuOps) or a host
// emulation in the tests. Enqueueing methods are ordered on one stream;
// download waits for that stream.
type ops interface {
	rank() int
	size() int // 1: no collectives
	alloc(bytes int) (DevicePtr, error)
	free(p DevicePtr) error
	upload(dst DevicePtr, src []byte) error
	download(dst []byte, src DevicePtr) error
	// gatherRows: dst row i = src row idx[i], idx int32 on the device.
	gatherRows(dst, src, idx DevicePtr, rows, rowBytes int) error
	allGatherBytes(ctx context.Context, sends, recvs []devcomm.Buffer, counts []int) error
	reduceScatterBF16(ctx context.Context, sends, recvs []devcomm.Buffer, counts []int) error
}

// gpuOps runs the flow on one GPU: the communicator's stream at CP = W,
// an own stream at CP = 1 (comm nil).
type gpuOps struct {
	dev       *gpu.Device
	comm      *devcomm.Comm
	rt        devrt.Runtime
	stream    gpu.Stream
	own       bool
	mod       devrt.Module
	fn        devrt.Function
	maxBlocks int
	args      devrt.Args
}

// newGPUOps opens the flow on comm's device (CP = comm's size) or, with
// comm nil, on dev alone (CP = 1).
func newGPUOps(dev *gpu.Device, comm *devcomm.Comm) (*gpuOps, error) {
	o := &gpuOps{dev: dev, comm: comm}
	if comm != nil {
		o.dev, o.stream = comm.Device(), gpu.Stream(comm.Stream())
	}
	o.rt = o.dev.Runtime()
	o.args = o.rt.NewArgs()
	if err := o.load(); err != nil {
		return nil, err
	}
	if comm == nil {
		s, err := o.dev.NewStream()
		if err != nil {
			_ = o.close()
			return nil, err
		}
		o.stream, o.own = s, true
	}
	o.maxBlocks = max(1, o.dev.Multiprocessors()*2048/blockThreads)
	return o, nil
}

// load compiles (NVRTC or hiprtc, through the device's runtime; cached) and
// loads the row-gather kernel.
func (o *gpuOps) load() error {
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		prog, err := o.rt.Build(GatherRowsSource, "detcoll_gather_rows.cu", o.dev.Props())
		if err != nil {
			return fmt.Errorf("gpuattn: compiling the row-gather kernel: %w", err)
		}
		last = o.dev.Do(func() error {
			m, err := o.rt.ModuleLoad(prog.Image)
			if err != nil {
				return err
			}
			f, err := o.rt.ModuleFunction(m, kernelGather)
			if err != nil {
				_ = o.rt.ModuleUnload(m)
				return err
			}
			o.mod, o.fn = m, f
			return nil
		})
		if last == nil {
			return nil
		}
		if prog.Compiled {
			break
		}
		o.rt.Invalidate(prog.Key)
	}
	return fmt.Errorf("gpuattn: loading the row-gather kernel: %w", last)
}

func (o *gpuOps) close() error {
	var first error
	if o.own && o.stream != 0 {
		if err := o.dev.Synchronize(o.stream); err != nil && first == nil {
			first = err
		}
		if err := o.dev.DestroyStream(o.stream); err != nil && first == nil {
			first = err
		}
		o.stream = 0
	}
	if o.mod != 0 {
		if err := o.dev.Do(func() error { return o.rt.ModuleUnload(o.mod) }); err != nil && first == nil {
			first = err
		}
		o.mod = 0
	}
	return first
}

func (o *gpuOps) rank() int {
	if o.comm == nil {
		return 0
	}
	return o.comm.Rank()
}

func (o *gpuOps) size() int {
	if o.comm == nil {
		return 1
	}
	return o.comm.Size()
}

func (o *gpuOps) alloc(n int) (DevicePtr, error) { return o.dev.Alloc(n) }
func (o *gpuOps) free(p DevicePtr) error         { return o.dev.Free(p) }

// upload waits for the stream first (the buffer may be in use by enqueued
// work), then copies synchronously.
func (o *gpuOps) upload(dst DevicePtr, src []byte) error {
	if err := o.dev.Synchronize(o.stream); err != nil {
		return err
	}
	return o.dev.CopyHtoD(dst, src)
}

func (o *gpuOps) download(dst []byte, src DevicePtr) error {
	if err := o.dev.Synchronize(o.stream); err != nil {
		return err
	}
	return o.dev.CopyDtoH(dst, src)
}

func (o *gpuOps) gatherRows(dst, src, idx DevicePtr, rows, rowBytes int) error {
	total := rows * rowBytes
	if total == 0 {
		return nil
	}
	grid := max(1, min((total+blockThreads-1)/blockThreads, o.maxBlocks))
	o.args.Reset()
	o.args.Ptr(dst).Ptr(src).Ptr(idx).I64(int64(rows)).I64(int64(rowBytes))
	return o.dev.Do(func() error {
		return o.rt.Launch(o.fn, devrt.Dim3{X: uint32(grid), Y: 1, Z: 1}, devrt.Dim3{X: blockThreads, Y: 1, Z: 1}, 0, o.stream, o.args)
	})
}

func (o *gpuOps) allGatherBytes(ctx context.Context, sends, recvs []devcomm.Buffer, counts []int) error {
	return o.comm.AllGatherMany(ctx, sends, recvs, counts, dtype.Byte, devcomm.OnStream(devcomm.Stream(o.stream)))
}

func (o *gpuOps) reduceScatterBF16(ctx context.Context, sends, recvs []devcomm.Buffer, counts []int) error {
	return o.comm.ReduceScatterMany(ctx, sends, recvs, counts, dtype.BF16,
		devcomm.OnStream(devcomm.Stream(o.stream)), devcomm.WithAccumulate(detcoll.AccumulateNative))
}

// Inputs are one rank's shard: its tokens in its local (zigzag) order.
type Inputs struct {
	Q, K, V, DOut []byte // bf16, tokens × heads·head_dim
	Pos           []int32
}

// Result is one rank's shard of the outputs (raw bytes, local order), and
// this rank's whole-sequence core output (sequence order), the same on every
// rank.
type Result struct {
	Out, LSE, DQ, DK, DV []byte
	FullOut, FullLSE     []byte
}

// layout returns, for CP = w ranks of per tokens each (n = w·per):
// inv[l] = the row of the rank-ordered all-gather that holds logical row l;
// order[g] = the logical row at row g of the rank-ordered all-gather;
// mine = this rank's logical rows in local order.
func layout(w, rank, per int) (inv, order, mine []int32, err error) {
	n := w * per
	sh := parallel.Sharding{Layout: parallel.Zigzag, CP: w, SP: 1}
	inv, order = make([]int32, n), make([]int32, 0, n)
	for r := 0; r < w; r++ {
		rows, err := sh.Rows(n, r, 0)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, l := range rows {
			inv[l] = int32(len(order))
			order = append(order, int32(l))
			if r == rank {
				mine = append(mine, int32(l))
			}
		}
	}
	return inv, order, mine, nil
}

func int32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

// negZeroBF16 is n bytes of bf16 -0 (0x8000, little-endian).
func negZeroBF16(n int) []byte {
	b := make([]byte, n)
	for i := 1; i < n; i += 2 {
		b[i] = 0x80
	}
	return b
}

// run is the CP ag_rs attention flow (forward, then backward) on o, over
// o.size() ranks; bf16.
func run(ctx context.Context, o ops, in Inputs, heads, headDim int, scale float32) (res *Result, err error) {
	w, rank := o.size(), o.rank()
	per := len(in.Pos)
	n := w * per
	width := heads * headDim
	rowB, lseRowB := 2*width, 4*heads
	shardB := per * rowB
	for _, b := range [][]byte{in.Q, in.K, in.V, in.DOut} {
		if len(b) != shardB {
			return nil, fmt.Errorf("gpuattn: %d bytes for a %d×%d bf16 shard", len(b), per, width)
		}
	}
	if w > 1 && per%2 != 0 {
		return nil, fmt.Errorf("gpuattn: %d tokens per rank; the zigzag layout needs an even number", per)
	}
	inv, order, mine, err := layout(w, rank, per)
	if err != nil {
		return nil, err
	}

	var allocs []DevicePtr
	defer func() {
		// download (or the last upload) has waited for the stream.
		for _, p := range allocs {
			if ferr := o.free(p); ferr != nil && err == nil {
				err = ferr
			}
		}
	}()
	alloc := func(bytes int) (DevicePtr, error) {
		p, err := o.alloc(bytes)
		if err == nil {
			allocs = append(allocs, p)
		}
		return p, err
	}
	put := func(src []byte) (DevicePtr, error) {
		p, err := alloc(len(src))
		if err == nil {
			err = o.upload(p, src)
		}
		return p, err
	}
	get := func(p DevicePtr, bytes int) ([]byte, error) {
		b := make([]byte, bytes)
		return b, o.download(b, p)
	}

	// This rank's shard and the index tables on the device.
	var q, k, v, pos, dout, dInv, dOrder, dMine DevicePtr
	for _, x := range []struct {
		p   *DevicePtr
		src []byte
	}{{&q, in.Q}, {&k, in.K}, {&v, in.V}, {&pos, int32Bytes(in.Pos)}, {&dout, in.DOut},
		{&dInv, int32Bytes(inv)}, {&dOrder, int32Bytes(order)}, {&dMine, int32Bytes(mine)}} {
		if *x.p, err = put(x.src); err != nil {
			return nil, err
		}
	}

	// Forward: rank-ordered all-gather of Q, K, V and positions (bytes),
	// then zigzag → sequence order.
	gq, gk, gv, gpos := q, k, v, pos
	if w > 1 {
		for _, p := range []*DevicePtr{&gq, &gk, &gv} {
			if *p, err = alloc(n * rowB); err != nil {
				return nil, err
			}
		}
		if gpos, err = alloc(4 * n); err != nil {
			return nil, err
		}
		sends := []devcomm.Buffer{{Ptr: q, Bytes: shardB}, {Ptr: k, Bytes: shardB}, {Ptr: v, Bytes: shardB}, {Ptr: pos, Bytes: 4 * per}}
		recvs := []devcomm.Buffer{{Ptr: gq, Bytes: n * rowB}, {Ptr: gk, Bytes: n * rowB}, {Ptr: gv, Bytes: n * rowB}, {Ptr: gpos, Bytes: 4 * n}}
		if err := o.allGatherBytes(ctx, sends, recvs, []int{shardB, shardB, shardB, 4 * per}); err != nil {
			return nil, fmt.Errorf("gpuattn: CP all-gather of Q, K, V and positions: %w", err)
		}
	}
	var lq, lk, lv, lpos DevicePtr
	for _, x := range []struct {
		dst      *DevicePtr
		src      DevicePtr
		rowBytes int
	}{{&lq, gq, rowB}, {&lk, gk, rowB}, {&lv, gv, rowB}, {&lpos, gpos, 4}} {
		if *x.dst, err = alloc(n * x.rowBytes); err != nil {
			return nil, err
		}
		if err := o.gatherRows(*x.dst, x.src, dInv, n, x.rowBytes); err != nil {
			return nil, err
		}
	}

	// The core on the host, over the whole sequence (the same on every rank).
	mat := func(p DevicePtr) (*parallel.Matrix, error) {
		b, err := get(p, n*rowB)
		if err != nil {
			return nil, err
		}
		return parallel.MatrixFromBytes(dtype.BF16, n, width, b)
	}
	Q, err := mat(lq)
	if err != nil {
		return nil, err
	}
	K, err := mat(lk)
	if err != nil {
		return nil, err
	}
	V, err := mat(lv)
	if err != nil {
		return nil, err
	}
	pb, err := get(lpos, 4*n)
	if err != nil {
		return nil, err
	}
	P := make([]int32, n)
	for i := range P {
		P[i] = int32(binary.LittleEndian.Uint32(pb[4*i:]))
	}
	O, L, err := parallel.AttentionCore(Q, K, V, P, heads, headDim, scale)
	if err != nil {
		return nil, err
	}
	res = &Result{FullOut: O.Bytes(), FullLSE: L.Bytes()}

	// This rank's shard of (out, lse): its rows of its own core output, which
	// is bit for bit the root's (see the package doc), so no Scatter.
	fo, err := put(O.Bytes())
	if err != nil {
		return nil, err
	}
	fl, err := put(L.Bytes())
	if err != nil {
		return nil, err
	}
	so, err := alloc(shardB)
	if err != nil {
		return nil, err
	}
	sl, err := alloc(per * lseRowB)
	if err != nil {
		return nil, err
	}
	if err := o.gatherRows(so, fo, dMine, per, rowB); err != nil {
		return nil, err
	}
	if err := o.gatherRows(sl, fl, dMine, per, lseRowB); err != nil {
		return nil, err
	}
	if res.Out, err = get(so, shardB); err != nil {
		return nil, err
	}
	if res.LSE, err = get(sl, per*lseRowB); err != nil {
		return nil, err
	}

	// Backward: all-gather of the output gradient, reorder, core backward.
	gdo := dout
	if w > 1 {
		if gdo, err = alloc(n * rowB); err != nil {
			return nil, err
		}
		err := o.allGatherBytes(ctx, []devcomm.Buffer{{Ptr: dout, Bytes: shardB}}, []devcomm.Buffer{{Ptr: gdo, Bytes: n * rowB}}, []int{shardB})
		if err != nil {
			return nil, fmt.Errorf("gpuattn: CP all-gather of the output gradient: %w", err)
		}
	}
	ldo, err := alloc(n * rowB)
	if err != nil {
		return nil, err
	}
	if err := o.gatherRows(ldo, gdo, dInv, n, rowB); err != nil {
		return nil, err
	}
	DO, err := mat(ldo)
	if err != nil {
		return nil, err
	}
	dQ, dK, dV, err := parallel.AttentionCoreBackward(Q, K, V, O, L, DO, P, heads, headDim, scale)
	if err != nil {
		return nil, err
	}

	// Delivery of the root's gradients: at CP = 1 this rank's rows; at CP = W
	// one three-lane reduce-scatter, the root's gradients in the ranks'
	// rank-ordered zigzag blocks, every other rank -0.
	grads := make([]DevicePtr, 3)
	for i := range grads {
		if grads[i], err = alloc(shardB); err != nil {
			return nil, err
		}
	}
	if w == 1 {
		for i, m := range []*parallel.Matrix{dQ, dK, dV} {
			full, err := put(m.Bytes())
			if err != nil {
				return nil, err
			}
			if err := o.gatherRows(grads[i], full, dMine, per, rowB); err != nil {
				return nil, err
			}
		}
	} else {
		sends := make([]devcomm.Buffer, 3)
		recvs := make([]devcomm.Buffer, 3)
		for i, m := range []*parallel.Matrix{dQ, dK, dV} {
			var send DevicePtr
			if rank == 0 {
				full, err := put(m.Bytes())
				if err != nil {
					return nil, err
				}
				if send, err = alloc(n * rowB); err != nil {
					return nil, err
				}
				if err := o.gatherRows(send, full, dOrder, n, rowB); err != nil {
					return nil, err
				}
			} else if send, err = put(negZeroBF16(n * rowB)); err != nil {
				return nil, err
			}
			sends[i] = devcomm.Buffer{Ptr: send, Bytes: n * rowB}
			recvs[i] = devcomm.Buffer{Ptr: grads[i], Bytes: shardB}
		}
		if err := o.reduceScatterBF16(ctx, sends, recvs, []int{per * width, per * width, per * width}); err != nil {
			return nil, fmt.Errorf("gpuattn: CP reduce-scatter of dQ, dK and dV: %w", err)
		}
	}
	for i, dst := range []*[]byte{&res.DQ, &res.DK, &res.DV} {
		if *dst, err = get(grads[i], shardB); err != nil {
			return nil, err
		}
	}
	return res, nil
}
