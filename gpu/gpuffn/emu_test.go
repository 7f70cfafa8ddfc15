package gpuffn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/cublas"
	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/parallel"
	"github.com/detcoll/detcoll/reduce"
)

// hostOps runs a Layer's plan on the host: an emulated device memory with
// bounds-checked addresses, cuBLAS calls interpreted by their column-major
// definition with the host reference's arithmetic inside a chunk (a
// float32 accumulator from +0 adding float32-rounded products in
// ascending k, rounded once to bf16), reduce.Oracle for the trees, the host
// formulas for SwiGLU and the host communicator for the all-reduce. With
// that arithmetic the layer must give package parallel's bits exactly: the
// test of the plan (offsets, strides, transpositions, blocks, lanes and
// trees) that needs no GPU.
type hostOps struct {
	mu    sync.Mutex
	mem   map[cuda.DevicePtr][]byte
	bases []cuda.DevicePtr // ascending
	next  cuda.DevicePtr
	comm  *detcoll.Comm
	calls []gemmCall

	timing   bool
	recorded []Timing
	corrupt  bool // flip an exponent bit of every GEMM's first output (tests of the checks)
}

func newHostOps(comm *detcoll.Comm) *hostOps {
	return &hostOps{mem: map[cuda.DevicePtr][]byte{}, next: 1 << 30, comm: comm}
}

func (h *hostOps) live() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.mem)
}

// view returns n bytes at p, which must lie inside one live allocation.
func (h *hostOps) view(p cuda.DevicePtr, n int) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := sort.Search(len(h.bases), func(i int) bool { return h.bases[i] > p }) - 1
	if i < 0 {
		return nil, fmt.Errorf("emulator: address %#x is not allocated", uint64(p))
	}
	b, ok := h.mem[h.bases[i]]
	off := int(p - h.bases[i])
	if !ok || off+n > len(b) || n < 0 {
		return nil, fmt.Errorf("emulator: [%#x, +%d) outside the allocation at %#x (%d bytes, live %v)", uint64(p), n, uint64(h.bases[i]), len(b), ok)
	}
	return b[off : off+n], nil
}

func (h *hostOps) alloc(n int) (cuda.DevicePtr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n <= 0 {
		return 0, fmt.Errorf("emulator: alloc %d", n)
	}
	p := h.next
	h.next += cuda.DevicePtr((n+511)/512*512 + 512) // a gap catches overruns
	h.mem[p] = make([]byte, n)
	for i := range h.mem[p] {
		h.mem[p][i] = 0xA5 // uninitialised memory is garbage
	}
	h.bases = append(h.bases, p)
	return p, nil
}

func (h *hostOps) free(p cuda.DevicePtr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.mem[p]; !ok {
		return fmt.Errorf("emulator: free of %#x, not an allocation", uint64(p))
	}
	delete(h.mem, p)
	return nil
}

func (h *hostOps) upload(dst cuda.DevicePtr, src []byte) error {
	b, err := h.view(dst, len(src))
	if err != nil {
		return err
	}
	copy(b, src)
	return nil
}

func (h *hostOps) download(dst []byte, src cuda.DevicePtr) error {
	b, err := h.view(src, len(dst))
	if err != nil {
		return err
	}
	copy(dst, b)
	return nil
}

func (h *hostOps) do(fn func() error) error { return fn() }

func bf16At(b []byte, i int) float32 {
	return dtype.BF16ToFloat32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
}

func putBF16(b []byte, i int, v float32) {
	u := dtype.Float32ToBF16(v)
	b[2*i], b[2*i+1] = byte(u), byte(u>>8)
}

