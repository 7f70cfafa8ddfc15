package parallel

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

// AttentionConfig configures context-parallel causal attention.
type AttentionConfig struct {
	// Backend is required: cuda_ag_rs, rccl_ag_rs or local_debug.
	Backend Backend
	// Device: DeviceAuto runs cuda_ag_rs and rccl_ag_rs on their
	// registered GPU backend (ErrNoGPUBackend without one) and local_debug
	// on the host; DeviceHost runs every name on the host.
	Device Device
	DType  dtype.DType // bf16, fp16 or fp32
	// Heads and HeadDim describe this rank's heads (after any TP split of
	// the heads): Q, K, V, the output and dout are tokens × Heads·HeadDim,
	// head h in columns [h·HeadDim, (h+1)·HeadDim).
	Heads, HeadDim int
	// Scale multiplies the scores; 0 means float32(1/sqrt(float64(HeadDim))).
	Scale float32
}

// AttnOutput is this rank's shard of the attention output.
type AttnOutput struct {
	Out Tensor // tokens × Heads·HeadDim, the dtype
	LSE Tensor // tokens × Heads, fp32: the log-sum-exp of each row's scores
	// Saved is the implementation's state for Backward.
	Saved any
}

// AttnGrads are this rank's shards of the input gradients.
type AttnGrads struct {
	Q, K, V Tensor
}

// NewAttention returns context-parallel attention over the CP group cp. It
// is collective over cp: the configurations are compared and a bad or
// disagreeing one is an error on every rank. local_debug is single-rank:
// cp may be nil, and must otherwise have one rank.
func NewAttention(ctx context.Context, cp *detcoll.Comm, cfg AttentionConfig) (Attention, error) {
	const op = "NewAttention"
	var local error
	var gb GPUBackend
	switch {
	case cfg.Backend == "":
		local = argErr(op, -1, "AttentionConfig.Backend is empty (want cuda_ag_rs, rccl_ag_rs or local_debug)")
	case !cfg.Backend.Valid():
		local = argErr(op, -1, "unknown backend %q (want cuda_ag_rs, rccl_ag_rs or local_debug)", string(cfg.Backend))
	case cfg.DType != dtype.BF16 && cfg.DType != dtype.FP16 && cfg.DType != dtype.FP32:
		local = argErr(op, -1, "dtype %v (want bf16, fp16 or fp32)", cfg.DType)
	case cfg.Heads < 1 || cfg.HeadDim < 1:
		local = argErr(op, -1, "%d heads of dimension %d", cfg.Heads, cfg.HeadDim)
	case cfg.Scale != cfg.Scale || math.IsInf(float64(cfg.Scale), 0):
		local = argErr(op, -1, "scale %v", cfg.Scale)
	case cfg.Backend.SingleRank() && cp != nil && cp.Size() != 1:
		local = argErr(op, -1, "local_debug is a single-rank backend, but the CP group has %d ranks (use cuda_ag_rs or rccl_ag_rs)", cp.Size())
	default:
		gb, local = resolve(cfg.Backend, cfg.Device)
	}
	if cp == nil {
		if local == nil && !cfg.Backend.SingleRank() {
			local = argErr(op, -1, "nil CP communicator (only local_debug runs without one)")
		}
		if local != nil {
			return nil, local
		}
	} else {
		fields := []field{{"backend", backendCode(cfg.Backend)}, {"device", int64(cfg.Device)}, {"dtype", int64(cfg.DType)},
			{"heads", int64(cfg.Heads)}, {"head_dim", int64(cfg.HeadDim)}, {"scale_bits", int64(math.Float32bits(cfg.Scale))}}
		if err := agree(ctx, cp, opNewAttention, -1, fields, local, ""); err != nil {
			return nil, err
		}
	}
	if gb != nil {
		return gb.NewAttention(cp, cfg)
	}
	if cfg.Scale == 0 {
		cfg.Scale = float32(1 / math.Sqrt(float64(cfg.HeadDim)))
	}
	return &hostAttention{cp: cp, cfg: cfg}, nil
}

// hostAttention is the host reference of the ag_rs pattern (and of
// local_debug).
type hostAttention struct {
	cp  *detcoll.Comm // nil for local_debug without a group
	cfg AttentionConfig
}

type attnSaved struct {
	tokens  int     // this rank's tokens
	q, k, v *Matrix // every token, sequence order
	pos     []int32 // every token, sequence order
	out     *Matrix // the core's output, every token, sequence order
	lse     *Matrix // fp32, every token
}

func (a *hostAttention) size() int {
	if a.cp == nil {
		return 1
	}
	return a.cp.Size()
}

