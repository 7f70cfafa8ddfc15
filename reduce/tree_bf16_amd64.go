package reduce

import (
	"unsafe"

	"github.com/detcoll/detcoll/dtype"

	"golang.org/x/sys/cpu"
)

//go:noescape
func treeF32x2AVX2(out *float32, ins *[8]*float32, n int)

//go:noescape
func treeF32x4AVX2(out *float32, ins *[8]*float32, n int)

//go:noescape
func treeF32x8AVX2(out *float32, ins *[8]*float32, n int)

//go:noescape
func treeF32x2NTAVX2(out *float32, ins *[8]*float32, n int)

//go:noescape
func treeF32x4NTAVX2(out *float32, ins *[8]*float32, n int)

//go:noescape
func treeF32x8NTAVX2(out *float32, ins *[8]*float32, n int)

//go:noescape
func treeBF16x2AVX2(out *uint16, ins *[8]*uint16, n int)

//go:noescape
func treeBF16x4AVX2(out *uint16, ins *[8]*uint16, n int)

//go:noescape
func treeBF16x8AVX2(out *uint16, ins *[8]*uint16, n int)

//go:noescape
func treeBF16x2NTAVX2(out *uint16, ins *[8]*uint16, n int)

//go:noescape
func treeBF16x4NTAVX2(out *uint16, ins *[8]*uint16, n int)

//go:noescape
func treeBF16x8NTAVX2(out *uint16, ins *[8]*uint16, n int)

//go:noescape
func treeBF16x2AVX512(out *uint16, ins *[8]*uint16, n int)

//go:noescape
func treeBF16x4AVX512(out *uint16, ins *[8]*uint16, n int)

//go:noescape
func treeBF16x8AVX512(out *uint16, ins *[8]*uint16, n int)

// useAVX512 selects the AVX-512 bf16 trees (tree_bf16_avx512_amd64.s) for
// whole groups of 16 elements, the AVX2 ones doing a last group of 8; tests
// turn it off to check the AVX2 kernels on the same inputs.
var useAVX512 = cpu.X86.HasAVX512F

// ntKernel reports whether out is aligned for the non-temporal stores of
// dt's fused kernels: VMOVNTPS of 32 bytes (fp32), VMOVNTDQ of 16 (bf16).
func ntKernel(dt dtype.DType, out []byte) bool {
	if dt == dtype.FP32 {
		return aligned(out, 32)
	}
	return aligned(out, 16)
}

// treeBF16Vec reduces elements [lo, hi) of W = 2, 4 or 8 aligned bf16
// inputs with native accumulation in one fused pass (tree_bf16_amd64.s,
// tree_bf16_avx512_amd64.s) and
// returns how many elements from lo it did (a multiple of 8; 0 when the
// fused kernel does not apply).
func treeBF16Vec(t task, lo, hi int) int {
	w := len(t.inputs)
	n := (hi - lo) &^ 7
	if !useAVX2 || n <= 0 || t.acc != Native || (w != 2 && w != 4 && w != 8) {
		return 0
	}
	ob := t.out[lo*2 : (lo+n)*2]
	if !aligned(ob, 2) {
		return 0
	}
	var ptrs [8]*uint16
	for r, in := range t.inputs {
		b := in[lo*2 : (lo+n)*2]
		if !aligned(b, 2) {
			return 0
		}
		ptrs[r] = (*uint16)(unsafe.Pointer(unsafe.SliceData(b)))
	}
	o := (*uint16)(unsafe.Pointer(unsafe.SliceData(ob)))
	if t.nt && ntKernel(dtype.BF16, ob) {
		// Memory-bound: the AVX2 kernel with non-temporal stores, also
		// where AVX-512 is there.
		switch w {
		case 2:
			treeBF16x2NTAVX2(o, &ptrs, n)
		case 4:
			treeBF16x4NTAVX2(o, &ptrs, n)
		default:
			treeBF16x8NTAVX2(o, &ptrs, n)
		}
		return n
	}
	done := 0
	if n16 := n &^ 15; useAVX512 && n16 > 0 {
		switch w {
		case 2:
			treeBF16x2AVX512(o, &ptrs, n16)
		case 4:
			treeBF16x4AVX512(o, &ptrs, n16)
		default:
			treeBF16x8AVX512(o, &ptrs, n16)
		}
		if n16 == n {
			return n
		}
		for r := 0; r < w; r++ {
			ptrs[r] = (*uint16)(unsafe.Add(unsafe.Pointer(ptrs[r]), 2*n16))
		}
		o = (*uint16)(unsafe.Add(unsafe.Pointer(o), 2*n16))
		done = n16
	}
	switch m := n - done; w {
	case 2:
		treeBF16x2AVX2(o, &ptrs, m)
	case 4:
		treeBF16x4AVX2(o, &ptrs, m)
	default:
		treeBF16x8AVX2(o, &ptrs, m)
	}
	return n
}

// treeF32Vec is treeBF16Vec for fp32 (tree_f32_amd64.s): W = 2, 4, 8,
// 4-byte-aligned inputs and output.
func treeF32Vec(t task, lo, hi int) int {
	w := len(t.inputs)
	n := (hi - lo) &^ 7
	if !useAVX2 || n <= 0 || (w != 2 && w != 4 && w != 8) {
		return 0
	}
	ob := t.out[lo*4 : (lo+n)*4]
	if !aligned(ob, 4) {
		return 0
	}
	var ptrs [8]*float32
	for r, in := range t.inputs {
		b := in[lo*4 : (lo+n)*4]
		if !aligned(b, 4) {
			return 0
		}
		ptrs[r] = (*float32)(unsafe.Pointer(unsafe.SliceData(b)))
	}
	o := (*float32)(unsafe.Pointer(unsafe.SliceData(ob)))
	if t.nt && ntKernel(dtype.FP32, ob) {
		switch w {
		case 2:
			treeF32x2NTAVX2(o, &ptrs, n)
		case 4:
			treeF32x4NTAVX2(o, &ptrs, n)
		default:
			treeF32x8NTAVX2(o, &ptrs, n)
		}
		return n
	}
	switch w {
	case 2:
		treeF32x2AVX2(o, &ptrs, n)
	case 4:
		treeF32x4AVX2(o, &ptrs, n)
	default:
		treeF32x8AVX2(o, &ptrs, n)
	}
	return n
}