func (h *hostOps) gemm(g cublas.Gemm, batched bool) error {
	if err := g.Check(batched); err != nil {
		return err
	}
	if g.Alpha != 1 || g.Beta != 0 || g.AType != cublas.R16BF || g.BType != cublas.R16BF || g.CType != cublas.R16BF {
		return fmt.Errorf("emulator: unexpected scalars or types in %+v", g)
	}
	h.mu.Lock()
	h.calls = append(h.calls, gemmCall{g: g, batched: batched})
	h.mu.Unlock()
	batch := 1
	if batched {
		batch = g.Batch
	}
	// Extent in elements of a column-major operand with the given rows
	// and columns as stored.
	extent := func(rows, cols, ld int) int {
		if rows == 0 || cols == 0 {
			return 0
		}
		return (cols-1)*ld + rows
	}
	ar, ac := g.M, g.K
	if g.TransA == cublas.OpT {
		ar, ac = g.K, g.M
	}
	br, bc := g.K, g.N
	if g.TransB == cublas.OpT {
		br, bc = g.N, g.K
	}
	for bi := 0; bi < batch; bi++ {
		pa := g.A + cuda.DevicePtr(int64(bi)*g.StrideA*2)
		pb := g.B + cuda.DevicePtr(int64(bi)*g.StrideB*2)
		pc := g.C + cuda.DevicePtr(int64(bi)*g.StrideC*2)
		A, err := h.view(pa, 2*extent(ar, ac, g.LDA))
		if err != nil {
			return fmt.Errorf("A of batch %d: %w", bi, err)
		}
		B, err := h.view(pb, 2*extent(br, bc, g.LDB))
		if err != nil {
			return fmt.Errorf("B of batch %d: %w", bi, err)
		}
		C, err := h.view(pc, 2*extent(g.M, g.N, g.LDC))
		if err != nil {
			return fmt.Errorf("C of batch %d: %w", bi, err)
		}
		for j := 0; j < g.N; j++ {
			for i := 0; i < g.M; i++ {
				var acc float32 // +0
				for p := 0; p < g.K; p++ {
					ia := i + p*g.LDA
					if g.TransA == cublas.OpT {
						ia = p + i*g.LDA
					}
					ib := p + j*g.LDB
					if g.TransB == cublas.OpT {
						ib = j + p*g.LDB
					}
					acc += float32(bf16At(A, ia) * bf16At(B, ib))
				}
				putBF16(C, i+j*g.LDC, acc)
			}
		}
		if h.corrupt && len(C) > 0 {
			C[1] ^= 0x40 // an exponent bit: no sum rounds it away
		}
	}
	return nil
}

func (h *hostOps) reduceInto(out cuda.DevicePtr, in []cuda.DevicePtr, count int) error {
	bufs := make([][]byte, len(in))
	for r, p := range in {
		b, err := h.view(p, 2*count)
		if err != nil {
			return err
		}
		bufs[r] = append([]byte(nil), b...)
	}
	o, err := h.view(out, 2*count)
	if err != nil {
		return err
	}
	res := make([]byte, 2*count)
	if err := reduce.Oracle(dtype.BF16, reduce.Native, bufs, res); err != nil {
		return err
	}
	copy(o, res)
	return nil
}

func (h *hostOps) reduce(out, base cuda.DevicePtr, stride, w, count int) error {
	in := make([]cuda.DevicePtr, w)
	for r := range in {
		in[r] = base + cuda.DevicePtr(r*stride)
	}
	return h.reduceInto(out, in, count)
}

func (h *hostOps) reduce2(out, a, b cuda.DevicePtr, count int) error {
	return h.reduceInto(out, []cuda.DevicePtr{a, b}, count)
}

func (h *hostOps) zero(p cuda.DevicePtr, n int) error {
	b, err := h.view(p, n)
	if err != nil {
		return err
	}
	clear(b)
	return nil
}

// The host formulas of package parallel (arith.go), restated with its
// exported pieces; every product and sum rounded to float32.
func hostSwiGLU(g, u float32) float32 { return float32(parallel.SiLU32(g) * u) }

func hostSwiGLUGrad(g, u, da float32) (dg, du float32) {
	s := parallel.Sigmoid32(g)
	du = float32(da * float32(g*s))
	dsilu := float32(s * float32(1+float32(g*float32(1-s))))
	dg = float32(float32(da*u) * dsilu)
	return dg, du
}

