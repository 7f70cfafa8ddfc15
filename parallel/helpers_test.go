package parallel

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

var longTests = os.Getenv("DETCOLL_LONG_TESTS") == "1"

func newWorld(t testing.TB, w int) []*detcoll.Comm {
	t.Helper()
	comms, err := detcoll.NewInProc(w, detcoll.WithTimeout(2*time.Minute))
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

// onRanks runs fn on every rank concurrently and returns the per-rank errors.
func onRanks(comms []*detcoll.Comm, fn func(r int, c *detcoll.Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r, c)
		}()
	}
	wg.Wait()
	return errs
}

func mustRanks(t testing.TB, comms []*detcoll.Comm, fn func(r int, c *detcoll.Comm) error) {
	t.Helper()
	for r, err := range onRanks(comms, fn) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// newMeshes builds a tp×cp×dp mesh over a fresh in-process world.
func newMeshes(t testing.TB, tp, cp, dp int) []*Mesh {
	t.Helper()
	comms := newWorld(t, tp*cp*dp)
	ms := make([]*Mesh, len(comms))
	mustRanks(t, comms, func(r int, c *detcoll.Comm) error {
		m, err := NewMesh(context.Background(), c, tp, cp, dp)
		ms[r] = m
		return err
	})
	return ms
}

// randMatrix fills a matrix with normal values times scale, rounded to dt.
func randMatrix(rng *rand.Rand, dt dtype.DType, rows, cols int, scale float64) *Matrix {
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	m, err := MatrixFromFloat32(dt, rows, cols, v)
	if err != nil {
		panic(err)
	}
	return m
}

// bitsDiff describes the first difference between a and b, or "".
func bitsDiff(a, b *Matrix) string {
	if a == nil || b == nil {
		return fmt.Sprintf("nil matrix (%v, %v)", a == nil, b == nil)
	}
	if a.dt != b.dt || a.rows != b.rows || a.cols != b.cols {
		return fmt.Sprintf("shape %v %d×%d vs %v %d×%d", a.dt, a.rows, a.cols, b.dt, b.rows, b.cols)
	}
	n := 0
	first := ""
	for i := 0; i < a.rows; i++ {
		for j := 0; j < a.cols; j++ {
			if a.Bits(i, j) != b.Bits(i, j) {
				if n == 0 {
					first = fmt.Sprintf("(%d,%d): %#x (%g) vs %#x (%g)", i, j, a.Bits(i, j), a.At(i, j), b.Bits(i, j), b.At(i, j))
				}
				n++
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d elements differ, first at %s", n, first)
}

// assembler collects row (or column) blocks of one logical matrix from
// several ranks; a block written twice must have the same bits.
type assembler struct {
	mu      sync.Mutex
	m       *Matrix
	written []bool
	errs    []string
}

func newAssembler(dt dtype.DType, rows, cols int) *assembler {
	return &assembler{m: newMatrix(dt, rows, cols), written: make([]bool, rows*cols)}
}

// putRows writes local row i of part at logical row rows[i].
func (a *assembler) putRows(who string, part *Matrix, rows []int) {
	a.put(who, part, func(i, j int) (int, int) { return rows[i], j })
}

// putBlock writes local row i of part at logical row rows[i], columns
// shifted by off.
func (a *assembler) putBlock(who string, part *Matrix, rows []int, off int) {
	a.put(who, part, func(i, j int) (int, int) { return rows[i], off + j })
}

// putCols writes part's columns at [off, off+part.cols).
func (a *assembler) putCols(who string, part *Matrix, off int) {
	a.put(who, part, func(i, j int) (int, int) { return i, off + j })
}

func (a *assembler) put(who string, part *Matrix, at func(i, j int) (int, int)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := 0; i < part.rows; i++ {
		for j := 0; j < part.cols; j++ {
			r, c := at(i, j)
			k := r*a.m.cols + c
			if a.written[k] {
				if a.m.Bits(r, c) != part.Bits(i, j) && len(a.errs) < 5 {
					a.errs = append(a.errs, fmt.Sprintf("%s: replicated element (%d,%d) differs: %#x vs %#x", who, r, c, part.Bits(i, j), a.m.Bits(r, c)))
				}
				continue
			}
			a.written[k] = true
			store(a.m.dt, a.m.data, k, part.At(i, j))
		}
	}
}

func (a *assembler) result(t testing.TB, name string) *Matrix {
	t.Helper()
	for _, e := range a.errs {
		t.Errorf("%s: %s", name, e)
	}
	for k, w := range a.written {
		if !w {
			t.Fatalf("%s: element %d never written", name, k)
		}
	}
	return a.m
}

// relErr is max|got - ref| / max|ref| (a normwise relative error).
func relErr(got *Matrix, ref []float64) float64 {
	var num, den float64
	g := got.Float32s()
	for i, r := range ref {
		num = math.Max(num, math.Abs(float64(g[i])-r))
		den = math.Max(den, math.Abs(r))
	}
	if den == 0 {
		return num
	}
	return num / den
}

func toF64(m *Matrix) []float64 {
	out := make([]float64, m.rows*m.cols)
	for i, v := range m.Float32s() {
		out[i] = float64(v)
	}
	return out
}

// relErrBounds are the normwise relative errors against float64 the
// accuracy tests accept: a few units of each dtype's rounding error.
var relErrBounds = map[dtype.DType]float64{dtype.BF16: 2e-2, dtype.FP16: 4e-3, dtype.FP32: 2e-6}

// namedResult is one output of a layer and its float64 reference.
type namedResult struct {
	name string
	m    *Matrix
	ref  []float64
}

// checkRelErr logs each result's relative error against its reference and
// fails the test when one exceeds dt's bound.
func checkRelErr(t *testing.T, dt dtype.DType, label string, rs []namedResult) {
	t.Helper()
	for _, c := range rs {
		e := relErr(c.m, c.ref)
		t.Logf("%v %s %-5s max rel err %.3g", dt, label, c.name, e)
		if e > relErrBounds[dt] {
			t.Errorf("%v %s: relative error %.3g > %.3g", dt, c.name, e, relErrBounds[dt])
		}
	}
}
