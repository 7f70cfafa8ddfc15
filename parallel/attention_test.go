package parallel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

type attnData struct {
	dt               dtype.DType
	s, heads, hd     int
	q, k, v, dout    *Matrix
	pos              []int32
	wantNegZeroOut   [][2]int // elements of out that must be -0
	wantNegZeroGradV [][2]int // elements of dV that must be -0
}

func newAttnData(seed uint64, dt dtype.DType, s, heads, hd int) *attnData {
	rng := rand.New(rand.NewPCG(seed, 0xa77))
	d := &attnData{dt: dt, s: s, heads: heads, hd: hd,
		q: randMatrix(rng, dt, s, heads*hd, 1), k: randMatrix(rng, dt, s, heads*hd, 1),
		v: randMatrix(rng, dt, s, heads*hd, 1), dout: randMatrix(rng, dt, s, heads*hd, 1), pos: make([]int32, s)}
	for i := range d.pos {
		d.pos[i] = int32(i)
	}
	return d
}

type attnResult struct {
	out, lse, dq, dk, dv *Matrix
}

func (a *attnResult) diff(b *attnResult) string {
	var out []string
	for _, c := range []struct {
		name string
		x, y *Matrix
	}{{"out", a.out, b.out}, {"lse", a.lse, b.lse}, {"dQ", a.dq, b.dq}, {"dK", a.dk, b.dk}, {"dV", a.dv, b.dv}} {
		if d := bitsDiff(c.x, c.y); d != "" {
			out = append(out, c.name+": "+d)
		}
	}
	return strings.Join(out, "; ")
}

// runAttn runs forward and backward on a tp×cp mesh: the heads split over
// TP, the tokens zigzag over CP. Results reassembled in sequence order.
func runAttn(t *testing.T, d *attnData, backend Backend, tp, cp int) *attnResult {
	t.Helper()
	ms := newMeshes(t, tp, cp, 1)
	w := d.heads * d.hd
	out := newAssembler(d.dt, d.s, w)
	lse := newAssembler(dtype.FP32, d.s, d.heads)
	dq := newAssembler(d.dt, d.s, w)
	dk := newAssembler(d.dt, d.s, w)
	dv := newAssembler(d.dt, d.s, w)
	hl := d.heads / tp
	errs := make([]error, len(ms))
	done := make(chan struct{})
	for r, m := range ms {
		go func() {
			defer func() { done <- struct{}{} }()
			errs[r] = func() error {
				ctx := context.Background()
				tc, cc, _ := m.Coords()
				rows, err := Sharding{Layout: Zigzag, CP: cp, SP: 1}.Rows(d.s, cc, 0)
				if err != nil {
					return err
				}
				c0, c1 := tc*hl*d.hd, (tc+1)*hl*d.hd
				loc := func(x *Matrix) *Matrix { return gatherRows(x, rows).ColSlice(c0, c1) }
				pos := make([]int32, len(rows))
				for i, r := range rows {
					pos[i] = d.pos[r]
				}
				a, err := NewAttention(ctx, m.CP(), AttentionConfig{Backend: backend, Device: DeviceHost, DType: d.dt, Heads: hl, HeadDim: d.hd})
				if err != nil {
					return err
				}
				fo, err := a.Forward(ctx, loc(d.q), loc(d.k), loc(d.v), pos)
				if err != nil {
					return err
				}
				g, err := a.Backward(ctx, loc(d.dout), fo)
				if err != nil {
					return err
				}
				who := m.String()
				out.putBlock(who, fo.Out.(*Matrix), rows, c0)
				lse.putBlock(who, fo.LSE.(*Matrix), rows, tc*hl)
				dq.putBlock(who, g.Q.(*Matrix), rows, c0)
				dk.putBlock(who, g.K.(*Matrix), rows, c0)
				dv.putBlock(who, g.V.(*Matrix), rows, c0)
				return nil
			}()
		}()
	}
	for range ms {
		<-done
	}
	for r, err := range errs {
		if err != nil {
			t.Fatalf("tp%d_cp%d rank %d: %v", tp, cp, r, err)
		}
	}
	return &attnResult{out: out.result(t, "out"), lse: lse.result(t, "lse"), dq: dq.result(t, "dQ"), dk: dk.result(t, "dK"), dv: dv.result(t, "dV")}
}

