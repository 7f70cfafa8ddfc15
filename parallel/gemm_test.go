package parallel

import (
	"math/rand/v2"
	"testing"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
)

// refMatMul restates MatMul's definition independently: products and sums
// are done in float64 and rounded to float32, which is exactly float32
// arithmetic (float64 carries more than 2·24+2 bits), so the result cannot
// depend on how Go compiles float32 code, FMA contraction included. The
// chunks are joined by the pairwise rule written out directly.
func refMatMul(a *Matrix, ta bool, b *Matrix, tb bool, l int) *Matrix {
	at := func(m *Matrix, tr bool, i, j int) float64 {
		if tr {
			i, j = j, i
		}
		return float64(m.At(i, j))
	}
	m, k := a.rows, a.cols
	if ta {
		m, k = k, m
	}
	n := b.cols
	if tb {
		n = b.rows
	}
	dt := a.dt
	round := func(x float64) float32 { return roundTo(dt, float32(x)) }
	out := newMatrix(dt, m, n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			vals := make([]float32, l)
			for c := 0; c < l; c++ {
				lo := c * (k / l)
				extra := k % l
				if c < extra {
					lo += c
				} else {
					lo += extra
				}
				size := k / l
				if c < extra {
					size++
				}
				acc := float32(0)
				for kk := lo; kk < lo+size; kk++ {
					p := float32(at(a, ta, i, kk) * at(b, tb, kk, j))
					acc = float32(float64(acc) + float64(p))
				}
				vals[c] = round(float64(acc))
			}
			for len(vals) > 1 {
				var next []float32
				for q := 0; q+1 < len(vals); q += 2 {
					next = append(next, round(float64(vals[q])+float64(vals[q+1])))
				}
				if len(vals)%2 == 1 {
					next = append(next, vals[len(vals)-1])
				}
				vals = next
			}
			out.Set(i, j, vals[0])
		}
	}
	return out
}

func TestMatMulDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32} {
		for trial := 0; trial < 40; trial++ {
			m, k, n := 1+rng.IntN(7), rng.IntN(40), 1+rng.IntN(7)
			l := 1 + rng.IntN(12)
			ta, tb := rng.IntN(2) == 1, rng.IntN(2) == 1
			ar, ac := m, k
			if ta {
				ar, ac = k, m
			}
			br, bc := k, n
			if tb {
				br, bc = n, k
			}
			a := randMatrix(rng, dt, ar, ac, 1)
			b := randMatrix(rng, dt, br, bc, 1)
			got, err := MatMul(a, ta, b, tb, l)
			if err != nil {
				t.Fatal(err)
			}
			if d := bitsDiff(got, refMatMul(a, ta, b, tb, l)); d != "" {
				t.Fatalf("%v %d×%d×%d L=%d ta=%v tb=%v: %s", dt, m, k, n, l, ta, tb, d)
			}
		}
	}
	if _, err := MatMul(newMatrix(dtype.BF16, 2, 3), false, newMatrix(dtype.BF16, 2, 3), false, 8); err == nil {
		t.Error("MatMul of 2×3 by 2×3 did not fail")
	}
}

// TestMatMulTensorParallel checks the identity the layers rely on: split K
// over TP ranks, each holding L/TP consecutive chunks and reducing them
// locally, then the tree over ranks = MatMul with L chunks — when L/TP is a
// power of two.
func TestMatMulTensorParallel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct{ l, k int }{{8, 64}, {8, 256}, {12, 96}, {16, 64}} {
		for _, dt := range []dtype.DType{dtype.BF16, dtype.FP32} {
			a := randMatrix(rng, dt, 5, c.k, 1)
			b := randMatrix(rng, dt, c.k, 6, 1)
			want, _ := MatMul(a, false, b, false, c.l)
			for tp := 1; tp <= c.l; tp++ {
				if c.l%tp != 0 {
					continue
				}
				kl := c.k / tp
				parts := make([][]byte, tp)
				for r := range parts {
					p, err := MatMul(a.ColSlice(r*kl, (r+1)*kl), false, b.RowSlice(r*kl, (r+1)*kl), false, c.l/tp)
					if err != nil {
						t.Fatal(err)
					}
					parts[r] = p.data
				}
				got := newMatrix(dt, 5, 6)
				if err := reduce.Oracle(dt, reduce.Native, parts, got.data); err != nil {
					t.Fatal(err)
				}
				d := bitsDiff(got, want)
				if tpChunksOK(c.l, tp) && d != "" {
					t.Errorf("%v L=%d TP=%d: %s", dt, c.l, tp, d)
				}
				if !tpChunksOK(c.l, tp) {
					t.Logf("%v L=%d TP=%d (rejected by NewFFN): bits differ from MatMul with L chunks: %v", dt, c.l, tp, d != "")
				}
			}
		}
	}
}
