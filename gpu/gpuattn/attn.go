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
// o.size() ranks; bf16. Each step is a method of flow, in order: upload the
// shard and the index tables, all-gather and reorder Q, K, V and the
// positions, the core on the host, deliver this rank's rows of (out, lse),
// then the backward and the delivery of the root's gradients.
func run(ctx context.Context, o ops, in Inputs, heads, headDim int, scale float32) (res *Result, err error) {
	f, err := newFlow(o, in, heads, headDim, scale)
	if err != nil {
		return nil, err
	}
	defer func() {
		// download (or the last upload) has waited for the stream.
		if ferr := f.freeAll(); ferr != nil && err == nil {
			err = ferr
		}
	}()
	if err := f.upload(in); err != nil {
		return nil, err
	}
	if err := f.gatherForward(ctx); err != nil {
		return nil, err
	}
	if err := f.core(); err != nil {
		return nil, err
	}
	res = &Result{FullOut: f.O.Bytes(), FullLSE: f.L.Bytes()}
	if res.Out, res.LSE, err = f.shardOutputs(); err != nil {
		return nil, err
	}
	dQ, dK, dV, err := f.backward(ctx)
	if err != nil {
		return nil, err
	}
	grads, err := f.deliverGrads(ctx, dQ, dK, dV)
	if err != nil {
		return nil, err
	}
	for i, dst := range []*[]byte{&res.DQ, &res.DK, &res.DV} {
		if *dst, err = f.get(grads[i], f.shardB); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// flow is one run's state: sizes, device buffers (freed at the end), the
// index tables and the host matrices of the core.
type flow struct {
	o                   ops
	w, rank             int
	per, n, width       int
	heads, headDim      int
	scale               float32
	rowB, lseRowB       int
	shardB              int
	inv, order, mine    []int32
	allocs              []DevicePtr
	q, k, v, pos, dout  DevicePtr // this rank's shard
	dInv, dOrder, dMine DevicePtr // the index tables
	lq, lk, lv, lpos    DevicePtr // the whole sequence, in sequence order
	Q, K, V, O, L       *parallel.Matrix
	P                   []int32
}

func newFlow(o ops, in Inputs, heads, headDim int, scale float32) (*flow, error) {
	f := &flow{o: o, w: o.size(), rank: o.rank(), per: len(in.Pos), heads: heads, headDim: headDim, scale: scale}
	f.n, f.width = f.w*f.per, heads*headDim
	f.rowB, f.lseRowB = 2*f.width, 4*heads
	f.shardB = f.per * f.rowB
	for _, b := range [][]byte{in.Q, in.K, in.V, in.DOut} {
		if len(b) != f.shardB {
			return nil, fmt.Errorf("gpuattn: %d bytes for a %d×%d bf16 shard", len(b), f.per, f.width)
		}
	}
	if f.w > 1 && f.per%2 != 0 {
		return nil, fmt.Errorf("gpuattn: %d tokens per rank; the zigzag layout needs an even number", f.per)
	}
	var err error
	f.inv, f.order, f.mine, err = layout(f.w, f.rank, f.per)
	return f, err
}

func (f *flow) alloc(bytes int) (DevicePtr, error) {
	p, err := f.o.alloc(bytes)
	if err == nil {
		f.allocs = append(f.allocs, p)
	}
	return p, err
}

func (f *flow) put(src []byte) (DevicePtr, error) {
	p, err := f.alloc(len(src))
	if err == nil {
		err = f.o.upload(p, src)
	}
	return p, err
}

func (f *flow) get(p DevicePtr, bytes int) ([]byte, error) {
	b := make([]byte, bytes)
	return b, f.o.download(b, p)
}

func (f *flow) freeAll() error {
	var first error
	for _, p := range f.allocs {
		if err := f.o.free(p); err != nil && first == nil {
			first = err
		}
	}
	f.allocs = nil
	return first
}

// mat downloads the whole-sequence matrix at p.
func (f *flow) mat(p DevicePtr) (*parallel.Matrix, error) {
	b, err := f.get(p, f.n*f.rowB)
	if err != nil {
		return nil, err
	}
	return parallel.MatrixFromBytes(dtype.BF16, f.n, f.width, b)
}

// upload puts this rank's shard and the index tables on the device.
func (f *flow) upload(in Inputs) error {
	for _, x := range []struct {
		p   *DevicePtr
		src []byte
	}{{&f.q, in.Q}, {&f.k, in.K}, {&f.v, in.V}, {&f.pos, int32Bytes(in.Pos)}, {&f.dout, in.DOut},
		{&f.dInv, int32Bytes(f.inv)}, {&f.dOrder, int32Bytes(f.order)}, {&f.dMine, int32Bytes(f.mine)}} {
		var err error
		if *x.p, err = f.put(x.src); err != nil {
			return err
		}
	}
	return nil
}

// gatherForward is the rank-ordered all-gather of Q, K, V and positions
// (bytes), then zigzag → sequence order.
func (f *flow) gatherForward(ctx context.Context) error {
	n, rowB, shardB, per := f.n, f.rowB, f.shardB, f.per
	gq, gk, gv, gpos := f.q, f.k, f.v, f.pos
	var err error
	if f.w > 1 {
		for _, p := range []*DevicePtr{&gq, &gk, &gv} {
			if *p, err = f.alloc(n * rowB); err != nil {
				return err
			}
		}
		if gpos, err = f.alloc(4 * n); err != nil {
			return err
		}
		sends := []devcomm.Buffer{{Ptr: f.q, Bytes: shardB}, {Ptr: f.k, Bytes: shardB}, {Ptr: f.v, Bytes: shardB}, {Ptr: f.pos, Bytes: 4 * per}}
		recvs := []devcomm.Buffer{{Ptr: gq, Bytes: n * rowB}, {Ptr: gk, Bytes: n * rowB}, {Ptr: gv, Bytes: n * rowB}, {Ptr: gpos, Bytes: 4 * n}}
		if err := f.o.allGatherBytes(ctx, sends, recvs, []int{shardB, shardB, shardB, 4 * per}); err != nil {
			return fmt.Errorf("gpuattn: CP all-gather of Q, K, V and positions: %w", err)
		}
	}
	for _, x := range []struct {
		dst      *DevicePtr
		src      DevicePtr
		rowBytes int
	}{{&f.lq, gq, rowB}, {&f.lk, gk, rowB}, {&f.lv, gv, rowB}, {&f.lpos, gpos, 4}} {
		if *x.dst, err = f.alloc(n * x.rowBytes); err != nil {
			return err
		}
		if err := f.o.gatherRows(*x.dst, x.src, f.dInv, n, x.rowBytes); err != nil {
			return err
		}
	}
	return nil
}

// core runs the attention core on the host, over the whole sequence (the
// same on every rank).
func (f *flow) core() error {
	var err error
	for _, x := range []struct {
		m **parallel.Matrix
		p DevicePtr
	}{{&f.Q, f.lq}, {&f.K, f.lk}, {&f.V, f.lv}} {
		if *x.m, err = f.mat(x.p); err != nil {
			return err
		}
	}
	pb, err := f.get(f.lpos, 4*f.n)
	if err != nil {
		return err
	}
	f.P = make([]int32, f.n)
	for i := range f.P {
		f.P[i] = int32(binary.LittleEndian.Uint32(pb[4*i:]))
	}
	f.O, f.L, err = parallel.AttentionCore(f.Q, f.K, f.V, f.P, f.heads, f.headDim, f.scale)
	return err
}

// shardOutputs is this rank's shard of (out, lse): its rows of its own core
// output, which is bit for bit the root's (see the package doc), so no
// Scatter.
func (f *flow) shardOutputs() (out, lse []byte, err error) {
	for _, x := range []struct {
		res     *[]byte
		full    []byte
		rowSize int
	}{{&out, f.O.Bytes(), f.rowB}, {&lse, f.L.Bytes(), f.lseRowB}} {
		full, err := f.put(x.full)
		if err != nil {
			return nil, nil, err
		}
		shard, err := f.alloc(f.per * x.rowSize)
		if err != nil {
			return nil, nil, err
		}
		if err := f.o.gatherRows(shard, full, f.dMine, f.per, x.rowSize); err != nil {
			return nil, nil, err
		}
		if *x.res, err = f.get(shard, f.per*x.rowSize); err != nil {
			return nil, nil, err
		}
	}
	return out, lse, nil
}

// backward is the all-gather of the output gradient, the reorder and the
// core backward.
func (f *flow) backward(ctx context.Context) (dQ, dK, dV *parallel.Matrix, err error) {
	n, rowB := f.n, f.rowB
	gdo := f.dout
	if f.w > 1 {
		if gdo, err = f.alloc(n * rowB); err != nil {
			return nil, nil, nil, err
		}
		err := f.o.allGatherBytes(ctx, []devcomm.Buffer{{Ptr: f.dout, Bytes: f.shardB}}, []devcomm.Buffer{{Ptr: gdo, Bytes: n * rowB}}, []int{f.shardB})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("gpuattn: CP all-gather of the output gradient: %w", err)
		}
	}
	ldo, err := f.alloc(n * rowB)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := f.o.gatherRows(ldo, gdo, f.dInv, n, rowB); err != nil {
		return nil, nil, nil, err
	}
	DO, err := f.mat(ldo)
	if err != nil {
		return nil, nil, nil, err
	}
	return parallel.AttentionCoreBackward(f.Q, f.K, f.V, f.O, f.L, DO, f.P, f.heads, f.headDim, f.scale)
}

// deliverGrads delivers the root's gradients: at CP = 1 this rank's rows;
// at CP = W one three-lane reduce-scatter, the root's gradients in the
// ranks' rank-ordered zigzag blocks, every other rank -0.
func (f *flow) deliverGrads(ctx context.Context, dQ, dK, dV *parallel.Matrix) ([]DevicePtr, error) {
	grads := make([]DevicePtr, 3)
	var err error
	for i := range grads {
		if grads[i], err = f.alloc(f.shardB); err != nil {
			return nil, err
		}
	}
	ms := []*parallel.Matrix{dQ, dK, dV}
	if f.w == 1 {
		for i, m := range ms {
			full, err := f.put(m.Bytes())
			if err != nil {
				return nil, err
			}
			if err := f.o.gatherRows(grads[i], full, f.dMine, f.per, f.rowB); err != nil {
				return nil, err
			}
		}
		return grads, nil
	}
	sends := make([]devcomm.Buffer, 3)
	recvs := make([]devcomm.Buffer, 3)
	for i, m := range ms {
		send, err := f.gradSend(m)
		if err != nil {
			return nil, err
		}
		sends[i] = devcomm.Buffer{Ptr: send, Bytes: f.n * f.rowB}
		recvs[i] = devcomm.Buffer{Ptr: grads[i], Bytes: f.shardB}
	}
	lane := f.per * f.width
	if err := f.o.reduceScatterBF16(ctx, sends, recvs, []int{lane, lane, lane}); err != nil {
		return nil, fmt.Errorf("gpuattn: CP reduce-scatter of dQ, dK and dV: %w", err)
	}
	return grads, nil
}

// gradSend is this rank's input of the gradient reduce-scatter: on the
// root its gradient in rank-ordered zigzag rows, elsewhere -0.
func (f *flow) gradSend(m *parallel.Matrix) (DevicePtr, error) {
	if f.rank != 0 {
		return f.put(negZeroBF16(f.n * f.rowB))
	}
	full, err := f.put(m.Bytes())
	if err != nil {
		return 0, err
	}
	send, err := f.alloc(f.n * f.rowB)
	if err != nil {
		return 0, err
	}
	return send, f.o.gatherRows(send, full, f.dOrder, f.n, f.rowB)
}