// TestAttentionCPInvariance: CP = 2, 3, 4, 8 give the bits of CP = 1 for
// the output, the log-sum-exp and dQ, dK, dV.
func TestAttentionCPInvariance(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP32} {
		for _, S := range []int{16, 18, 24, 48} {
			d := newAttnData(uint64(S), dt, S, 2, 16)
			ref := runAttn(t, d, CUDAAgRs, 1, 1)
			for _, cp := range []int{2, 3, 4, 8} {
				if (Sharding{Layout: Zigzag, CP: cp, SP: 1}).Check(S) != nil {
					continue
				}
				t.Run(fmt.Sprintf("%v/S%d/cp%d", dt, S, cp), func(t *testing.T) {
					if diff := runAttn(t, d, CUDAAgRs, 1, cp).diff(ref); diff != "" {
						t.Fatalf("differs from cp1: %s", diff)
					}
				})
			}
		}
	}
}

// TestAttentionMeshes: heads over TP, tokens over CP.
func TestAttentionMeshes(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP32} {
		d := newAttnData(9, dt, 32, 4, 16)
		ref := runAttn(t, d, CUDAAgRs, 1, 1)
		for _, tc := range [][2]int{{2, 4}, {4, 2}, {2, 2}} {
			if diff := runAttn(t, d, RCCLAgRs, tc[0], tc[1]).diff(ref); diff != "" {
				t.Fatalf("%v tp%d_cp%d differs from tp1_cp1: %s", dt, tc[0], tc[1], diff)
			}
		}
	}
}

// TestAttentionBackends: on the host every name runs the same
// communication; local_debug (no group at all) gives the same bits.
func TestAttentionBackends(t *testing.T) {
	d := newAttnData(11, dtype.BF16, 7, 2, 8) // odd: fine on one rank
	ref := runAttn(t, d, CUDAAgRs, 1, 1)
	if diff := runAttn(t, d, RCCLAgRs, 1, 1).diff(ref); diff != "" {
		t.Fatal("rccl_ag_rs:", diff)
	}
	if diff := runAttn(t, d, LocalDebug, 1, 1).diff(ref); diff != "" {
		t.Fatal("local_debug:", diff)
	}
	// local_debug without a communicator.
	ctx := context.Background()
	a, err := NewAttention(ctx, nil, AttentionConfig{Backend: LocalDebug, DType: d.dt, Heads: d.heads, HeadDim: d.hd})
	if err != nil {
		t.Fatal(err)
	}
	fo, err := a.Forward(ctx, d.q, d.k, d.v, d.pos)
	if err != nil {
		t.Fatal(err)
	}
	g, err := a.Backward(ctx, d.dout, fo)
	if err != nil {
		t.Fatal(err)
	}
	got := &attnResult{fo.Out.(*Matrix), fo.LSE.(*Matrix), g.Q.(*Matrix), g.K.(*Matrix), g.V.(*Matrix)}
	if diff := got.diff(ref); diff != "" {
		t.Fatal("local_debug without a group:", diff)
	}
	// And the exported core is the same function.
	o, l, err := AttentionCore(d.q, d.k, d.v, d.pos, d.heads, d.hd, float32(1/math.Sqrt(float64(d.hd))))
	if err != nil || bitsDiff(o, ref.out) != "" || bitsDiff(l, ref.lse) != "" {
		t.Fatalf("AttentionCore: %v %s %s", err, bitsDiff(o, ref.out), bitsDiff(l, ref.lse))
	}
}

