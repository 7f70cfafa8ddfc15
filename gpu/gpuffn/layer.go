package gpuffn

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devcomm"
	"github.com/detcoll/detcoll/internal/cublas"
	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/parallel"
)

// Config configures a Layer.
type Config struct {
	Hidden       int // H
	Intermediate int // I, the full size: each of TP ranks holds I/TP
	// Chunks is L, the number of canonical K chunks (0: parallel.DefaultChunks
	// = 8). I must divide by L, L by TP, and L/TP must be a power of two.
	Chunks int
	// Pedantic selects CUBLAS_PEDANTIC_MATH with CUBLAS_COMPUTE_32F_PEDANTIC
	// instead of CUBLAS_DEFAULT_MATH with CUBLAS_COMPUTE_32F (both with
	// CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION). Either keeps the TP
	// invariance; the bits may differ between the two.
	Pedantic bool
	// NativeCollectives replaces detcoll's deterministic all-reduce by
	// NCCL's own ncclAllReduce (sum) on the same buffers: a performance
	// reference only. NCCL's reduction order is not detcoll's tree (with
	// two ranks a two-term sum is the same either way; with more ranks the
	// TP invariance is lost).
	NativeCollectives bool
}

func (c Config) compute() cublas.ComputeType {
	if c.Pedantic {
		return cublas.Compute32FPedantic
	}
	return cublas.Compute32F
}

// math is the handle's math mode. Reductions inside cuBLAS (split-K) stay
// in the float32 accumulator type, never in the bf16 output type.
func (c Config) math() cublas.Math {
	if c.Pedantic {
		return cublas.PedanticMath | cublas.DisallowReducedPrecisionReduction
	}
	return cublas.DefaultMath | cublas.DisallowReducedPrecisionReduction
}

// Weights are one TP rank's weight shards on the device: Gate and Up are
// columns [t·I/TP, (t+1)·I/TP) of the full [H × I] matrices in L/TP column
// blocks of I/L, Down the same rows of the full [I × H] one in L/TP row
// blocks (Layer.UploadWeights makes them).
type Weights struct {
	Gate, Up, Down *Tensor
}

// Saved is what Forward keeps for Backward: x (borrowed from the caller,
// who keeps it alive until Backward), and the activations g = x·Gate,
// u = x·Up and a = silu(g)⊙u, [tokens × I/TP] in column blocks. Free it with
// Layer.FreeSaved.
type Saved struct {
	X       *Tensor
	G, U, A *Tensor
}

// Grads are Backward's results: X [tokens × H] (identical on every TP
// rank), and the gradients of this rank's weight shards, laid out like
// Weights.
type Grads struct {
	X, Gate, Up, Down *Tensor
}

// Timing is the device time of one phase of a layer call, from CUDA events
// recorded on the layer's stream around it.
type Timing struct {
	Name         string
	Collective   bool
	Microseconds float64
}

// Layer is one rank's GPU SwiGLU FFN at one TP size. Its methods are safe
// for concurrent use but serialise; every rank of the TP group calls
// Forward and Backward in the same order (they contain collectives).
type Layer struct {
	mu       sync.Mutex
	cfg      Config
	tp, rank int
	nb       int // block width I/L
	nl       int // blocks (canonical chunks) per rank: L/TP
	ops      ops
	ws       cuda.DevicePtr
	wsBytes  int
	closed   bool
}

// New returns the layer of this rank on dev. With comm (the TP group's
// device communicator), TP = comm.Size() and this rank holds TP shard
// comm.Rank(); dev may then be nil (comm's device is used) or must be it.
// Without comm, TP = 1: the whole layer on dev with no communication.
func New(dev *gpu.Device, comm *devcomm.Comm, cfg Config) (*Layer, error) {
	tp, rank := 1, 0
	if comm != nil {
		tp, rank = comm.Size(), comm.Rank()
		if dev == nil {
			dev = comm.Device()
		} else if dev != comm.Device() {
			return nil, fmt.Errorf("%w: gpuffn.New: the device is not the communicator's", parallel.ErrInvalidArgument)
		}
	}
	if dev == nil {
		return nil, fmt.Errorf("%w: gpuffn.New: no device", parallel.ErrInvalidArgument)
	}
	l, err := newLayer(cfg, tp, rank)
	if err != nil {
		return nil, err
	}
	o, err := newGPUOps(dev, comm, l.cfg)
	if err != nil {
		return nil, err
	}
	l.ops = o
	return l, nil
}

