#include "textflag.h"

// ROUNDING_CONSTS broadcasts 0x7FFF into Y10, 1 into Y11 and c into Y12.
#define ROUNDING_CONSTS(c) \
	MOVL $0x7FFF, AX \
	VMOVD AX, X10 \
	VPBROADCASTD X10, Y10 \
	MOVL $1, AX \
	VMOVD AX, X11 \
	VPBROADCASTD X11, Y11 \
	MOVL c, AX \
	VMOVD AX, X12 \
	VPBROADCASTD X12, Y12

// RNE_BITS sets dst = src + 0x7FFF + ((src>>16)&1) on the float32 bits:
// round to nearest even at bf16 precision before the low half is dropped.
#define RNE_BITS(src, dst) \
	VPSRLD $16, src, dst \
	VPAND Y11, dst, dst \
	VPADDD Y10, dst, dst \
	VPADDD src, dst, dst

// AVX2 kernels for the bf16 tree (see bf16_amd64.go). Each handles n&^7
// elements; the Go caller does the tail. Rounding is round-to-nearest-even
// on the float32 bits: u + 0x7FFF + ((u>>16)&1), then the low 16 bits
// cleared; NaN lanes keep the raw sum (canonicalised at the root).

// func addRoundBF16uAVX2(d *float32, a, b *uint16, n int)
TEXT ·addRoundBF16uAVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	ROUNDING_CONSTS($0xFFFF0000)
uloop:
	CMPQ CX, $8
	JL udone
	VPMOVZXWD (SI), Y0
	VPMOVZXWD (DX), Y1
	VPSLLD $16, Y0, Y0
	VPSLLD $16, Y1, Y1
	VADDPS Y1, Y0, Y2
	RNE_BITS(Y2, Y3)
	VPAND Y12, Y3, Y3
	VCMPPS $3, Y2, Y2, Y4
	VBLENDVPS Y4, Y2, Y3, Y5
	VMOVUPS Y5, (DI)
	ADDQ $16, SI
	ADDQ $16, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JMP uloop
udone:
	VZEROUPPER
	RET

// func addRoundBF16AVX2(d, a, b *float32, n int)
TEXT ·addRoundBF16AVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	ROUNDING_CONSTS($0xFFFF0000)
floop:
	CMPQ CX, $8
	JL fdone
	VMOVUPS (SI), Y0
	VMOVUPS (DX), Y1
	VADDPS Y1, Y0, Y2
	RNE_BITS(Y2, Y3)
	VPAND Y12, Y3, Y3
	VCMPPS $3, Y2, Y2, Y4
	VBLENDVPS Y4, Y2, Y3, Y5
	VMOVUPS Y5, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JMP floop
fdone:
	VZEROUPPER
	RET

// func narrowBF16AVX2(o *uint16, s *float32, n int)
// o[k] = bf16 of s[k], round to nearest even; NaN → 0x7FC0.
TEXT ·narrowBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ o+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	ROUNDING_CONSTS($0x7FC0)
nloop:
	CMPQ CX, $8
	JL ndone
	VMOVUPS (SI), Y0
	RNE_BITS(Y0, Y3)
	VPSRLD $16, Y3, Y3
	VCMPPS $3, Y0, Y0, Y4
	VBLENDVPS Y4, Y12, Y3, Y5
	VPACKUSDW Y5, Y5, Y6
	VPERMQ $0x08, Y6, Y6
	VMOVDQU X6, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	SUBQ $8, CX
	JMP nloop
ndone:
	VZEROUPPER
	RET
