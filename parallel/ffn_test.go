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

// ffnData is one FFN problem in sequence order: x and dy are T×H, the
// weights full size.
type ffnData struct {
	dt             dtype.DType
	h, i, t        int
	x, dy          *Matrix
	gate, up, down *Matrix
}

func newFFNData(seed uint64, dt dtype.DType, h, i, t int) *ffnData {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	return &ffnData{
		dt: dt, h: h, i: i, t: t,
		x:    randMatrix(rng, dt, t, h, 1),
		dy:   randMatrix(rng, dt, t, h, 1),
		gate: randMatrix(rng, dt, h, i, 1/math.Sqrt(float64(h))),
		up:   randMatrix(rng, dt, h, i, 1/math.Sqrt(float64(h))),
		down: randMatrix(rng, dt, i, h, 1/math.Sqrt(float64(i))),
	}
}

// ffnResult is a run's outputs reassembled in sequence order and full size.
type ffnResult struct {
	y, dx, gate, up, down *Matrix
}

func (a *ffnResult) diff(b *ffnResult) string {
	var out []string
	for _, c := range []struct {
		name string
		x, y *Matrix
	}{{"y", a.y, b.y}, {"dx", a.dx, b.dx}, {"dGate", a.gate, b.gate}, {"dUp", a.up, b.up}, {"dDown", a.down, b.down}} {
		if d := bitsDiff(c.x, c.y); d != "" {
			out = append(out, c.name+": "+d)
		}
	}
	return strings.Join(out, "; ")
}

type ffnRun struct {
	tp, cp, dp int
	sp         bool
	layout     TokenLayout
	chunks     int
}

func (r ffnRun) String() string {
	s := fmt.Sprintf("tp%d_cp%d", r.tp, r.cp)
	if r.dp > 1 {
		s += fmt.Sprintf("_dp%d", r.dp)
	}
	if r.sp {
		s += "_sp"
	}
	if r.cp > 1 {
		s += "_" + r.layout.String()
	}
	if r.chunks != 0 && r.chunks != DefaultChunks {
		s += fmt.Sprintf("_L%d", r.chunks)
	}
	return s
}

// runFFN runs forward and backward on a tp×cp×dp mesh of goroutine ranks
// (every DP replica on the same data) and reassembles the results.
func runFFN(t *testing.T, d *ffnData, run ffnRun) *ffnResult {
	t.Helper()
	if run.dp == 0 {
		run.dp = 1
	}
	ms := newMeshes(t, run.tp, run.cp, run.dp)
	sp := 1
	if run.sp {
		sp = run.tp
	}
	sh := Sharding{Layout: run.layout, CP: run.cp, SP: sp}
	if err := sh.Check(d.t); err != nil {
		t.Fatalf("%v: %v", run, err)
	}
	y := newAssembler(d.dt, d.t, d.h)
	dx := newAssembler(d.dt, d.t, d.h)
	gate := newAssembler(d.dt, d.h, d.i)
	up := newAssembler(d.dt, d.h, d.i)
	down := newAssembler(d.dt, d.i, d.h)
	il := d.i / run.tp
	errs := make([]error, len(ms))
	done := make(chan int)
	for r, m := range ms {
		go func() {
			defer func() { done <- r }()
			errs[r] = func() error {
				ctx := context.Background()
				tc, cc, _ := m.Coords()
				spRank := 0
				if run.sp {
					spRank = tc
				}
				rows, err := sh.Rows(d.t, cc, spRank)
				if err != nil {
					return err
				}
				w, err := ShardFFNWeights(d.gate, d.up, d.down, run.tp, tc)
				if err != nil {
					return err
				}
				f, err := NewFFN(ctx, m, FFNConfig{Hidden: d.h, Intermediate: d.i, DType: d.dt, Chunks: run.chunks, SequenceParallel: run.sp, Layout: run.layout})
				if err != nil {
					return err
				}
				yt, saved, err := f.Forward(ctx, gatherRows(d.x, rows), w)
				if err != nil {
					return err
				}
				g, err := f.Backward(ctx, gatherRows(d.dy, rows), w, saved)
				if err != nil {
					return err
				}
				who := m.String()
				y.putRows(who, yt.(*Matrix), rows)
				dx.putRows(who, g.X.(*Matrix), rows)
				gate.putCols(who, g.Gate.(*Matrix), tc*il)
				up.putCols(who, g.Up.(*Matrix), tc*il)
				down.putRows(who, g.Down.(*Matrix), seq(tc*il, il))
				return nil
			}()
		}()
	}
	for range ms {
		<-done
	}
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%v rank %d: %v", run, r, err)
		}
	}
	return &ffnResult{y: y.result(t, "y"), dx: dx.result(t, "dx"), gate: gate.result(t, "dGate"), up: up.result(t, "dUp"), down: down.result(t, "dDown")}
}