// newLayer validates the configuration; ops is set by the caller.
func newLayer(cfg Config, tp, rank int) (*Layer, error) {
	if cfg.Chunks == 0 {
		cfg.Chunks = parallel.DefaultChunks
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: gpuffn: %s", parallel.ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	l := cfg.Chunks
	switch {
	case cfg.Hidden < 1 || cfg.Intermediate < 1:
		return nil, bad("hidden %d, intermediate %d", cfg.Hidden, cfg.Intermediate)
	case l < 1:
		return nil, bad("%d canonical chunks", l)
	case cfg.Intermediate%l != 0:
		return nil, bad("intermediate size %d does not divide into %d canonical chunks", cfg.Intermediate, l)
	case tp < 1 || rank < 0 || rank >= tp:
		return nil, bad("rank %d of TP %d", rank, tp)
	case l%tp != 0 || (l/tp)&(l/tp-1) != 0:
		return nil, bad("TP = %d cannot hold the %d canonical K chunks in power-of-two blocks (L/TP must be a power of two; L = 8 serves TP = 1, 2, 4, 8)", tp, l)
	}
	return &Layer{cfg: cfg, tp: tp, rank: rank, nb: cfg.Intermediate / l, nl: l / tp}, nil
}

// TP is the tensor-parallel size; Rank this layer's TP rank.
func (l *Layer) TP() int   { return l.tp }
func (l *Layer) Rank() int { return l.rank }

// Config is the configuration (Chunks filled in).
func (l *Layer) Config() Config { return l.cfg }

func (l *Layer) usable(op string) error {
	if l.closed {
		return fmt.Errorf("gpuffn: %s: layer closed", op)
	}
	return nil
}

// NewTensor allocates an uninitialised tensor (see Tensor for blocks).
func (l *Layer) NewTensor(rows, cols, blocks int, columnBlocks bool) (*Tensor, error) {
	t, err := layout(rows, cols, blocks, columnBlocks)
	if err != nil {
		return nil, err
	}
	if t.ptr, err = l.ops.alloc(t.bytes()); err != nil {
		return nil, err
	}
	return t, nil
}

// Upload copies a host bf16 matrix to a new tensor with the given blocks.
func (l *Layer) Upload(m *parallel.Matrix, blocks int, columnBlocks bool) (*Tensor, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: gpuffn.Upload of a nil matrix", parallel.ErrInvalidArgument)
	}
	t, err := layout(m.Rows(), m.Cols(), blocks, columnBlocks)
	if err != nil {
		return nil, err
	}
	b, err := t.pack(m)
	if err != nil {
		return nil, err
	}
	if t.ptr, err = l.ops.alloc(len(b)); err != nil {
		return nil, err
	}
	if err := l.ops.upload(t.ptr, b); err != nil {
		_ = l.ops.free(t.ptr)
		return nil, err
	}
	return t, nil
}

// UploadWeights takes the full host weights gate, up [H × I] and down
// [I × H] (bf16), cuts this rank's TP shard (parallel.ShardFFNWeights) and
// uploads it in the layer's block layout.
func (l *Layer) UploadWeights(gate, up, down *parallel.Matrix) (Weights, error) {
	for _, m := range []*parallel.Matrix{gate, up, down} {
		if m == nil || m.DType() != dtype.BF16 {
			return Weights{}, fmt.Errorf("%w: gpuffn.UploadWeights: want bf16 weights, got %s", parallel.ErrInvalidArgument, describe(m))
		}
	}
	if gate.Rows() != l.cfg.Hidden || gate.Cols() != l.cfg.Intermediate {
		return Weights{}, fmt.Errorf("%w: gpuffn.UploadWeights: gate is %d×%d, want %d×%d", parallel.ErrInvalidArgument,
			gate.Rows(), gate.Cols(), l.cfg.Hidden, l.cfg.Intermediate)
	}
	sh, err := parallel.ShardFFNWeights(gate, up, down, l.tp, l.rank)
	if err != nil {
		return Weights{}, err
	}
	var w Weights
	if w.Gate, err = l.Upload(sh.Gate.(*parallel.Matrix), l.nl, true); err == nil {
		if w.Up, err = l.Upload(sh.Up.(*parallel.Matrix), l.nl, true); err == nil {
			w.Down, err = l.Upload(sh.Down.(*parallel.Matrix), l.nl, false)
		}
	}
	if err != nil {
		l.Free(w.Gate, w.Up, w.Down)
		return Weights{}, err
	}
	return w, nil
}

