package gpuffn

import (
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

func (l *Layer) freeQuiet(ts ...*Tensor) {
	for _, t := range ts {
		if t != nil && t.ptr != 0 {
			_ = l.ops.free(t.ptr)
			t.ptr = 0
		}
	}
}