func seq(lo, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = lo + i
	}
	return s
}

// TestFFNTPInvariance: TP = 2, 4, 8 (with and without sequence parallelism)
// give the bits of TP = 1, forward and backward, odd token counts included.
func TestFFNTPInvariance(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP32} {
		for _, T := range []int{1, 7, 8, 13, 24, 40} {
			d := newFFNData(uint64(T), dt, 64, 128, T)
			ref := runFFN(t, d, ffnRun{tp: 1, cp: 1})
			for _, tp := range []int{2, 4, 8} {
				for _, sp := range []bool{false, true} {
					if sp && T%tp != 0 {
						continue
					}
					run := ffnRun{tp: tp, cp: 1, sp: sp}
					t.Run(fmt.Sprintf("%v/T%d/%v", dt, T, run), func(t *testing.T) {
						if diff := runFFN(t, d, run).diff(ref); diff != "" {
							t.Fatalf("differs from tp1: %s", diff)
						}
					})
				}
			}
		}
	}
}

// TestFFNCPInvariance: CP = 2, 4, 8 in both token layouts give the bits of
// CP = 1; the weight gradients see every token in sequence order.
func TestFFNCPInvariance(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP32} {
		for _, T := range []int{16, 24, 48} {
			d := newFFNData(100+uint64(T), dt, 64, 128, T)
			ref := runFFN(t, d, ffnRun{tp: 1, cp: 1})
			for _, cp := range []int{2, 4, 8} {
				for _, layout := range []TokenLayout{Zigzag, Contiguous} {
					run := ffnRun{tp: 1, cp: cp, layout: layout}
					if (Sharding{Layout: layout, CP: cp, SP: 1}).Check(T) != nil {
						continue // e.g. 24 tokens in 16 zigzag chunks
					}
					t.Run(fmt.Sprintf("%v/T%d/%v", dt, T, run), func(t *testing.T) {
						if diff := runFFN(t, d, run).diff(ref); diff != "" {
							t.Fatalf("differs from cp1: %s", diff)
						}
					})
				}
			}
		}
	}
}

// TestFFNMeshes: TP × CP (× DP) meshes, with and without SP, against the
// single rank.
func TestFFNMeshes(t *testing.T) {
	runs := []ffnRun{
		{tp: 2, cp: 4}, {tp: 2, cp: 4, sp: true}, {tp: 4, cp: 2}, {tp: 4, cp: 2, sp: true},
		{tp: 2, cp: 2, dp: 2, sp: true}, {tp: 4, cp: 2, sp: true, layout: Contiguous}, {tp: 2, cp: 3, sp: true},
		{tp: 2, cp: 4, layout: Contiguous}, // 20 tokens: 5 (odd) per CP rank
	}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP32} {
		for _, T := range []int{20, 24, 48} {
			d := newFFNData(200+uint64(T), dt, 64, 128, T)
			ref := runFFN(t, d, ffnRun{tp: 1, cp: 1})
			for _, run := range runs {
				sp := 1
				if run.sp {
					sp = run.tp
				}
				if (Sharding{Layout: run.layout, CP: run.cp, SP: sp}).Check(T) != nil {
					continue
				}
				t.Run(fmt.Sprintf("%v/T%d/%v", dt, T, run), func(t *testing.T) {
					if diff := runFFN(t, d, run).diff(ref); diff != "" {
						t.Fatalf("differs from tp1_cp1: %s", diff)
					}
				})
			}
		}
	}
}