// Download waits for the layer's work and copies t to a plain host matrix.
func (l *Layer) Download(t *Tensor) (*parallel.Matrix, error) {
	if t == nil || t.ptr == 0 {
		return nil, fmt.Errorf("%w: gpuffn.Download of a nil or freed tensor", parallel.ErrInvalidArgument)
	}
	b := make([]byte, t.bytes())
	if err := l.ops.download(b, t.ptr); err != nil {
		return nil, err
	}
	return t.unpack(b)
}

// Free waits for the layer's work and frees the tensors (nil ones are
// skipped).
func (l *Layer) Free(ts ...*Tensor) error {
	errs := []error{l.ops.sync()}
	for _, t := range ts {
		if t != nil && t.ptr != 0 {
			errs = append(errs, l.ops.free(t.ptr))
			t.ptr = 0
		}
	}
	return errors.Join(errs...)
}

// FreeSaved frees what Forward saved (not x).
func (l *Layer) FreeSaved(s *Saved) error {
	if s == nil {
		return nil
	}
	return l.Free(s.G, s.U, s.A)
}

// FreeGrads frees Backward's results.
func (l *Layer) FreeGrads(g *Grads) error {
	if g == nil {
		return nil
	}
	return l.Free(g.X, g.Gate, g.Up, g.Down)
}

// Synchronize waits for the work queued on the layer's stream.
func (l *Layer) Synchronize() error { return l.ops.sync() }

// SetTiming turns the CUDA-event timing of the phases on or off.
func (l *Layer) SetTiming(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops.setTiming(on)
}

// Timings waits for the layer's work and returns the phases timed since the
// last call, in the order they were enqueued. Forward records fwd.total,
// fwd.gate_up, fwd.swiglu, fwd.down and (TP > 1) the collective
// fwd.allreduce_y; Backward bwd.total, bwd.da, bwd.swiglu, bwd.dx_lanes,
// (TP > 1) the collective bwd.allreduce_dx_lanes, bwd.dx_add and
// bwd.weight_grads.
func (l *Layer) Timings() ([]Timing, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ops.timings()
}

// Close waits for the layer's work and releases its workspace, cuBLAS
// handle, kernels and stream. Tensors are the caller's: free them first.
func (l *Layer) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	errs := []error{l.ops.sync()}
	if l.ws != 0 {
		errs = append(errs, l.ops.free(l.ws))
		l.ws, l.wsBytes = 0, 0
	}
	errs = append(errs, l.ops.close())
	return errors.Join(errs...)
}

// ensureWS grows the partial-product workspace to n bytes (after waiting
// for the work that may still use the old one).
func (l *Layer) ensureWS(n int) error {
	if n <= l.wsBytes {
		return nil
	}
	if err := l.ops.sync(); err != nil {
		return err
	}
	if l.ws != 0 {
		if err := l.ops.free(l.ws); err != nil {
			return err
		}
		l.ws, l.wsBytes = 0, 0
	}
	p, err := l.ops.alloc(n)
	if err != nil {
		return err
	}
	l.ws, l.wsBytes = p, n
	return nil
}

// chunked enqueues out = the canonical chunk tree of s: the partial
// products of the L chunks of K into slabs of the workspace, then the tree
// reduction (package gpu's kernel, native bf16 accumulation) into out
// (m×n, dense).
func (l *Layer) chunked(s gemmSpec, out cuda.DevicePtr) error {
	L := l.cfg.Chunks
	slab := padBytes(s.m * s.n * 2)
	calls, zeros := planChunks(s, L, l.ws, slab, l.cfg.compute())
	for _, c := range calls {
		if err := l.ops.gemm(c.g, c.batched); err != nil {
			return err
		}
	}
	for _, z := range zeros {
		if err := l.ops.zero(z, s.m*s.n*2); err != nil {
			return err
		}
	}
	return l.ops.reduce(out, l.ws, slab, L, s.m*s.n)
}