func attnErrs(comms []*detcoll.Comm, cfg func(r int) AttentionConfig, in func(r int) (q, k, v *Matrix, pos []int32)) []error {
	return onRanks(comms, func(r int, c *detcoll.Comm) error {
		ctx := context.Background()
		a, err := NewAttention(ctx, c, cfg(r))
		if err != nil {
			return err
		}
		q, k, v, pos := in(r)
		fo, err := a.Forward(ctx, q, k, v, pos)
		if err != nil {
			return err
		}
		_, err = a.Backward(ctx, fo.Out, fo)
		return err
	})
}

func TestAttentionErrors(t *testing.T) {
	d := newAttnData(12, dtype.BF16, 16, 2, 8)
	good := AttentionConfig{Backend: CUDAAgRs, Device: DeviceHost, DType: dtype.BF16, Heads: 2, HeadDim: 8}
	rows := func(n int) func(int) (q, k, v *Matrix, pos []int32) {
		return func(int) (q, k, v *Matrix, pos []int32) {
			return d.q.RowSlice(0, n), d.k.RowSlice(0, n), d.v.RowSlice(0, n), d.pos[:n]
		}
	}
	cases := []struct {
		name     string
		cp       int
		cfg      func(r int) AttentionConfig
		in       func(r int) (q, k, v *Matrix, pos []int32)
		sentinel error
		substr   string
		alt      error // also accepted
	}{
		{"odd tokens per CP rank", 2, func(int) AttentionConfig { return good }, rows(3), ErrInvalidArgument, "even number", nil},
		{"tokens differ over CP", 4, func(int) AttentionConfig { return good }, func(r int) (q, k, v *Matrix, pos []int32) {
			return rows(4 + 2*(r%2))(r)
		}, ErrMismatch, "tokens=6", nil},
		{"position ids short on one rank", 2, func(int) AttentionConfig { return good }, func(r int) (q, k, v *Matrix, pos []int32) {
			q, k, v, pos = rows(4)(r)
			if r == 1 {
				pos = pos[:3]
			}
			return
		}, ErrInvalidArgument, "position ids", nil},
		{"heads differ over CP", 2, func(r int) AttentionConfig {
			c := good
			c.Heads = 2 - r%2
			return c
		}, rows(4), ErrMismatch, "heads=", nil},
		{"local_debug on two ranks", 2, func(int) AttentionConfig {
			c := good
			c.Backend = LocalDebug
			return c
		}, rows(4), ErrInvalidArgument, "single-rank", nil},
		{"cuda_ag_rs on the GPU without a GPU backend", 2, func(int) AttentionConfig {
			c := good
			c.Device = DeviceAuto
			return c
		}, rows(4), ErrNoGPUBackend, "needs a GPU backend", nil},
		{"rccl_ag_rs forced onto the GPU on one rank", 2, func(r int) AttentionConfig {
			c := good
			c.Backend = RCCLAgRs
			if r == 1 {
				c.Device = DeviceGPU
			}
			return c
		}, rows(4), ErrInvalidArgument, "needs a GPU backend", ErrNoGPUBackend},
		{"no backend", 2, func(int) AttentionConfig {
			c := good
			c.Backend = ""
			return c
		}, rows(4), ErrInvalidArgument, "Backend is empty", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			comms := newWorld(t, c.cp)
			errs := attnErrs(comms, c.cfg, c.in)
			found := false
			for r, err := range errs {
				switch {
				case err == nil:
					t.Errorf("rank %d: no error", r)
				case !errors.Is(err, c.sentinel) && (c.alt == nil || !errors.Is(err, c.alt)):
					t.Errorf("rank %d: %v does not wrap %v", r, err, c.sentinel)
				default:
					t.Logf("rank %d: %v", r, err)
				}
				if err != nil && strings.Contains(err.Error(), c.substr) {
					found = true
				}
			}
			if !found {
				t.Errorf("no rank's error mentions %q", c.substr)
			}
			// The communicators are still usable.
			for r, err := range attnErrs(comms, func(int) AttentionConfig { return good }, rows(4)) {
				if err != nil {
					t.Errorf("rank %d after the error: %v", r, err)
				}
			}
		})
	}
}