func (a *hostAttention) rank() int {
	if a.cp == nil {
		return 0
	}
	return a.cp.Rank()
}

// check runs the collective shape check (nothing when there is no group).
func (a *hostAttention) check(ctx context.Context, opc int64, tokens int, local error) error {
	if a.cp == nil {
		return local
	}
	hint := "every CP rank holds the same number of tokens: the sequence must split into 2*CP equal zigzag chunks"
	return agree(ctx, a.cp, opc, -1, []field{{"tokens", int64(tokens)}}, local, hint)
}

func (a *hostAttention) Forward(ctx context.Context, qt, kt, vt Tensor, pos []int32) (*AttnOutput, error) {
	const op = "Attention.Forward"
	width := a.cfg.Heads * a.cfg.HeadDim
	dt := a.cfg.DType
	q, local := matrixArg(op, -1, "q", qt, dt, -1, width)
	var k, v *Matrix
	if local == nil {
		k, local = matrixArg(op, -1, "k", kt, dt, q.rows, width)
	}
	if local == nil {
		v, local = matrixArg(op, -1, "v", vt, dt, q.rows, width)
	}
	tokens := -1
	if local == nil {
		tokens = q.rows
		switch {
		case len(pos) != tokens:
			local = argErr(op, -1, "%d position ids for %d tokens", len(pos), tokens)
		case a.size() > 1 && tokens%2 != 0:
			local = argErr(op, -1, "CP rank %d holds %d tokens; the zigzag layout over CP = %d ranks needs an even number (2*CP equal chunks)", a.rank(), tokens, a.size())
		}
	}
	if err := a.check(ctx, opAttnForward, tokens, local); err != nil {
		return nil, err
	}
	wrap := func(what string, err error) error { return fmt.Errorf("parallel: %s: %s: %w", op, what, err) }
	w := a.size()
	n := w * tokens
	Q, K, V := q, k, v
	P := append([]int32(nil), pos...)
	if a.cp != nil {
		// Rank-ordered all-gather of Q, K, V and the position ids (bytes),
		// then from the zigzag layout to sequence order.
		Q, K, V = newMatrix(dt, n, width), newMatrix(dt, n, width), newMatrix(dt, n, width)
		pb := make([]byte, 4*n)
		mine := make([]byte, 4*tokens)
		for i, p := range pos {
			binary.LittleEndian.PutUint32(mine[4*i:], uint32(p))
		}
		err := a.cp.AllGatherMany(ctx, [][]byte{q.data, k.data, v.data, mine}, [][]byte{Q.data, K.data, V.data, pb}, dtype.Byte)
		if err != nil {
			return nil, wrap("CP all-gather of Q, K, V and positions", err)
		}
		perm := gatheredToLogical(Zigzag, w, tokens)
		Q, K, V = permuteRows(Q, perm), permuteRows(K, perm), permuteRows(V, perm)
		P = make([]int32, n)
		for g, l := range perm {
			P[l] = int32(binary.LittleEndian.Uint32(pb[4*g:]))
		}
	}
	// The same core on every CP rank, over the whole sequence.
	O, L := attentionCore(Q, K, V, P, a.cfg.Heads, a.cfg.HeadDim, a.cfg.Scale)
	saved := &attnSaved{tokens: tokens, q: Q, k: K, v: V, pos: P, out: O, lse: L}
	if a.cp == nil {
		return &AttnOutput{Out: O, LSE: L, Saved: saved}, nil
	}
	// The root's (out, lse) to every rank's shard: a Scatter, no arithmetic,
	// so every bit (a -0 included) arrives as the root computed it.
	ob, lb := tokens*width*dt.Size(), tokens*a.cfg.Heads*4
	var send []byte
	if a.cp.Rank() == 0 {
		send = make([]byte, 0, w*(ob+lb))
		for r := 0; r < w; r++ {
			rows := cpLocalRows(Zigzag, w, r, tokens)
			send = append(send, gatherRows(O, rows).data...)
			send = append(send, gatherRows(L, rows).data...)
		}
	}
	recv := make([]byte, ob+lb)
	if err := a.cp.Scatter(ctx, send, recv, 0); err != nil {
		return nil, wrap("CP scatter of the root's output and log-sum-exp", err)
	}
	out, _ := MatrixFromBytes(dt, tokens, width, recv[:ob:ob])
	lse, _ := MatrixFromBytes(dtype.FP32, tokens, a.cfg.Heads, recv[ob:])
	return &AttnOutput{Out: out, LSE: lse, Saved: saved}, nil
}