func (h *hostOps) elementwise(ptrs []cuda.DevicePtr, perBlock, blocks, stride int, fn func(v []float32) []float32) error {
	span := 2 * ((blocks-1)*stride + perBlock)
	views := make([][]byte, len(ptrs))
	for i, p := range ptrs {
		b, err := h.view(p, span)
		if err != nil {
			return err
		}
		views[i] = b
	}
	in := make([]float32, len(ptrs))
	for b := 0; b < blocks; b++ {
		for k := 0; k < perBlock; k++ {
			off := b*stride + k
			for i, v := range views {
				in[i] = bf16At(v, off)
			}
			for i, r := range fn(in) {
				putBF16(views[i], off, r)
			}
		}
	}
	return nil
}

func (h *hostOps) swigluFwd(a, g, u cuda.DevicePtr, perBlock, blocks, stride int) error {
	return h.elementwise([]cuda.DevicePtr{a, g, u}, perBlock, blocks, stride, func(v []float32) []float32 {
		return []float32{hostSwiGLU(v[1], v[2])}
	})
}

func (h *hostOps) swigluBwd(dg, du, g, u, da cuda.DevicePtr, perBlock, blocks, stride int) error {
	return h.elementwise([]cuda.DevicePtr{dg, du, g, u, da}, perBlock, blocks, stride, func(v []float32) []float32 {
		a, b := hostSwiGLUGrad(v[2], v[3], v[4])
		return []float32{a, b}
	})
}

func (h *hostOps) allReduce(ctx context.Context, p cuda.DevicePtr, count int) error {
	if h.comm == nil {
		return nil
	}
	b, err := h.view(p, 2*count)
	if err != nil {
		return err
	}
	tmp := append([]byte(nil), b...)
	if err := h.comm.AllReduce(ctx, tmp, tmp, dtype.BF16, detcoll.WithAccumulate(detcoll.AccumulateNative)); err != nil {
		return err
	}
	copy(b, tmp)
	return nil
}

// The emulated timings are 1 µs per GEMM call issued inside a span.
func (h *hostOps) span(name string, collective bool) func() error {
	if !h.timing {
		return noop
	}
	h.mu.Lock()
	start := len(h.calls)
	h.mu.Unlock()
	return func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.recorded = append(h.recorded, Timing{Name: name, Collective: collective, Microseconds: float64(len(h.calls) - start)})
		return nil
	}
}

func (h *hostOps) setTiming(on bool) { h.timing = on }

func (h *hostOps) timings() ([]Timing, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.recorded
	h.recorded = nil
	return out, nil
}

func (h *hostOps) sync() error  { return nil }
func (h *hostOps) close() error { return nil }

// ---- inputs and the host reference ----

type ffnInputs struct {
	x, dy, gate, up, down *parallel.Matrix
}

func randBF16(seed uint64, rows, cols int, scale float64) *parallel.Matrix {
	rng := rand.New(rand.NewPCG(seed, 0x9E3779B97F4A7C15))
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	m, err := parallel.MatrixFromFloat32(dtype.BF16, rows, cols, v)
	if err != nil {
		panic(err)
	}
	return m
}

