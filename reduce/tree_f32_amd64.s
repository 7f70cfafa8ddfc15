#include "textflag.h"

// Fused fp32 trees for W = 2, 4, 8 (see tree_bf16_amd64.go): eight
// elements at a time, the canonical pairwise tree in registers (VADDPS: IEEE
// single addition, round to nearest even, MXCSR at Go's default, no FTZ or
// DAZ), the root with canonical NaN (0x7FC00000). One pass over memory.
//
// Each tree comes twice: with ordinary stores, and with non-temporal ones
// (the NT kernels: out 32-byte aligned, an SFENCE before they return) for
// outputs larger than the cache that nobody reads next, where ordinary
// stores would first fetch every output line (Reducer.ReduceUncached).

#define LD(ptr, reg) VMOVUPS (ptr)(BX*1), reg

// ROOTF(ST) stores Y0 with NaN lanes canonical at (DI)(BX*1) with ST.
#define ROOTF(ST) \
	VCMPPS $3, Y0, Y0, Y14 \
	VBLENDVPS Y14, Y13, Y0, Y0 \
	ST Y0, (DI)(BX*1)

#define CONSTF \
	MOVL $0x7FC00000, AX \
	VMOVD AX, X13 \
	VPBROADCASTD X13, Y13

// ARGS loads out, the first k input pointers (R8 …) and n in bytes.
#define ARGS2 \
	MOVQ out+0(FP), DI \
	MOVQ ins+8(FP), SI \
	MOVQ n+16(FP), CX \
	MOVQ 0(SI), R8 \
	MOVQ 8(SI), R9 \
	CONSTF \
	XORQ BX, BX \
	SHLQ $2, CX

#define ARGS4 \
	ARGS2 \
	MOVQ 16(SI), R10 \
	MOVQ 24(SI), R11

#define ARGS8 \
	ARGS4 \
	MOVQ 32(SI), R12 \
	MOVQ 40(SI), R13 \
	MOVQ 48(SI), R14 \
	MOVQ 56(SI), R15

#define TREE2(ST) \
	LD(R8, Y0) \
	VADDPS (R9)(BX*1), Y0, Y0 \
	ROOTF(ST)

#define TREE4(ST) \
	LD(R8, Y0) \
	LD(R10, Y2) \
	VADDPS (R9)(BX*1), Y0, Y0 \
	VADDPS (R11)(BX*1), Y2, Y2 \
	VADDPS Y2, Y0, Y0 \
	ROOTF(ST)

#define TREE8(ST) \
	LD(R8, Y0) \
	LD(R10, Y2) \
	LD(R12, Y4) \
	LD(R14, Y6) \
	VADDPS (R9)(BX*1), Y0, Y0 \
	VADDPS (R11)(BX*1), Y2, Y2 \
	VADDPS (R13)(BX*1), Y4, Y4 \
	VADDPS (R15)(BX*1), Y6, Y6 \
	VADDPS Y2, Y0, Y0 \
	VADDPS Y6, Y4, Y4 \
	VADDPS Y4, Y0, Y0 \
	ROOTF(ST)

// KERNEL(ARGS, TREE, ST) is a kernel's loop: eight elements a step.
#define KERNEL(ARGS, TREE, ST) \
	ARGS \
loop: \
	CMPQ BX, CX \
	JGE done \
	TREE(ST) \
	ADDQ $32, BX \
	JMP loop \
done:

// func treeF32x2AVX2(out *float32, ins *[8]*float32, n int)
TEXT ·treeF32x2AVX2(SB), NOSPLIT, $0-24
	KERNEL(ARGS2, TREE2, VMOVUPS)
	VZEROUPPER
	RET

// func treeF32x2NTAVX2(out *float32, ins *[8]*float32, n int)
TEXT ·treeF32x2NTAVX2(SB), NOSPLIT, $0-24
	KERNEL(ARGS2, TREE2, VMOVNTPS)
	SFENCE
	VZEROUPPER
	RET

// func treeF32x4AVX2(out *float32, ins *[8]*float32, n int)
TEXT ·treeF32x4AVX2(SB), NOSPLIT, $0-24
	KERNEL(ARGS4, TREE4, VMOVUPS)
	VZEROUPPER
	RET

// func treeF32x4NTAVX2(out *float32, ins *[8]*float32, n int)
TEXT ·treeF32x4NTAVX2(SB), NOSPLIT, $0-24
	KERNEL(ARGS4, TREE4, VMOVNTPS)
	SFENCE
	VZEROUPPER
	RET

// func treeF32x8AVX2(out *float32, ins *[8]*float32, n int)
TEXT ·treeF32x8AVX2(SB), NOSPLIT, $0-24
	KERNEL(ARGS8, TREE8, VMOVUPS)
	VZEROUPPER
	RET

// func treeF32x8NTAVX2(out *float32, ins *[8]*float32, n int)
TEXT ·treeF32x8NTAVX2(SB), NOSPLIT, $0-24
	KERNEL(ARGS8, TREE8, VMOVNTPS)
	SFENCE
	VZEROUPPER
	RET