// negZeroData builds inputs whose exact output has -0 elements: every
// score is 0 (q = 0), so query i averages v over keys 0…i; column 0 of v is
// -tiny for key 0 and -0 elsewhere, so out[i][0] = -tiny/(i+1), which
// rounds to -0 for i >= 1. For bf16 the gradient dV gets -0s the same way
// from a tiny negative dout.
func negZeroData(dt dtype.DType, s int) *attnData {
	d := newAttnData(13, dt, s, 1, 4)
	d.q, _ = NewMatrix(dt, s, 4)
	tiny := math.Float32frombits(0x80000001) // fp32: smallest subnormal
	if dt == dtype.BF16 {
		tiny = dtype.BF16ToFloat32(0x8001) // bf16: smallest subnormal
	}
	negZero := float32(math.Copysign(0, -1))
	for i := 0; i < s; i++ {
		d.v.Set(i, 0, negZero)
		d.dout.Set(i, 0, negZero)
		if i >= 1 {
			d.wantNegZeroOut = append(d.wantNegZeroOut, [2]int{i, 0})
		}
	}
	d.v.Set(0, 0, tiny)
	if dt == dtype.BF16 {
		d.dout.Set(s-1, 0, tiny)
		for j := 0; j < s; j++ {
			d.wantNegZeroGradV = append(d.wantNegZeroGradV, [2]int{j, 0})
		}
	}
	return d
}

// TestAttentionNegativeZero: the root's -0s reach every rank's shard (the
// forward's Scatter moves bits; the backward's reduce-scatter pads with -0),
// while the seed's +0-padded reduce-scatter would turn them into +0.
func TestAttentionNegativeZero(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.FP32, dtype.BF16} {
		d := negZeroData(dt, 8)
		ref := runAttn(t, d, CUDAAgRs, 1, 1)
		sign := uint32(0x80000000)
		if dt == dtype.BF16 {
			sign = 0x8000
		}
		for _, cp := range []int{1, 2, 4} {
			got := runAttn(t, d, CUDAAgRs, 1, cp)
			if diff := got.diff(ref); diff != "" {
				t.Fatalf("%v cp%d: %s", dt, cp, diff)
			}
			for _, e := range d.wantNegZeroOut {
				if b := got.out.Bits(e[0], e[1]); b != sign {
					t.Fatalf("%v cp%d: out%v = %#x, want -0", dt, cp, e, b)
				}
			}
			for _, e := range d.wantNegZeroGradV {
				if b := got.dv.Bits(e[0], e[1]); b != sign {
					t.Fatalf("%v cp%d: dV%v = %#x, want -0", dt, cp, e, b)
				}
			}
		}
		// The seed's emulation of the scatter: a reduce-scatter in which the
		// root contributes its output and the others +0. -0 + +0 = +0.
		const cp = 2
		full := ref.out
		comms := newWorld(t, cp)
		shards := make([]*Matrix, cp)
		mustRanks(t, comms, func(r int, c *detcoll.Comm) error {
			send := make([]byte, len(full.data))
			if r == 0 {
				send = send[:0]
				for q := 0; q < cp; q++ {
					send = append(send, gatherRows(full, cpLocalRows(Zigzag, cp, q, d.s/cp)).data...)
				}
			}
			shards[r] = newMatrix(dt, d.s/cp, full.cols)
			return c.ReduceScatter(context.Background(), send, shards[r].data, dt)
		})
		lost := 0
		for r, sh := range shards {
			for i, l := range cpLocalRows(Zigzag, cp, r, d.s/cp) {
				if full.Bits(l, 0) == sign && sh.Bits(i, 0) == 0 {
					lost++
				}
			}
		}
		if lost == 0 {
			t.Fatalf("%v: expected the +0-padded reduce-scatter to lose -0s", dt)
		}
		t.Logf("%v: the seed's +0-padded reduce-scatter turns %d of %d -0s into +0; detcoll keeps them all", dt, lost, len(d.wantNegZeroOut))
	}
}