// local enqueues the row-parallel partial of this rank: one GEMM per local
// canonical chunk c (K = the I/L columns of block c), specs(c), into slab c
// of the workspace, then the tree over the nl slabs into out (m×n dense).
func (l *Layer) local(m, n int, spec func(c int) gemmSpec, out cuda.DevicePtr) error {
	slab := padBytes(m * n * 2)
	for c := 0; c < l.nl; c++ {
		s := spec(c)
		if err := l.ops.gemm(s.call(0, s.k, l.ws+cuda.DevicePtr(c*slab), l.cfg.compute()), false); err != nil {
			return err
		}
	}
	return l.ops.reduce(out, l.ws, slab, l.nl, m*n)
}

func (l *Layer) checkActs(op, name string, t *Tensor, rows int) error {
	if t == nil || t.ptr == 0 {
		return fmt.Errorf("%w: gpuffn.%s: %s is nil or freed", parallel.ErrInvalidArgument, op, name)
	}
	if t.blocks != 1 || t.cols != l.cfg.Hidden || (rows >= 0 && t.rows != rows) {
		want := "T"
		if rows >= 0 {
			want = fmt.Sprint(rows)
		}
		return fmt.Errorf("%w: gpuffn.%s: %s is %v, want plain bf16 %s×%d", parallel.ErrInvalidArgument, op, name, t, want, l.cfg.Hidden)
	}
	return nil
}

func (l *Layer) checkWeights(op string, w Weights) error {
	il := l.cfg.Intermediate / l.tp
	check := func(name string, t *Tensor, rows, cols int, byCols bool) error {
		if t == nil || t.ptr == 0 || t.rows != rows || t.cols != cols || t.blocks != l.nl || (l.nl > 1 && t.byCols != byCols) {
			return fmt.Errorf("%w: gpuffn.%s: weights.%s is %v, want %d×%d in %d blocks (Layer.UploadWeights)",
				parallel.ErrInvalidArgument, op, name, t, rows, cols, l.nl)
		}
		return nil
	}
	if err := check("Gate", w.Gate, l.cfg.Hidden, il, true); err != nil {
		return err
	}
	if err := check("Up", w.Up, l.cfg.Hidden, il, true); err != nil {
		return err
	}
	return check("Down", w.Down, il, l.cfg.Hidden, false)
}

// sticky runs enqueue steps until the first error; the collectives are
// issued in any case (on buffers that exist), so that a rank whose local
// step failed does not leave its peers waiting in a collective.
type sticky struct{ err error }

func (s *sticky) step(f func() error) {
	if s.err == nil {
		s.err = f()
	}
}

func (s *sticky) always(f func() error) {
	if err := f(); s.err == nil {
		s.err = err
	}
}

func (s *sticky) alloc(l *Layer, rows, cols, blocks int, byCols bool) *Tensor {
	var t *Tensor
	s.step(func() (err error) { t, err = l.NewTensor(rows, cols, blocks, byCols); return err })
	return t
}

