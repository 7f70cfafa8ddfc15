package gpuffn

import (
	"github.com/detcoll/detcoll/internal/cublas"
	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/parallel"
)

// operand is one GEMM operand stored row-major in device memory.
type operand struct {
	ptr   cuda.DevicePtr
	ld    int  // row stride in elements
	trans bool // the mathematical operand is the stored matrix transposed
}

// gemmSpec is the row-major product C[m×n] = op(A)[m×k] · op(B)[k×n] with C
// written densely (row stride n).
type gemmSpec struct {
	m, n, k int
	a, b    operand
}

// aStep and bStep are the element distances between consecutive k in A
// and B: A is stored m×k (step 1) or, transposed, k×m (step ld); B is
// stored k×n (step ld) or, transposed, n×k (step 1).
func (s gemmSpec) aStep() int {
	if s.a.trans {
		return s.a.ld
	}
	return 1
}

func (s gemmSpec) bStep() int {
	if s.b.trans {
		return 1
	}
	return s.b.ld
}

func opOf(trans bool) cublas.Operation {
	if trans {
		return cublas.OpT
	}
	return cublas.OpN
}

// call is the cuBLAS call for the k range [lo, hi) written to c. cuBLAS is
// column-major: the row-major C = op(A)·op(B) is the column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ, so cuBLAS's A is our B and its B our A, each with
// its own transposition flag and row stride as leading dimension, and m and
// n swap.
func (s gemmSpec) call(lo, hi int, c cuda.DevicePtr, compute cublas.ComputeType) cublas.Gemm {
	return cublas.Gemm{
		TransA: opOf(s.b.trans), TransB: opOf(s.a.trans),
		M: s.n, N: s.m, K: hi - lo,
		Alpha: 1, Beta: 0,
		A: s.b.ptr + cuda.DevicePtr(lo*s.bStep()*2), AType: cublas.R16BF, LDA: s.b.ld,
		B: s.a.ptr + cuda.DevicePtr(lo*s.aStep()*2), BType: cublas.R16BF, LDB: s.a.ld,
		C: c, CType: cublas.R16BF, LDC: s.n,
		Compute: compute, Algo: cublas.GemmDefault,
	}
}

// gemmCall is one planned cuBLAS call.
type gemmCall struct {
	g       cublas.Gemm
	batched bool
}

// planChunks plans the partial products of the l canonical K chunks of s
// (parallel.ChunkBounds: contiguous, the first k mod l one longer, empty
// when k < l) into l slabs of m×n elements, slab c at slabs + c·slab bytes.
// Equal non-empty chunks are one strided batched call (batch l); otherwise
// one call per non-empty chunk, and empty chunks are listed in zeros (their
// partial is +0). The plan depends only on (s's shape and strides, l), so
// it is the same at every TP size for the same canonical GEMM.
func planChunks(s gemmSpec, l int, slabs cuda.DevicePtr, slab int, compute cublas.ComputeType) (calls []gemmCall, zeros []cuda.DevicePtr) {
	if s.k%l == 0 && s.k > 0 {
		kc := s.k / l
		g := s.call(0, kc, slabs, compute)
		g.Batch = l
		g.StrideA = int64(kc * s.bStep())
		g.StrideB = int64(kc * s.aStep())
		g.StrideC = int64(slab / 2)
		return []gemmCall{{g: g, batched: true}}, nil
	}
	for c := 0; c < l; c++ {
		lo, hi := parallel.ChunkBounds(s.k, l, c)
		dst := slabs + cuda.DevicePtr(c*slab)
		if hi == lo {
			zeros = append(zeros, dst)
			continue
		}
		calls = append(calls, gemmCall{g: s.call(lo, hi, dst, compute)})
	}
	return calls, zeros
}
