package parallel

import (
	"context"
	"fmt"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

// FFNConfig configures the gated SwiGLU feed-forward layer
//
//	y = (silu(x·Gate) ⊙ (x·Up)) · Down
//
// with Gate and Up [Hidden × Intermediate] column-parallel and Down
// [Intermediate × Hidden] row-parallel over the TP group.
type FFNConfig struct {
	Hidden       int         // H
	Intermediate int         // I, the full size: each TP rank holds I/TP columns of Gate and Up, rows of Down
	DType        dtype.DType // bf16, fp16 or fp32
	// Chunks is L, the number of canonical chunks of every GEMM's K
	// dimension (0: DefaultChunks = 8). I must divide by L, and L/TP must be
	// a power of two (or TP = 1): L = 8 serves TP = 1, 2, 4, 8; L = 12
	// serves TP = 1, 3, 6, 12.
	Chunks int
	// SequenceParallel: x and y hold this TP rank's contiguous block of
	// its CP rank's tokens (all-gathered before Gate/Up, reduce-scattered
	// after Down) instead of all of them.
	SequenceParallel bool
	// Layout is how tokens are spread over the CP group (default Zigzag).
	// Only the weight gradients depend on it: they put every token back
	// in sequence order.
	Layout TokenLayout
	// Backend and Device select the implementation (see Device). The
	// default, Backend "" and DeviceAuto, is the host reference.
	Backend Backend
	Device  Device
}

// FFNWeights are one TP rank's weight shards: Gate and Up are columns
// [t·I/TP, (t+1)·I/TP) of the full [H × I] matrices, Down rows
// [t·I/TP, (t+1)·I/TP) of the full [I × H] one (ShardFFNWeights).
type FFNWeights struct {
	Gate, Up, Down Tensor
}

// FFNGrads are one rank's gradients: X for its tokens (the shape of x), and
// the full-sequence gradients of its weight shards (the shapes of
// FFNWeights), identical on every CP rank of a TP position.
type FFNGrads struct {
	X, Gate, Up, Down Tensor
}

// ShardFFNWeights returns TP rank t's shards of the full weights
// gate, up [H × I] and down [I × H] (copies).
func ShardFFNWeights(gate, up, down *Matrix, tp, t int) (FFNWeights, error) {
	if gate == nil || up == nil || down == nil {
		return FFNWeights{}, fmt.Errorf("%w: ShardFFNWeights: nil weight", ErrInvalidArgument)
	}
	h, i := gate.rows, gate.cols
	if up.rows != h || up.cols != i || down.rows != i || down.cols != h {
		return FFNWeights{}, fmt.Errorf("%w: ShardFFNWeights: gate %d×%d, up %d×%d, down %d×%d (want H×I, H×I, I×H)",
			ErrInvalidArgument, gate.rows, gate.cols, up.rows, up.cols, down.rows, down.cols)
	}
	if tp < 1 || t < 0 || t >= tp || i%tp != 0 {
		return FFNWeights{}, fmt.Errorf("%w: ShardFFNWeights: rank %d of TP %d with I = %d", ErrInvalidArgument, t, tp, i)
	}
	n := i / tp
	return FFNWeights{Gate: gate.ColSlice(t*n, (t+1)*n), Up: up.ColSlice(t*n, (t+1)*n), Down: down.RowSlice(t*n, (t+1)*n).Clone()}, nil
}

// NewFFN returns the FFN layer of this rank. It is collective over the
// mesh's Model group: the configurations are compared, and a bad or
// disagreeing configuration is an error on every rank.
func NewFFN(ctx context.Context, m *Mesh, cfg FFNConfig) (FFN, error) {
	const op = "NewFFN"
	if m == nil {
		return nil, fmt.Errorf("%w: %s: nil mesh", ErrInvalidArgument, op)
	}
	if cfg.Chunks == 0 {
		cfg.Chunks = DefaultChunks
	}
	gb, local := resolve(cfg.Backend, cfg.Device)
	if local == nil {
		local = cfg.check(m)
	}
	fields := []field{{"hidden", int64(cfg.Hidden)}, {"intermediate", int64(cfg.Intermediate)}, {"dtype", int64(cfg.DType)},
		{"chunks", int64(cfg.Chunks)}, {"sequence_parallel", b2i(cfg.SequenceParallel)}, {"layout", int64(cfg.Layout)},
		{"device", int64(cfg.Device)}, {"backend", backendCode(cfg.Backend)}}
	if err := agree(ctx, m.Model(), opNewFFN, m.world.Rank(), fields, local, ""); err != nil {
		return nil, err
	}
	if gb != nil {
		return gb.NewFFN(m, cfg)
	}
	return &hostFFN{m: m, cfg: cfg}, nil
}

func backendCode(b Backend) int64 {
	for i, k := range Backends {
		if b == k {
			return int64(i + 1)
		}
	}
	return 0
}

func (cfg FFNConfig) check(m *Mesh) error {
	const op = "NewFFN"
	r := m.world.Rank()
	switch {
	case cfg.DType != dtype.BF16 && cfg.DType != dtype.FP16 && cfg.DType != dtype.FP32:
		return argErr(op, r, "dtype %v (want bf16, fp16 or fp32)", cfg.DType)
	case cfg.Hidden < 1 || cfg.Intermediate < 1:
		return argErr(op, r, "hidden %d, intermediate %d", cfg.Hidden, cfg.Intermediate)
	case cfg.Chunks < 1:
		return argErr(op, r, "%d canonical chunks", cfg.Chunks)
	case !cfg.Layout.Valid():
		return argErr(op, r, "token layout %v", cfg.Layout)
	case !tpChunksOK(cfg.Chunks, m.tp):
		return argErr(op, r, "TP = %d cannot hold the %d canonical K chunks in power-of-two blocks (L/TP must be a power of two; L = 8 serves TP = 1, 2, 4, 8)", m.tp, cfg.Chunks)
	case cfg.Intermediate%cfg.Chunks != 0:
		return argErr(op, r, "intermediate size %d does not divide into %d canonical chunks", cfg.Intermediate, cfg.Chunks)
	}
	return nil
}

// hostFFN is the host reference implementation.
type hostFFN struct {
	m   *Mesh
	cfg FFNConfig
}

type ffnSaved struct {
	tokens     int     // this rank's token count (rows of x)
	x, g, u, a *Matrix // x all-gathered over SP; g, u, a: [T_cp × I/TP]
}

func (f *hostFFN) ilocal() int { return f.cfg.Intermediate / f.m.tp }

// matrixArg returns t as a host *Matrix of the given dtype and width.
func matrixArg(op string, rank int, name string, t Tensor, dt dtype.DType, rows, cols int) (*Matrix, error) {
	m, ok := t.(*Matrix)
	if !ok {
		return nil, argErr(op, rank, "%s is %T, the host implementation needs a *parallel.Matrix", name, t)
	}
	if m == nil {
		return nil, argErr(op, rank, "%s is a nil *Matrix", name)
	}
	if m.dt != dt || (rows >= 0 && m.rows != rows) || m.cols != cols {
		want := fmt.Sprintf("%d", rows)
		if rows < 0 {
			want = "T"
		}
		return nil, argErr(op, rank, "%s is %v %d×%d, want %v %s×%d", name, m.dt, m.rows, m.cols, dt, want, cols)
	}
	return m, nil
}

func (f *hostFFN) weights(op string, w FFNWeights) (g, u, d *Matrix, err error) {
	r, h, il, dt := f.m.world.Rank(), f.cfg.Hidden, f.ilocal(), f.cfg.DType
	if g, err = matrixArg(op, r, "weights.Gate", w.Gate, dt, h, il); err != nil {
		return
	}
	if u, err = matrixArg(op, r, "weights.Up", w.Up, dt, h, il); err != nil {
		return
	}
	d, err = matrixArg(op, r, "weights.Down", w.Down, dt, il, h)
	return
}

// tokenCheck checks this rank's token count against the layout.
func (f *hostFFN) tokenCheck(op string, tokens int) error {
	tcp := tokens
	if f.cfg.SequenceParallel {
		tcp *= f.m.tp
	}
	if f.cfg.Layout == Zigzag && f.m.cp > 1 && tcp%2 != 0 {
		return argErr(op, f.m.world.Rank(), "CP rank holds %d tokens; the zigzag layout over CP = %d ranks needs an even number (the sequence splits into 2*CP equal chunks)", tcp, f.m.cp)
	}
	return nil
}

func (f *hostFFN) hint() string {
	if f.cfg.SequenceParallel && f.m.tp > 1 {
		return fmt.Sprintf("with sequence parallelism every TP rank holds the same number of tokens, so a CP rank's tokens must divide by TP = %d; every CP rank holds the same number too", f.m.tp)
	}
	return "every CP rank holds the same number of tokens (the sequence must divide over CP) and every TP rank all of its CP rank's tokens"
}

var native = detcoll.WithAccumulate(detcoll.AccumulateNative)

// allGatherRows all-gathers x's rows over c in rank order.
func allGatherRows(ctx context.Context, c *detcoll.Comm, x *Matrix) (*Matrix, error) {
	out := newMatrix(x.dt, x.rows*c.Size(), x.cols)
	if err := c.AllGather(ctx, x.data, out.data, x.dt); err != nil {
		return nil, err
	}
	return out, nil
}

func (f *hostFFN) Forward(ctx context.Context, xt Tensor, w FFNWeights) (Tensor, any, error) {
	const op = "FFN.Forward"
	r := f.m.world.Rank()
	x, local := matrixArg(op, r, "x", xt, f.cfg.DType, -1, f.cfg.Hidden)
	var wg, wu, wd *Matrix
	if local == nil {
		wg, wu, wd, local = f.weights(op, w)
	}
	tokens := -1
	if local == nil {
		tokens = x.rows
		local = f.tokenCheck(op, tokens)
	}
	if err := agree(ctx, f.m.Model(), opFFNForward, r, []field{{"tokens", int64(tokens)}}, local, f.hint()); err != nil {
		return nil, nil, err
	}
	tpc, tp, l := f.m.TP(), f.m.tp, f.cfg.Chunks
	wrap := func(what string, err error) error { return fmt.Errorf("parallel: %s: %s: %w", op, what, err) }

	xf := x
	if f.cfg.SequenceParallel {
		var err error
		if xf, err = allGatherRows(ctx, tpc, x); err != nil {
			return nil, nil, wrap("SP all-gather of x", err)
		}
	}
	g := matmul(xf, false, wg, false, l)
	u := matmul(xf, false, wu, false, l)
	a := newMatrix(g.dt, g.rows, g.cols)
	for i := range g.rows * g.cols {
		store(a.dt, a.data, i, swiglu(load(g.dt, g.data, i), load(u.dt, u.data, i)))
	}
	// Row-parallel Down: this rank's l/tp chunks of K = I reduced locally
	// with the tree; the collective continues the same tree over the ranks.
	yp := matmul(a, false, wd, false, l/tp)
	var y *Matrix
	if f.cfg.SequenceParallel {
		y = newMatrix(yp.dt, tokens, yp.cols)
		if err := tpc.ReduceScatter(ctx, yp.data, y.data, yp.dt, native); err != nil {
			return nil, nil, wrap("SP reduce-scatter of the Down output", err)
		}
	} else {
		y = yp
		if err := tpc.AllReduce(ctx, yp.data, yp.data, yp.dt, native); err != nil {
			return nil, nil, wrap("TP all-reduce of the Down output", err)
		}
	}
	return y, &ffnSaved{tokens: tokens, x: xf, g: g, u: u, a: a}, nil
}

func (f *hostFFN) Backward(ctx context.Context, dyt Tensor, w FFNWeights, saved any) (*FFNGrads, error) {
	const op = "FFN.Backward"
	r := f.m.world.Rank()
	s, ok := saved.(*ffnSaved)
	var local error
	if !ok || s == nil {
		local = argErr(op, r, "saved state is %T, want what this layer's Forward returned", saved)
	}
	var dy, wg, wu, wd *Matrix
	if local == nil {
		dy, local = matrixArg(op, r, "dy", dyt, f.cfg.DType, s.tokens, f.cfg.Hidden)
	}
	if local == nil {
		wg, wu, wd, local = f.weights(op, w)
	}
	tokens := -1
	if local == nil {
		tokens = dy.rows
	}
	if err := agree(ctx, f.m.Model(), opFFNBackward, r, []field{{"tokens", int64(tokens)}}, local, f.hint()); err != nil {
		return nil, err
	}

	dyf := dy
	if f.cfg.SequenceParallel {
		var err error
		if dyf, err = allGatherRows(ctx, f.m.TP(), dy); err != nil {
			return nil, stepErr(op, "SP all-gather of dy", err)
		}
	}
	// da = dy · Downᵀ (K = H, local); then the SwiGLU gradients.
	da := matmul(dyf, false, wd, true, f.cfg.Chunks)
	dg, du := swigluBackward(s, da)
	dx, err := f.inputGrad(ctx, op, dg, du, wg, wu, tokens)
	if err != nil {
		return nil, err
	}
	gate, up, down, err := f.weightGrads(ctx, op, s, dyf, dg, du)
	if err != nil {
		return nil, err
	}
	return &FFNGrads{X: dx, Gate: gate, Up: up, Down: down}, nil
}

// stepErr is err as the failure of step what of operation op.
func stepErr(op, what string, err error) error {
	return fmt.Errorf("parallel: %s: %s: %w", op, what, err)
}

// swigluBackward is the gradients of the gate and up projections given da,
// the gradient of the SwiGLU output, and the forward's saved projections.
func swigluBackward(s *ffnSaved, da *Matrix) (dg, du *Matrix) {
	dg = newMatrix(da.dt, da.rows, da.cols)
	du = newMatrix(da.dt, da.rows, da.cols)
	for i := range da.rows * da.cols {
		gg, uu := load(s.g.dt, s.g.data, i), load(s.u.dt, s.u.data, i)
		dgi, dui := swigluGrad(gg, uu, load(da.dt, da.data, i))
		store(dg.dt, dg.data, i, dgi)
		store(du.dt, du.data, i, dui)
	}
	return dg, du
}

// inputGrad is the input gradient of this rank's tokens: two row-parallel
// GEMMs (K = I), the gate lane and the up lane, each reduced over TP by its
// own tree and added only afterwards: dx = tree(gate lane) + tree(up lane).
func (f *hostFFN) inputGrad(ctx context.Context, op string, dg, du, wg, wu *Matrix, tokens int) (*Matrix, error) {
	tpc, tp, l := f.m.TP(), f.m.tp, f.cfg.Chunks
	dxg := matmul(dg, false, wg, true, l/tp)
	dxu := matmul(du, false, wu, true, l/tp)
	var rg, ru *Matrix
	if f.cfg.SequenceParallel {
		rg = newMatrix(dxg.dt, tokens, dxg.cols)
		ru = newMatrix(dxu.dt, tokens, dxu.cols)
		if err := tpc.ReduceScatterMany(ctx, [][]byte{dxg.data, dxu.data}, [][]byte{rg.data, ru.data}, dxg.dt, native); err != nil {
			return nil, stepErr(op, "SP reduce-scatter of the gate and up input-gradient lanes", err)
		}
	} else {
		// One all-reduce over the two lanes side by side: every element has
		// its own tree, so the lanes are not added to each other.
		both, _ := ConcatRows(dxg, dxu)
		if err := tpc.AllReduce(ctx, both.data, both.data, both.dt, native); err != nil {
			return nil, stepErr(op, "TP all-reduce of the gate and up input-gradient lanes", err)
		}
		rg, ru = both.RowSlice(0, dxg.rows), both.RowSlice(dxg.rows, both.rows)
	}
	return addDType(rg, ru), nil
}

// weightGrads is the full-sequence gradients of the weight shards. K is the
// token dimension, so every rank needs every token of the sequence, in
// sequence order, to build the canonical token chunks: all-gather the
// activations over CP and undo the layout.
func (f *hostFFN) weightGrads(ctx context.Context, op string, s *ffnSaved, dyf, dg, du *Matrix) (gate, up, down *Matrix, err error) {
	cpc, l := f.m.CP(), f.cfg.Chunks
	lanes := []*Matrix{s.x, dyf, s.a, dg, du}
	sends := make([][]byte, len(lanes))
	recvs := make([][]byte, len(lanes))
	all := make([]*Matrix, len(lanes))
	for i, m := range lanes {
		all[i] = newMatrix(m.dt, m.rows*cpc.Size(), m.cols)
		sends[i], recvs[i] = m.data, all[i].data
	}
	if err := cpc.AllGatherMany(ctx, sends, recvs, f.cfg.DType); err != nil {
		return nil, nil, nil, stepErr(op, "CP all-gather of the weight-gradient activations", err)
	}
	perm := gatheredToLogical(f.cfg.Layout, cpc.Size(), s.x.rows)
	for i := range all {
		all[i] = permuteRows(all[i], perm)
	}
	xa, dya, aa, dga, dua := all[0], all[1], all[2], all[3], all[4]
	return matmul(xa, true, dga, false, l), matmul(xa, true, dua, false, l), matmul(aa, true, dya, false, l), nil
}