// Forward computes y = (silu(x·Gate) ⊙ (x·Up)) · Down for x [tokens × H]
// (plain, the same on every TP rank), as package parallel's host FFN does
// without sequence parallelism: Gate and Up column-parallel with K = H in L
// canonical chunks, Down row-parallel over this rank's L/TP chunks, the
// partial reduced over TP by detcoll's deterministic all-reduce. y
// [tokens × H] is identical on every TP rank and equal, bit for bit, to
// the TP = 1 result. The work is enqueued on the layer's stream; Download
// (or Synchronize) waits for it.
func (l *Layer) Forward(ctx context.Context, x *Tensor, w Weights) (*Tensor, *Saved, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	const op = "Forward"
	if err := l.usable(op); err != nil {
		return nil, nil, err
	}
	if err := l.checkActs(op, "x", x, -1); err != nil {
		return nil, nil, err
	}
	if err := l.checkWeights(op, w); err != nil {
		return nil, nil, err
	}
	T, H, L, nb, nl := x.rows, l.cfg.Hidden, l.cfg.Chunks, l.nb, l.nl
	il := nl * nb
	var st sticky
	y := st.alloc(l, T, H, 1, false)
	s := &Saved{X: x}
	s.G = st.alloc(l, T, il, nl, true)
	s.U = st.alloc(l, T, il, nl, true)
	s.A = st.alloc(l, T, il, nl, true)
	st.step(func() error { return l.ensureWS(max(L*padBytes(T*nb*2), nl*padBytes(T*H*2))) })
	err := l.ops.do(func() error {
		total := l.ops.span("fwd.total", false)
		sp := l.ops.span("fwd.gate_up", false)
		for j := 0; j < nl; j++ {
			st.step(func() error {
				return l.chunked(gemmSpec{m: T, n: nb, k: H, a: operand{x.ptr, H, false}, b: operand{w.Gate.BlockPtr(j), nb, false}}, s.G.BlockPtr(j))
			})
			st.step(func() error {
				return l.chunked(gemmSpec{m: T, n: nb, k: H, a: operand{x.ptr, H, false}, b: operand{w.Up.BlockPtr(j), nb, false}}, s.U.BlockPtr(j))
			})
		}
		st.step(sp)
		sp = l.ops.span("fwd.swiglu", false)
		st.step(func() error { return l.ops.swigluFwd(s.A.ptr, s.G.ptr, s.U.ptr, T*nb, nl, s.G.stride/2) })
		st.step(sp)
		sp = l.ops.span("fwd.down", false)
		st.step(func() error {
			return l.local(T, H, func(c int) gemmSpec {
				return gemmSpec{m: T, n: H, k: nb, a: operand{s.A.BlockPtr(c), nb, false}, b: operand{w.Down.BlockPtr(c), H, false}}
			}, y.ptr)
		})
		st.step(sp)
		if l.tp > 1 && y != nil {
			sp = l.ops.span("fwd.allreduce_y", true)
			st.always(func() error { return l.ops.allReduce(ctx, y.ptr, T*H) })
			st.step(sp)
		}
		st.step(total)
		return st.err
	})
	if err != nil {
		l.ops.sync()
		l.freeQuiet(y, s.G, s.U, s.A)
		return nil, nil, fmt.Errorf("gpuffn: Forward (TP rank %d of %d): %w", l.rank, l.tp, err)
	}
	return y, s, nil
}

// Backward computes, for dy [tokens × H] (the same on every TP rank), the
// input gradient dx [tokens × H] (identical on every TP rank) and the
// gradients of this rank's weight shards, as package parallel's host FFN
// does without sequence parallelism: da = dy·Downᵀ (K = H, local), the
// SwiGLU gradients, the gate and up input-gradient lanes dg·Gateᵀ and
// du·Upᵀ each reduced over this rank's chunks with its own tree, one
// deterministic all-reduce of both lanes side by side, dx = gate lane + up
// lane; weight gradients xᵀ·dg, xᵀ·du, aᵀ·dy with K = tokens in L
// canonical chunks. Every result equals the TP = 1 result bit for bit.
func (l *Layer) Backward(ctx context.Context, dy *Tensor, w Weights, s *Saved) (*Grads, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkBackward(dy, w, s); err != nil {
		return nil, err
	}
	T, H, L, nb, nl := dy.rows, l.cfg.Hidden, l.cfg.Chunks, l.nb, l.nl
	il := nl * nb
	var st sticky
	b := bwdBufs{da: st.alloc(l, T, il, nl, true), dg: st.alloc(l, T, il, nl, true), du: st.alloc(l, T, il, nl, true),
		lanes: st.alloc(l, 2*T, H, 1, false)}
	g := &Grads{}
	g.X = st.alloc(l, T, H, 1, false)
	g.Gate = st.alloc(l, H, il, nl, true)
	g.Up = st.alloc(l, H, il, nl, true)
	g.Down = st.alloc(l, il, H, nl, false)
	st.step(func() error {
		return l.ensureWS(max(L*padBytes(T*nb*2), nl*padBytes(T*H*2), L*padBytes(H*nb*2)))
	})
	err := l.ops.do(func() error { return l.backwardSteps(ctx, &st, dy, w, s, b, g) })
	// The temporaries go back once the stream is done with them.
	serr := l.ops.sync()
	l.freeQuiet(b.da, b.dg, b.du, b.lanes)
	if err == nil {
		err = serr
	}
	if err != nil {
		l.freeQuiet(g.X, g.Gate, g.Up, g.Down)
		return nil, fmt.Errorf("gpuffn: Backward (TP rank %d of %d): %w", l.rank, l.tp, err)
	}
	return g, nil
}