func (a *hostAttention) Backward(ctx context.Context, doutT Tensor, fwd *AttnOutput) (*AttnGrads, error) {
	const op = "Attention.Backward"
	width := a.cfg.Heads * a.cfg.HeadDim
	dt := a.cfg.DType
	var s *attnSaved
	var local error
	if fwd != nil {
		s, _ = fwd.Saved.(*attnSaved)
	}
	if s == nil {
		local = argErr(op, -1, "fwd is not an output of this layer's Forward")
	}
	var dout *Matrix
	if local == nil {
		dout, local = matrixArg(op, -1, "dout", doutT, dt, s.tokens, width)
	}
	tokens := -1
	if local == nil {
		tokens = dout.rows
	}
	if err := a.check(ctx, opAttnBackward, tokens, local); err != nil {
		return nil, err
	}
	wrap := func(what string, err error) error { return fmt.Errorf("parallel: %s: %s: %w", op, what, err) }
	w := a.size()
	dO := dout
	if a.cp != nil {
		dO = newMatrix(dt, w*tokens, width)
		if err := a.cp.AllGather(ctx, dout.data, dO.data, dt); err != nil {
			return nil, wrap("CP all-gather of the output gradient", err)
		}
		dO = permuteRows(dO, gatheredToLogical(Zigzag, w, tokens))
	}
	dQ, dK, dV := attentionCoreBackward(s.q, s.k, s.v, s.out, s.lse, dO, s.pos, a.cfg.Heads, a.cfg.HeadDim, a.cfg.Scale)
	if a.cp == nil {
		return &AttnGrads{Q: dQ, K: dK, V: dV}, nil
	}
	// Deliver the root's gradients with one three-lane reduce-scatter. The
	// root contributes its gradients in the ranks' zigzag blocks, every other
	// rank -0: -0 is the additive identity of IEEE addition (x + -0 == x for
	// every x, -0 included), so each lane's tree returns the root's bits
	// exactly. (The seed pads with +0, which turns a -0 into +0.)
	lanes := []*Matrix{dQ, dK, dV}
	sends := make([][]byte, 3)
	recvs := make([][]byte, 3)
	grads := make([]*Matrix, 3)
	for i, m := range lanes {
		if a.cp.Rank() == 0 {
			sends[i] = make([]byte, 0, len(m.data))
			for r := 0; r < w; r++ {
				sends[i] = append(sends[i], gatherRows(m, cpLocalRows(Zigzag, w, r, tokens)).data...)
			}
		} else {
			sends[i] = make([]byte, len(m.data))
			negZeroFill(dt, sends[i])
		}
		grads[i] = newMatrix(dt, tokens, width)
		recvs[i] = grads[i].data
	}
	if err := a.cp.ReduceScatterMany(ctx, sends, recvs, dt, native); err != nil {
		return nil, wrap("CP reduce-scatter of dQ, dK and dV", err)
	}
	return &AttnGrads{Q: grads[0], K: grads[1], V: grads[2]}, nil
}

// AttentionCore is the host reference attention over a whole sequence in
// sequence order (every CP rank runs it on the all-gathered tokens). Query i
// attends to key j when pos[j] <= pos[i]. For every head and query, in
// float32 with every operation rounded (products explicitly, so no FMA):
//
//	s_j  = float32(Σ_d q_d·k_jd) · scale          Σ: +0, then ascending d
//	m    = max_j s_j
//	p_j  = Exp32(s_j - m)
//	l    = Σ_j p_j                                ascending j
//	out  = round_dt(float32(Σ_j p_j·v_jd) / l)    ascending j
//	lse  = m + Log32(l)                           (fp32)
func AttentionCore(q, k, v *Matrix, pos []int32, heads, headDim int, scale float32) (out, lse *Matrix, err error) {
	if err := coreArgs(heads, headDim, pos, q, k, v); err != nil {
		return nil, nil, err
	}
	out, lse = attentionCore(q, k, v, pos, heads, headDim, scale)
	return out, lse, nil
}

// AttentionCoreBackward is the host reference backward of AttentionCore,
// given its out and lse. With D_i = Σ_d dout_id·out_id, p_ij =
// Exp32(s_ij - lse_i), dp_ij = Σ_d dout_id·v_jd and ds_ij = p_ij·(dp_ij -
// D_i), all float32:
//
//	dV_j = round_dt(Σ_i p_ij·dout_i)            ascending i
//	dK_j = round_dt((Σ_i ds_ij·q_i) · scale)    ascending i
//	dQ_i = round_dt((Σ_j ds_ij·k_j) · scale)    ascending j
func AttentionCoreBackward(q, k, v, out, lse, dout *Matrix, pos []int32, heads, headDim int, scale float32) (dq, dk, dv *Matrix, err error) {
	if err := coreArgs(heads, headDim, pos, q, k, v, out, dout); err != nil {
		return nil, nil, nil, err
	}
	if lse == nil || lse.dt != dtype.FP32 || lse.rows != q.rows || lse.cols != heads {
		return nil, nil, nil, fmt.Errorf("%w: AttentionCoreBackward: lse must be fp32 %d×%d", ErrInvalidArgument, q.rows, heads)
	}
	dq, dk, dv = attentionCoreBackward(q, k, v, out, lse, dout, pos, heads, headDim, scale)
	return dq, dk, dv, nil
}