// attnRef64 is attention in float64 on the dtype-rounded inputs.
func attnRef64(d *attnData, scale float64) (out, lse, dq, dk, dv []float64) {
	S, H, hd := d.s, d.heads, d.hd
	w := H * hd
	q, k, v, g := toF64(d.q), toF64(d.k), toF64(d.v), toF64(d.dout)
	out = make([]float64, S*w)
	lse = make([]float64, S*H)
	dq = make([]float64, S*w)
	dk = make([]float64, S*w)
	dv = make([]float64, S*w)
	P := make([]float64, S*S)
	for h := 0; h < H; h++ {
		c0 := h * hd
		for i := 0; i < S; i++ {
			m := math.Inf(-1)
			s := make([]float64, S)
			for j := 0; j <= i; j++ {
				for dd := 0; dd < hd; dd++ {
					s[j] += q[i*w+c0+dd] * k[j*w+c0+dd]
				}
				s[j] *= scale
				m = math.Max(m, s[j])
			}
			var l float64
			for j := 0; j <= i; j++ {
				l += math.Exp(s[j] - m)
			}
			for j := 0; j <= i; j++ {
				P[i*S+j] = math.Exp(s[j]-m) / l
				for dd := 0; dd < hd; dd++ {
					out[i*w+c0+dd] += P[i*S+j] * v[j*w+c0+dd]
				}
			}
			lse[i*H+h] = m + math.Log(l)
		}
		for i := 0; i < S; i++ {
			var D float64
			for dd := 0; dd < hd; dd++ {
				D += g[i*w+c0+dd] * out[i*w+c0+dd]
			}
			for j := 0; j <= i; j++ {
				var dp float64
				for dd := 0; dd < hd; dd++ {
					dp += g[i*w+c0+dd] * v[j*w+c0+dd]
				}
				ds := P[i*S+j] * (dp - D)
				for dd := 0; dd < hd; dd++ {
					dv[j*w+c0+dd] += P[i*S+j] * g[i*w+c0+dd]
					dq[i*w+c0+dd] += ds * k[j*w+c0+dd] * scale
					dk[j*w+c0+dd] += ds * q[i*w+c0+dd] * scale
				}
			}
		}
	}
	return
}

// TestAttentionFloat64 logs the normwise relative errors against float64
// (recorded in docs/parallel.md).
func TestAttentionFloat64(t *testing.T) {
	S, heads, hd := 48, 2, 32
	if longTests {
		S, heads, hd = 256, 4, 64
	}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32} {
		d := newAttnData(14, dt, S, heads, hd)
		got := runAttn(t, d, CUDAAgRs, 1, 4)
		out, lse, dq, dk, dv := attnRef64(d, float64(float32(1/math.Sqrt(float64(hd)))))
		checkRelErr(t, dt, fmt.Sprintf("S=%d heads=%d head_dim=%d", S, heads, hd), []namedResult{
			{"out", got.out, out}, {"lse", got.lse, lse}, {"dQ", got.dq, dq}, {"dK", got.dk, dk}, {"dV", got.dv, dv}})
	}
}

// TestAttentionLong is the larger size, behind DETCOLL_LONG_TESTS=1.
func TestAttentionLong(t *testing.T) {
	if !longTests {
		t.Skip("set DETCOLL_LONG_TESTS=1")
	}
	d := newAttnData(15, dtype.BF16, 256, 8, 64)
	ref := runAttn(t, d, CUDAAgRs, 1, 1)
	for _, tc := range [][2]int{{1, 8}, {2, 4}, {8, 1}} {
		if diff := runAttn(t, d, CUDAAgRs, tc[0], tc[1]).diff(ref); diff != "" {
			t.Fatalf("tp%d_cp%d: %s", tc[0], tc[1], diff)
		}
	}
}