// checkBackward checks Backward's arguments. Called with l.mu held.
func (l *Layer) checkBackward(dy *Tensor, w Weights, s *Saved) error {
	const op = "Backward"
	if err := l.usable(op); err != nil {
		return err
	}
	if s == nil || s.X == nil || s.G == nil || s.U == nil || s.A == nil || s.G.ptr == 0 {
		return fmt.Errorf("%w: gpuffn.Backward: saved state is missing or freed", parallel.ErrInvalidArgument)
	}
	if err := l.checkActs(op, "saved x", s.X, -1); err != nil {
		return err
	}
	if err := l.checkActs(op, "dy", dy, s.X.rows); err != nil {
		return err
	}
	return l.checkWeights(op, w)
}

// bwdBufs are Backward's temporaries: the activation gradients and the two
// dx lanes side by side.
type bwdBufs struct{ da, dg, du, lanes *Tensor }

// backwardSteps enqueues the backward pass (inside l.ops.do): da, the
// SwiGLU backward, the two dx lanes, their all-reduce over TP, dx, and the
// weight gradients; st keeps the first error while the collective is
// still issued.
func (l *Layer) backwardSteps(ctx context.Context, st *sticky, dy *Tensor, w Weights, s *Saved, b bwdBufs, g *Grads) error {
	T, H, nb, nl := dy.rows, l.cfg.Hidden, l.nb, l.nl
	da, dg, du, lanes, x := b.da, b.dg, b.du, b.lanes, s.X
	total := l.ops.span("bwd.total", false)
	sp := l.ops.span("bwd.da", false)
	for j := 0; j < nl; j++ {
		st.step(func() error {
			return l.chunked(gemmSpec{m: T, n: nb, k: H, a: operand{dy.ptr, H, false}, b: operand{w.Down.BlockPtr(j), H, true}}, da.BlockPtr(j))
		})
	}
	st.step(sp)
	sp = l.ops.span("bwd.swiglu", false)
	st.step(func() error {
		return l.ops.swigluBwd(dg.ptr, du.ptr, s.G.ptr, s.U.ptr, da.ptr, T*nb, nl, da.stride/2)
	})
	st.step(sp)
	sp = l.ops.span("bwd.dx_lanes", false)
	laneBytes := T * H * 2
	st.step(func() error {
		return l.local(T, H, func(c int) gemmSpec {
			return gemmSpec{m: T, n: H, k: nb, a: operand{dg.BlockPtr(c), nb, false}, b: operand{w.Gate.BlockPtr(c), nb, true}}
		}, lanes.ptr)
	})
	st.step(func() error {
		return l.local(T, H, func(c int) gemmSpec {
			return gemmSpec{m: T, n: H, k: nb, a: operand{du.BlockPtr(c), nb, false}, b: operand{w.Up.BlockPtr(c), nb, true}}
		}, lanes.ptr+cuda.DevicePtr(laneBytes))
	})
	st.step(sp)
	if l.tp > 1 && lanes != nil {
		// One all-reduce of both lanes side by side: every element has
		// its own tree, the lanes are not added to each other.
		sp = l.ops.span("bwd.allreduce_dx_lanes", true)
		st.always(func() error { return l.ops.allReduce(ctx, lanes.ptr, 2*T*H) })
		st.step(sp)
	}
	sp = l.ops.span("bwd.dx_add", false)
	st.step(func() error { return l.ops.reduce2(g.X.ptr, lanes.ptr, lanes.ptr+cuda.DevicePtr(laneBytes), T*H) })
	st.step(sp)
	sp = l.ops.span("bwd.weight_grads", false)
	for j := 0; j < nl; j++ {
		st.step(func() error {
			return l.chunked(gemmSpec{m: H, n: nb, k: T, a: operand{x.ptr, H, true}, b: operand{dg.BlockPtr(j), nb, false}}, g.Gate.BlockPtr(j))
		})
		st.step(func() error {
			return l.chunked(gemmSpec{m: H, n: nb, k: T, a: operand{x.ptr, H, true}, b: operand{du.BlockPtr(j), nb, false}}, g.Up.BlockPtr(j))
		})
		st.step(func() error {
			return l.chunked(gemmSpec{m: nb, n: H, k: T, a: operand{s.A.BlockPtr(j), nb, true}, b: operand{dy.ptr, H, false}}, g.Down.BlockPtr(j))
		})
	}
	st.step(sp)
	st.step(total)
	return st.err
}

func (l *Layer) freeQuiet(ts ...*Tensor) {
	for _, t := range ts {
		if t != nil && t.ptr != 0 {
			_ = l.ops.free(t.ptr)
			t.ptr = 0
		}
	}
}
