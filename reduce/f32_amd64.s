#include "textflag.h"

// AVX2 kernels of the fp32 tree (see f32_amd64.go). Each handles n&^7
// elements; the Go caller does the tail. VADDPS is IEEE single addition,
// round to nearest even, and Go leaves MXCSR at its default (no FTZ, no
// DAZ), so every lane is the bits of Go's float32 a + b.

// func addF32AVX2(d, a, b *float32, n int)
TEXT ·addF32AVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
aloop32:
	CMPQ CX, $32
	JL aloop8
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VADDPS (DX), Y0, Y0
	VADDPS 32(DX), Y1, Y1
	VADDPS 64(DX), Y2, Y2
	VADDPS 96(DX), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $128, DI
	SUBQ $32, CX
	JMP aloop32
aloop8:
	CMPQ CX, $8
	JL adone
	VMOVUPS (SI), Y0
	VADDPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JMP aloop8
adone:
	VZEROUPPER
	RET

// func canonF32AVX2(o *uint32, s *float32, n int)
// o[k] = bits of s[k], NaN lanes → 0x7FC00000.
TEXT ·canonF32AVX2(SB), NOSPLIT, $0-24
	MOVQ o+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL $0x7FC00000, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
cloop:
	CMPQ CX, $8
	JL cdone
	VMOVUPS (SI), Y0
	VCMPPS $3, Y0, Y0, Y4
	VBLENDVPS Y4, Y12, Y0, Y5
	VMOVUPS Y5, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP cloop
cdone:
	VZEROUPPER
	RET