// makeInputs draws x, dy ~ N(0, 1) and weights with standard deviation
// 1/sqrt(fan-in), the same on every rank for a seed.
func makeInputs(seed uint64, h, i, t int) ffnInputs {
	var in ffnInputs
	var wg sync.WaitGroup
	for k, f := range []func(){
		func() { in.x = randBF16(seed+1, t, h, 1) },
		func() { in.dy = randBF16(seed+2, t, h, 1) },
		func() { in.gate = randBF16(seed+3, h, i, 1/math.Sqrt(float64(h))) },
		func() { in.up = randBF16(seed+4, h, i, 1/math.Sqrt(float64(h))) },
		func() { in.down = randBF16(seed+5, i, h, 1/math.Sqrt(float64(i))) },
	} {
		_ = k
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	wg.Wait()
	return in
}

type ffnResult struct {
	y, dx, dGate, dUp, dDown *parallel.Matrix // weight gradients: this rank's shards
}

// runLayerOn runs forward and backward through a Layer and downloads the
// results, freeing everything.
func runLayerOn(ctx context.Context, l *Layer, in ffnInputs) (res ffnResult, err error) {
	w, err := l.UploadWeights(in.gate, in.up, in.down)
	if err != nil {
		return res, err
	}
	defer l.Free(w.Gate, w.Up, w.Down)
	x, err := l.Upload(in.x, 1, false)
	if err != nil {
		return res, err
	}
	defer l.Free(x)
	dy, err := l.Upload(in.dy, 1, false)
	if err != nil {
		return res, err
	}
	defer l.Free(dy)
	y, s, err := l.Forward(ctx, x, w)
	if err != nil {
		return res, err
	}
	defer l.Free(y)
	defer l.FreeSaved(s)
	g, err := l.Backward(ctx, dy, w, s)
	if err != nil {
		return res, err
	}
	defer l.FreeGrads(g)
	for _, d := range []struct {
		dst **parallel.Matrix
		t   *Tensor
	}{{&res.y, y}, {&res.dx, g.X}, {&res.dGate, g.Gate}, {&res.dUp, g.Up}, {&res.dDown, g.Down}} {
		if *d.dst, err = l.Download(d.t); err != nil {
			return res, err
		}
	}
	return res, nil
}

func newComms(t testing.TB, w int) []*detcoll.Comm {
	t.Helper()
	comms, err := detcoll.NewInProc(w, detcoll.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

func onRanks(n int, fn func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = fn(r) }()
	}
	wg.Wait()
	return errs
}

// TestEmulatedLayerEqualsHost: the layer's whole plan, run with the host
// reference's arithmetic, gives package parallel's host FFN bits at every
// TP size — so the plan computes the same sums, chunks, trees and lanes.
func TestEmulatedLayerEqualsHost(t *testing.T) {
	const H, I = 64, 128
	ctx := context.Background()
	for _, tp := range []int{1, 2, 4, 8} {
		for _, T := range []int{1, 7, 13, 16} {
			t.Run(fmt.Sprintf("tp%d_T%d", tp, T), func(t *testing.T) {
				in := makeInputs(uint64(100*tp+T), H, I, T)
				comms := newComms(t, tp)
				leaks := make([]int, tp)
				errs := onRanks(tp, func(r int) error {
					m, err := parallel.NewMesh(ctx, comms[r], tp, 1, 1)
					if err != nil {
						return err
					}
					f, err := parallel.NewFFN(ctx, m, parallel.FFNConfig{Hidden: H, Intermediate: I, DType: dtype.BF16})
					if err != nil {
						return err
					}
					w, err := parallel.ShardFFNWeights(in.gate, in.up, in.down, tp, r)
					if err != nil {
						return err
					}
					y, saved, err := f.Forward(ctx, in.x, w)
					if err != nil {
						return err
					}
					hg, err := f.Backward(ctx, in.dy, w, saved)
					if err != nil {
						return err
					}
					l, err := newLayer(Config{Hidden: H, Intermediate: I}, tp, r)
					if err != nil {
						return err
					}
					var tpc *detcoll.Comm
					if tp > 1 {
						tpc = m.TP()
					}
					ho := newHostOps(tpc)
					l.ops = ho
					got, err := runLayerOn(ctx, l, in)
					if err != nil {
						return err
					}
					if err := l.Close(); err != nil {
						return err
					}
					leaks[r] = ho.live()
					for _, c := range []struct {
						name      string
						got, want *parallel.Matrix
					}{{"y", got.y, y.(*parallel.Matrix)}, {"dx", got.dx, hg.X.(*parallel.Matrix)},
						{"dGate", got.dGate, hg.Gate.(*parallel.Matrix)}, {"dUp", got.dUp, hg.Up.(*parallel.Matrix)},
						{"dDown", got.dDown, hg.Down.(*parallel.Matrix)}} {
						if !parallel.BitsEqual(c.got, c.want) {
							return fmt.Errorf("%s differs from the host reference: %s", c.name, firstDiff(c.got, c.want))
						}
					}
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
					if leaks[r] != 0 {
						t.Errorf("rank %d: %d allocations left after Close", r, leaks[r])
					}
				}
			})
		}
	}
}

// firstDiff describes where two matrices differ.
func firstDiff(a, b *parallel.Matrix) string {
	if a.Rows() != b.Rows() || a.Cols() != b.Cols() {
		return fmt.Sprintf("shapes %d×%d and %d×%d", a.Rows(), a.Cols(), b.Rows(), b.Cols())
	}
	n, first := 0, ""
	for i := 0; i < a.Rows(); i++ {
		for j := 0; j < a.Cols(); j++ {
			if a.Bits(i, j) != b.Bits(i, j) {
				if n == 0 {
					first = fmt.Sprintf("first at (%d, %d): %#04x (%g) vs %#04x (%g)", i, j, a.Bits(i, j), a.At(i, j), b.Bits(i, j), b.At(i, j))
				}
				n++
			}
		}
	}
	if n == 0 {
		return "equal"
	}
	return fmt.Sprintf("%d of %d elements differ; %s", n, a.Rows()*a.Cols(), first)
}

// callKey is a cuBLAS call with each pointer reduced to its alignment: what
// cuBLAS sees when it chooses a kernel.
type callKey struct {
	g       cublas.Gemm
	batched bool
}

func keyOf(c gemmCall) callKey {
	g := c.g
	g.A, g.B, g.C = g.A%blockAlign, g.B%blockAlign, g.C%blockAlign
	return callKey{g: g, batched: c.batched}
}

// TestPlanSameCallsAtEveryTP: the cuBLAS calls of the TP ranks together are
// exactly the calls of the TP = 1 layer (same parameters, same pointer
// alignment), the premise of the TP invariance on the GPU.
func TestPlanSameCallsAtEveryTP(t *testing.T) {
	ctx := context.Background()
	for _, sh := range []struct{ h, i, t int }{{64, 128, 7}, {64, 128, 16}, {96, 192, 5}, {256, 512, 7}} {
		in := makeInputs(7, sh.h, sh.i, sh.t)
		callsAt := func(tp int) map[callKey]int {
			comms := newComms(t, tp)
			calls := make([][]gemmCall, tp)
			errs := onRanks(tp, func(r int) error {
				l, err := newLayer(Config{Hidden: sh.h, Intermediate: sh.i}, tp, r)
				if err != nil {
					return err
				}
				var c *detcoll.Comm
				if tp > 1 {
					c = comms[r]
				}
				ho := newHostOps(c)
				l.ops = ho
				if _, err := runLayerOn(ctx, l, in); err != nil {
					return err
				}
				calls[r] = ho.calls
				return l.Close()
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("H=%d I=%d T=%d tp%d rank %d: %v", sh.h, sh.i, sh.t, tp, r, err)
				}
			}
			m := map[callKey]int{}
			for _, cs := range calls {
				for _, c := range cs {
					m[keyOf(c)]++
				}
			}
			return m
		}
		ref := callsAt(1)
		n := 0
		for _, v := range ref {
			n += v
		}
		for _, tp := range []int{2, 4, 8} {
			got := callsAt(tp)
			if len(got) != len(ref) {
				t.Errorf("H=%d I=%d T=%d: tp%d makes %d distinct calls, tp1 %d", sh.h, sh.i, sh.t, tp, len(got), len(ref))
			}
			for k, v := range ref {
				if got[k] != v {
					t.Errorf("H=%d I=%d T=%d: call %+v: tp1 makes it %d times, the tp%d ranks %d", sh.h, sh.i, sh.t, k, v, tp, got[k])
				}
			}
		}
		t.Logf("H=%d I=%d T=%d: %d cuBLAS calls, %d distinct, identical at TP = 1, 2, 4, 8", sh.h, sh.i, sh.t, n, len(ref))
	}
}

func TestTensorLayout(t *testing.T) {
	m := randBF16(3, 6, 12, 1)
	for _, c := range []struct {
		blocks int
		byCols bool
	}{{1, false}, {3, true}, {4, true}, {2, false}, {3, false}, {6, false}} {
		tt, err := layout(6, 12, c.blocks, c.byCols)
		if err != nil {
			t.Fatal(err)
		}
		if c.blocks > 1 && tt.stride%blockAlign != 0 {
			t.Fatalf("stride %d not aligned", tt.stride)
		}
		b, err := tt.pack(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != tt.bytes() {
			t.Fatalf("packed %d bytes, want %d", len(b), tt.bytes())
		}
		back, err := tt.unpack(b)
		if err != nil {
			t.Fatal(err)
		}
		if !parallel.BitsEqual(back, m) {
			t.Fatalf("%v: round trip differs", tt)
		}
		// Block 1's first element is where the layout says.
		if c.blocks > 1 {
			r, col := 0, 12/c.blocks
			if !c.byCols {
				r, col = 6/c.blocks, 0
			}
			if got := uint32(b[tt.stride]) | uint32(b[tt.stride+1])<<8; got != m.Bits(r, col) {
				t.Fatalf("%v: block 1 starts with %#x, want element (%d, %d) = %#x", tt, got, r, col, m.Bits(r, col))
			}
		}
	}
	if _, err := layout(6, 12, 5, true); err == nil {
		t.Fatal("uneven blocks accepted")
	}
}

func TestNewLayerChecks(t *testing.T) {
	for _, c := range []struct {
		cfg      Config
		tp, rank int
	}{
		{Config{Hidden: 64, Intermediate: 100}, 1, 0},             // I not divisible by L
		{Config{Hidden: 64, Intermediate: 128}, 3, 0},             // TP 3 with L 8
		{Config{Hidden: 64, Intermediate: 120, Chunks: 12}, 4, 0}, // L/TP = 3
		{Config{Hidden: 0, Intermediate: 128}, 1, 0},
		{Config{Hidden: 64, Intermediate: 128}, 2, 2},
	} {
		if _, err := newLayer(c.cfg, c.tp, c.rank); err == nil {
			t.Errorf("%+v tp%d rank %d accepted", c.cfg, c.tp, c.rank)
		}
	}
	l, err := newLayer(Config{Hidden: 64, Intermediate: 120, Chunks: 12}, 3, 2)
	if err != nil || l.nb != 10 || l.nl != 4 {
		t.Fatalf("L = 12 at TP = 3: %v %+v", err, l)
	}
	if _, err := New(nil, nil, Config{Hidden: 64, Intermediate: 128}); err == nil {
		t.Fatal("New without a device")
	}
}

// Shape and argument errors are caught before anything is enqueued.
func TestLayerArgumentChecks(t *testing.T) {
	ctx := context.Background()
	l, err := newLayer(Config{Hidden: 64, Intermediate: 128}, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	ho := newHostOps(nil)
	l.ops = ho
	in := makeInputs(1, 64, 128, 4)
	w, err := l.UploadWeights(in.gate, in.up, in.down)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := l.Upload(in.x, 1, false)
	xb, _ := l.Upload(randBF16(9, 4, 32, 1), 1, false) // wrong width
	if _, _, err := l.Forward(ctx, xb, w); err == nil {
		t.Fatal("x of the wrong width accepted")
	}
	bad := w
	bad.Gate = w.Up
	bad.Down = w.Gate
	if _, _, err := l.Forward(ctx, x, bad); err == nil {
		t.Fatal("weights of the wrong shape accepted")
	}
	if _, err := l.Backward(ctx, x, w, nil); err == nil {
		t.Fatal("Backward without saved state accepted")
	}
	if _, err := l.UploadWeights(in.up, in.gate, in.gate); err == nil {
		t.Fatal("a down weight of the wrong shape accepted")
	}
	if len(ho.calls) != 0 {
		t.Fatalf("%d GEMMs enqueued by rejected calls", len(ho.calls))
	}
	l.Free(x, xb, w.Gate, w.Up, w.Down)
	if err := l.Close(); err != nil || ho.live() != 0 {
		t.Fatalf("close: %v, %d allocations left", err, ho.live())
	}
	if _, _, err := l.Forward(ctx, x, w); err == nil {
		t.Fatal("Forward on a closed layer")
	}
}
