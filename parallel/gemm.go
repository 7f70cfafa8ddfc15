package parallel

import (
	"fmt"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
	"github.com/detcoll/detcoll/tree"
)

// DefaultChunks is the default number L of canonical K chunks: 8, so that
// TP = 1, 2, 4 and 8 give identical bits.
const DefaultChunks = 8

// ChunkBounds returns the K range [lo, hi) of canonical chunk c when K is
// split into l chunks: contiguous, in order, as even as possible, the first
// K mod l chunks one element longer (tree.Shard). A chunk may be empty when
// K < l; its partial sum is +0.
func ChunkBounds(k, l, c int) (lo, hi int) {
	off, n := tree.Shard(k, l, c)
	return off, off + n
}

// MatMul is the canonical chunked GEMM of the host reference:
//
//	C = op(A) · op(B),   op(X) = Xᵀ when the flag is set
//
// with K (the shared dimension) split into l canonical chunks (ChunkBounds).
// For every output element and every chunk c,
//
//	partial_c = round_dt( (((+0 + p_lo) + p_lo+1) + … + p_hi-1) ),   p_k = float32(a_k * b_k)
//
// i.e. a float32 accumulator that starts at +0 and adds the float32-rounded
// products in ascending k, then rounds once to the dtype (RNE; NaN
// canonical). The l partials are joined by the canonical pairwise tree of
// docs/contract.md, "The tree" with the dtype's addition (reduce.Oracle, accumulate
// native): for l = 8, ((c0+c1)+(c2+c3))+((c4+c5)+(c6+c7)).
//
// A and B must share a dtype (bf16, fp16 or fp32), which is C's dtype.
func MatMul(a *Matrix, transA bool, b *Matrix, transB bool, l int) (*Matrix, error) {
	if a == nil || b == nil {
		return nil, fmt.Errorf("%w: MatMul of a nil matrix", ErrInvalidArgument)
	}
	if a.dt != b.dt {
		return nil, fmt.Errorf("%w: MatMul of %v and %v", ErrInvalidArgument, a.dt, b.dt)
	}
	if err := matrixDType(a.dt); err != nil {
		return nil, err
	}
	if l < 1 {
		return nil, fmt.Errorf("%w: MatMul with %d chunks", ErrInvalidArgument, l)
	}
	m, k := a.rows, a.cols
	if transA {
		m, k = k, m
	}
	kb, n := b.rows, b.cols
	if transB {
		kb, n = n, kb
	}
	if k != kb {
		return nil, fmt.Errorf("%w: MatMul of %d×%d by %d×%d", ErrInvalidArgument, m, k, kb, n)
	}
	return matmul(a, transA, b, transB, l), nil
}

// matmul is MatMul without argument checks.
func matmul(a *Matrix, transA bool, b *Matrix, transB bool, l int) *Matrix {
	m, k := a.rows, a.cols
	if transA {
		m, k = k, m
	}
	n := b.cols
	if transB {
		n = b.rows
	}
	dt := a.dt
	// af: M×K row-major; bt: N×K row-major (B transposed), both widened
	// exactly, so the inner loop walks both operands contiguously in k.
	af := widenMajor(a, transA)
	bt := widenMajor(b, !transB)
	partials := make([][]byte, l)
	sz := dt.Size()
	for c := range partials {
		partials[c] = make([]byte, m*n*sz)
		lo, hi := ChunkBounds(k, l, c)
		chunkGEMM(dt, partials[c], af, bt, m, n, k, lo, hi)
	}
	out := newMatrix(dt, m, n)
	if err := reduce.Oracle(dt, reduce.Native, partials, out.data); err != nil {
		panic(err) // shapes are consistent by construction
	}
	return out
}

// chunkGEMM writes round_dt(Σ_{k in [lo,hi), ascending} float32(a[i,k]*b[k,j]))
// for every (i, j) into part.
func chunkGEMM(dt dtype.DType, part []byte, af, bt []float32, m, n, k, lo, hi int) {
	for i := 0; i < m; i++ {
		ar := af[i*k+lo : i*k+hi]
		for j := 0; j < n; j++ {
			br := bt[j*k+lo : j*k+hi]
			br = br[:len(ar)]
			var acc float32 // +0
			for kk, x := range ar {
				// The conversion rounds the product and forbids an FMA.
				acc += float32(x * br[kk])
			}
			store(dt, part, i*n+j, acc)
		}
	}
}

// widenMajor returns x widened to float32 as a row-major matrix with the
// reduction dimension last: x itself (rows×cols) when !trans, else xᵀ.
func widenMajor(x *Matrix, trans bool) []float32 {
	out := make([]float32, x.rows*x.cols)
	if !trans {
		widen(x.dt, x.data, out)
		return out
	}
	for i := 0; i < x.rows; i++ {
		for j := 0; j < x.cols; j++ {
			out[j*x.rows+i] = load(x.dt, x.data, i*x.cols+j)
		}
	}
	return out
}

// addDType is the elementwise dtype addition a + b (one node of the tree,
// a on the left), the same arithmetic as the collectives.
func addDType(a, b *Matrix) *Matrix {
	out := newMatrix(a.dt, a.rows, a.cols)
	if err := reduce.Oracle(a.dt, reduce.Native, [][]byte{a.data, b.data}, out.data); err != nil {
		panic(err)
	}
	return out
}

// tpChunksOK reports whether a row-parallel GEMM with l canonical chunks
// gives the same bits for tp ranks as for one: every rank holds l/tp
// consecutive chunks, and the tree over l values equals the tree over the
// ranks' local trees exactly when l/tp is a power of two (the first levels
// of the tree then pair values inside aligned blocks) or tp is 1.
func tpChunksOK(l, tp int) bool {
	if tp < 1 || l < 1 || l%tp != 0 {
		return false
	}
	q := l / tp
	return tp == 1 || q&(q-1) == 0
}