func coreArgs(heads, headDim int, pos []int32, ms ...*Matrix) error {
	if heads < 1 || headDim < 1 {
		return fmt.Errorf("%w: %d heads of dimension %d", ErrInvalidArgument, heads, headDim)
	}
	for _, m := range ms {
		if m == nil || m.dt != ms[0].dt || m.rows != len(pos) || m.cols != heads*headDim {
			return fmt.Errorf("%w: attention tensors must share a dtype and be %d×%d (one row per position id)", ErrInvalidArgument, len(pos), heads*headDim)
		}
	}
	return matrixDType(ms[0].dt)
}

func attentionCore(q, k, v *Matrix, pos []int32, heads, hd int, scale float32) (*Matrix, *Matrix) {
	n, width, dt := q.rows, q.cols, q.dt
	qf, kf, vf := q.Float32s(), k.Float32s(), v.Float32s()
	out := newMatrix(dt, n, width)
	lse := newMatrix(dtype.FP32, n, heads)
	s := make([]float32, n)
	o := make([]float32, hd)
	for h := 0; h < heads; h++ {
		c0 := h * hd
		for i := 0; i < n; i++ {
			qi := qf[i*width+c0 : i*width+c0+hd]
			m := float32(math.Inf(-1))
			for j := 0; j < n; j++ {
				if pos[j] > pos[i] {
					continue
				}
				kj := kf[j*width+c0 : j*width+c0+hd]
				var acc float32
				for d, x := range qi {
					acc += float32(x * kj[d])
				}
				s[j] = float32(acc * scale)
				if s[j] > m {
					m = s[j]
				}
			}
			var l float32
			clear(o)
			for j := 0; j < n; j++ {
				if pos[j] > pos[i] {
					continue
				}
				p := Exp32(float32(s[j] - m))
				l += p
				vj := vf[j*width+c0 : j*width+c0+hd]
				for d := range o {
					o[d] += float32(p * vj[d])
				}
			}
			for d, x := range o {
				store(dt, out.data, i*width+c0+d, float32(x/l))
			}
			store(dtype.FP32, lse.data, i*heads+h, float32(m+Log32(l)))
		}
	}
	return out, lse
}

func attentionCoreBackward(q, k, v, out, lse, dout *Matrix, pos []int32, heads, hd int, scale float32) (*Matrix, *Matrix, *Matrix) {
	n, width, dt := q.rows, q.cols, q.dt
	qf, kf, vf, of, gf := q.Float32s(), k.Float32s(), v.Float32s(), out.Float32s(), dout.Float32s()
	lf := lse.Float32s()
	dqa := make([]float32, n*width)
	dka := make([]float32, n*width)
	dva := make([]float32, n*width)
	for h := 0; h < heads; h++ {
		c0 := h * hd
		row := func(f []float32, i int) []float32 { return f[i*width+c0 : i*width+c0+hd] }
		for i := 0; i < n; i++ {
			qi, gi := row(qf, i), row(gf, i)
			var D float32
			for d, x := range gi {
				D += float32(x * of[i*width+c0+d])
			}
			li := lf[i*heads+h]
			dqi := row(dqa, i)
			for j := 0; j < n; j++ {
				if pos[j] > pos[i] {
					continue
				}
				kj, vj := row(kf, j), row(vf, j)
				var acc float32
				for d, x := range qi {
					acc += float32(x * kj[d])
				}
				p := Exp32(float32(float32(acc*scale) - li))
				var dp float32
				for d, x := range gi {
					dp += float32(x * vj[d])
				}
				ds := float32(p * float32(dp-D))
				dkj, dvj := row(dka, j), row(dva, j)
				for d := 0; d < hd; d++ {
					dqi[d] += float32(ds * kj[d])
					dkj[d] += float32(ds * qi[d])
					dvj[d] += float32(p * gi[d])
				}
			}
		}
	}
	dq, dk, dv := newMatrix(dt, n, width), newMatrix(dt, n, width), newMatrix(dt, n, width)
	for i := range dqa {
		store(dt, dq.data, i, float32(dqa[i]*scale))
		store(dt, dk.data, i, float32(dka[i]*scale))
		store(dt, dv.data, i, dva[i])
	}
	return dq, dk, dv
}