// TestFFNChunks12 shows the rule for other TP sizes: with L = 12 canonical
// chunks, TP = 3 and 6 (L/TP = 4, 2) give the bits of TP = 1.
func TestFFNChunks12(t *testing.T) {
	d := newFFNData(300, dtype.BF16, 64, 96, 18)
	ref := runFFN(t, d, ffnRun{tp: 1, cp: 1, chunks: 12})
	for _, run := range []ffnRun{{tp: 3, cp: 1, chunks: 12}, {tp: 6, cp: 1, sp: true, chunks: 12}, {tp: 3, cp: 2, sp: true, chunks: 12, layout: Contiguous}} {
		if diff := runFFN(t, d, run).diff(ref); diff != "" {
			t.Fatalf("%v differs from tp1: %s", run, diff)
		}
	}
	// The canonical chunks are part of the result: L = 8 gives other bits.
	if runFFN(t, d, ffnRun{tp: 1, cp: 1, chunks: 8}).diff(ref) == "" {
		t.Log("L = 8 and L = 12 happen to agree on this data")
	}
}

// TestFFNRepeatable: two runs give the same bits (no hidden state).
func TestFFNRepeatable(t *testing.T) {
	d := newFFNData(7, dtype.BF16, 64, 128, 16)
	run := ffnRun{tp: 2, cp: 2, sp: true}
	if diff := runFFN(t, d, run).diff(runFFN(t, d, run)); diff != "" {
		t.Fatal(diff)
	}
}

// ffnRef64 is the FFN in float64 on the dtype-rounded inputs, nothing
// rounded in between.
func ffnRef64(d *ffnData) (y, dx, dgate, dup, ddown []float64) {
	T, H, I := d.t, d.h, d.i
	x, dy, wg, wu, wd := toF64(d.x), toF64(d.dy), toF64(d.gate), toF64(d.up), toF64(d.down)
	g := make([]float64, T*I)
	u := make([]float64, T*I)
	a := make([]float64, T*I)
	for t := 0; t < T; t++ {
		for i := 0; i < I; i++ {
			var sg, su float64
			for h := 0; h < H; h++ {
				sg += x[t*H+h] * wg[h*I+i]
				su += x[t*H+h] * wu[h*I+i]
			}
			g[t*I+i], u[t*I+i] = sg, su
			a[t*I+i] = sg / (1 + math.Exp(-sg)) * su
		}
	}
	y = make([]float64, T*H)
	for t := 0; t < T; t++ {
		for h := 0; h < H; h++ {
			var s float64
			for i := 0; i < I; i++ {
				s += a[t*I+i] * wd[i*H+h]
			}
			y[t*H+h] = s
		}
	}
	dg := make([]float64, T*I)
	du := make([]float64, T*I)
	for t := 0; t < T; t++ {
		for i := 0; i < I; i++ {
			var da float64
			for h := 0; h < H; h++ {
				da += dy[t*H+h] * wd[i*H+h]
			}
			gg := g[t*I+i]
			s := 1 / (1 + math.Exp(-gg))
			du[t*I+i] = da * gg * s
			dg[t*I+i] = da * u[t*I+i] * s * (1 + gg*(1-s))
		}
	}
	dx = make([]float64, T*H)
	for t := 0; t < T; t++ {
		for h := 0; h < H; h++ {
			var s float64
			for i := 0; i < I; i++ {
				s += dg[t*I+i]*wg[h*I+i] + du[t*I+i]*wu[h*I+i]
			}
			dx[t*H+h] = s
		}
	}
	dgate = make([]float64, H*I)
	dup = make([]float64, H*I)
	for h := 0; h < H; h++ {
		for i := 0; i < I; i++ {
			var sg, su float64
			for t := 0; t < T; t++ {
				sg += x[t*H+h] * dg[t*I+i]
				su += x[t*H+h] * du[t*I+i]
			}
			dgate[h*I+i], dup[h*I+i] = sg, su
		}
	}
	ddown = make([]float64, I*H)
	for i := 0; i < I; i++ {
		for h := 0; h < H; h++ {
			var s float64
			for t := 0; t < T; t++ {
				s += a[t*I+i] * dy[t*H+h]
			}
			ddown[i*H+h] = s
		}
	}
	return
}

// TestFFNFloat64 compares the canonical result with float64 and logs the
// normwise relative errors max|got-ref|/max|ref| (recorded in
// docs/parallel.md).
func TestFFNFloat64(t *testing.T) {
	h, i, T := 64, 256, 40
	if longTests {
		h, i, T = 256, 1024, 128
	}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32} {
		d := newFFNData(400, dt, h, i, T)
		got := runFFN(t, d, ffnRun{tp: 2, cp: 2, sp: true})
		y, dx, dg, du, dd := ffnRef64(d)
		checkRelErr(t, dt, fmt.Sprintf("H=%d I=%d T=%d", h, i, T), []namedResult{
			{"y", got.y, y}, {"dx", got.dx, dx}, {"dGate", got.gate, dg}, {"dUp", got.up, du}, {"dDown", got.down, dd}})
	}
}

// TestFFNLong is the larger size, behind DETCOLL_LONG_TESTS=1.
func TestFFNLong(t *testing.T) {
	if !longTests {
		t.Skip("set DETCOLL_LONG_TESTS=1")
	}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP32} {
		d := newFFNData(500, dt, 256, 1024, 128)
		ref := runFFN(t, d, ffnRun{tp: 1, cp: 1})
		for _, run := range []ffnRun{{tp: 8, cp: 1, sp: true}, {tp: 2, cp: 4, sp: true}, {tp: 4, cp: 2}, {tp: 1, cp: 8}} {
			if diff := runFFN(t, d, run).diff(ref); diff != "" {
				t.Fatalf("%v %v: %s", dt, run, diff)
			}
		}
	}
}

// ffnErrs runs NewFFN, Forward and Backward with per-rank inputs chosen by
// in and returns every rank's error.
func ffnErrs(t *testing.T, ms []*Mesh, in func(m *Mesh) (FFNConfig, *Matrix, FFNWeights)) []error {
	errs := make([]error, len(ms))
	done := make(chan struct{})
	for r, m := range ms {
		go func() {
			defer func() { done <- struct{}{} }()
			ctx := context.Background()
			cfg, x, w := in(m)
			f, err := NewFFN(ctx, m, cfg)
			if err != nil {
				errs[r] = err
				return
			}
			y, saved, err := f.Forward(ctx, x, w)
			if err != nil {
				errs[r] = err
				return
			}
			_, errs[r] = f.Backward(ctx, y, w, saved)
		}()
	}
	for range ms {
		<-done
	}
	return errs
}

func TestFFNErrors(t *testing.T) {
	d := newFFNData(600, dtype.BF16, 64, 128, 16)
	base := FFNConfig{Hidden: 64, Intermediate: 128, DType: dtype.BF16, SequenceParallel: true}
	shard := func(m *Mesh, tokens int) (*Matrix, FFNWeights) {
		tc, _, _ := m.Coords()
		tp, _, _ := m.Sizes()
		w, err := ShardFFNWeights(d.gate, d.up, d.down, tp, tc)
		if err != nil {
			panic(err)
		}
		return d.x.RowSlice(0, tokens), w
	}
	cases := []struct {
		name       string
		tp, cp     int
		in         func(m *Mesh) (FFNConfig, *Matrix, FFNWeights)
		sentinel   error
		wantSubstr string
	}{
		{"SP tokens not divisible over TP (4 and 3)", 2, 1, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
			tc, _, _ := m.Coords()
			x, w := shard(m, 4-tc)
			return base, x, w
		}, ErrMismatch, "must divide by TP"},
		{"zigzag needs an even count per CP rank", 1, 2, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
			x, w := shard(m, 3)
			return base, x, w
		}, ErrInvalidArgument, "zigzag"},
		{"CP ranks with different token counts", 2, 2, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
			_, cc, _ := m.Coords()
			x, w := shard(m, 4+2*cc)
			return base, x, w
		}, ErrMismatch, "tokens="},
		{"hidden size differs on one rank", 2, 1, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
			cfg := base
			x, w := shard(m, 4)
			if m.World().Rank() == 1 {
				cfg.Hidden = 32
			}
			return cfg, x, w
		}, ErrMismatch, "hidden="},
		{"sequence parallelism on one rank only", 2, 2, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
			cfg := base
			x, w := shard(m, 4)
			if m.World().Rank() == 3 {
				cfg.SequenceParallel = false
			}
			return cfg, x, w
		}, ErrMismatch, "sequence_parallel="},
		{"wrong weight shard on one rank", 2, 2, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
			x, w := shard(m, 4)
			if m.World().Rank() == 2 {
				w.Gate = d.gate // full, not the shard
			}
			return base, x, w
		}, ErrInvalidArgument, ""},
		{"TP = 3 with L = 8 chunks", 3, 1, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
			return base, d.x, FFNWeights{}
		}, ErrInvalidArgument, "power of two"},
		{"intermediate not divisible into chunks", 1, 1, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
			cfg := base
			cfg.Intermediate = 100
			return cfg, nil, FFNWeights{}
		}, ErrInvalidArgument, "canonical chunks"},
		{"fp64", 1, 1, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
			cfg := base
			cfg.DType = dtype.FP64
			return cfg, nil, FFNWeights{}
		}, ErrInvalidArgument, "dtype"},
		{"host tensors of the wrong type", 2, 1, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
			_, w := shard(m, 4)
			return base, nil, w
		}, ErrInvalidArgument, "nil *Matrix"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ms := newMeshes(t, c.tp, c.cp, 1)
			for r, err := range ffnErrs(t, ms, c.in) {
				switch {
				case err == nil:
					t.Errorf("rank %d: no error", r)
				case !errors.Is(err, c.sentinel):
					t.Errorf("rank %d: %v does not wrap %v", r, err, c.sentinel)
				default:
					t.Logf("rank %d: %v", r, err)
				}
			}
			// The rank that rejected its own arguments says why.
			if c.wantSubstr != "" {
				found := false
				for _, err := range ffnErrs(t, ms, c.in) {
					if err != nil && strings.Contains(err.Error(), c.wantSubstr) {
						found = true
					}
				}
				if !found {
					t.Errorf("no rank's error mentions %q", c.wantSubstr)
				}
			}
			// Nothing was poisoned: a good call still works on the same mesh.
			good := ffnErrs(t, ms, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
				if c.tp == 3 {
					cfg := base
					cfg.Chunks, cfg.Intermediate = 12, 96
					tc, _, _ := m.Coords()
					dd := newFFNData(1, dtype.BF16, 64, 96, 6)
					w, _ := ShardFFNWeights(dd.gate, dd.up, dd.down, 3, tc)
					return cfg, dd.x.RowSlice(0, 2), w
				}
				x, w := shard(m, 4)
				return base, x, w
			})
			for r, err := range good {
				if err != nil {
					t.Errorf("rank %d after the error: %v", r, err)
				}
			}
		})
	}
}

// TestFFNNoGPUBackend: asking for the GPU without a registered backend is a
// clear error on every rank.
func TestFFNNoGPUBackend(t *testing.T) {
	ms := newMeshes(t, 2, 1, 1)
	errs := ffnErrs(t, ms, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
		return FFNConfig{Hidden: 64, Intermediate: 128, DType: dtype.BF16, Backend: CUDAAgRs}, nil, FFNWeights{}
	})
	for r, err := range errs {
		if !errors.Is(err, ErrNoGPUBackend) || !strings.Contains(err.Error(), "needs a GPU backend") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestShardingCheck(t *testing.T) {
	for _, c := range []struct {
		s     Sharding
		total int
		ok    bool
	}{
		{Sharding{Zigzag, 1, 1}, 7, true},
		{Sharding{Zigzag, 2, 1}, 8, true},
		{Sharding{Zigzag, 2, 1}, 6, false}, // 3 per CP rank: odd
		{Sharding{Zigzag, 2, 1}, 7, false},
		{Sharding{Zigzag, 4, 1}, 12, false}, // 3 per rank: odd
		{Sharding{Contiguous, 4, 1}, 12, true},
		{Sharding{Contiguous, 4, 2}, 12, false},
		{Sharding{Zigzag, 1, 4}, 12, true},
		{Sharding{Zigzag, 1, 8}, 12, false},
		{Sharding{Zigzag, 2, 2}, 12, true},
		{Sharding{Zigzag, 2, 2}, 6, false}, // 3 per CP rank: odd
	} {
		err := c.s.Check(c.total)
		if (err == nil) != c.ok {
			t.Errorf("%+v.Check(%d) = %v", c.s, c.total, err)
		}
		if err != nil && !errors.Is(err, detcoll.ErrInvalidArgument) {
			t.Errorf("%v does not wrap detcoll.ErrInvalidArgument", err)
		}
	}
	// Zigzag over CP = 2: chunks of 4; CP rank 1 holds chunks 1 and 2
	// (tokens 4…11); SP rank 1 of 2 the second half of those.
	if rows, err := (Sharding{Zigzag, 2, 2}).Rows(16, 1, 1); err != nil || fmt.Sprint(rows) != "[8 9 10 11]" {
		t.Errorf("Rows = %v, %v", rows, err)
	}
	if rows, err := (Sharding{Zigzag, 4, 1}).Rows(16, 0, 0); err != nil || fmt.Sprint(rows) != "[0 1 14 15]" {
		t.Errorf("Rows = %v, %v", rows, err)
	}
}
