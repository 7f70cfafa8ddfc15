#include "textflag.h"

// Fused bf16 trees for W = 2, 4, 8, accumulate native (see
// tree_bf16_amd64.go): eight elements at a time, every rank's input widened
// in a register, the canonical pairwise tree evaluated in registers with
// each node rounded to bf16 (round to nearest even on the float32 bits:
// u + 0x7FFF + ((u>>16)&1), low half cleared), and the root narrowed with
// canonical NaN (0x7FC0). No scratch, one pass over memory.
//
// Node NaNs need no blend: every operand of a node is a bf16 value (its
// low 16 bits are zero), so a NaN sum is either an operand's NaN, quieted,
// or the default NaN, and both have zero low bits: the rounding add cannot
// carry out of them. The root keeps its NaN test for the canonical pattern.

// WIDEN loads the 8 bf16 at (ptr)(BX*1) into reg as float32.
#define WIDEN(ptr, reg) \
	VPMOVZXWD (ptr)(BX*1), reg \
	VPSLLD $16, reg, reg

// NODE sets a = round_bf16(a + b); clobbers Y15.
#define NODE(a, b) \
	VADDPS b, a, a \
	VPSRLD $16, a, Y15 \
	VPAND Y11, Y15, Y15 \
	VPADDD Y10, Y15, Y15 \
	VPADDD a, Y15, a \
	VPAND Y12, a, a

// ROOT(ST) stores the 8 bf16 of the rounded float32 Y0 at (DI)(BX*1)
// with ST: VMOVDQU, or VMOVNTDQ in the non-temporal kernels (out 16-byte
// aligned, an SFENCE before they return; see tree_f32_amd64.s).
#define ROOT(ST) \
	VCMPPS $3, Y0, Y0, Y14 \
	VPSRLD $16, Y0, Y0 \
	VBLENDVPS Y14, Y13, Y0, Y0 \
	VPACKUSDW Y0, Y0, Y0 \
	VPERMQ $0x08, Y0, Y0 \
	ST X0, (DI)(BX*1)

#define CONSTS \
	MOVL $0x7FFF, AX \
	VMOVD AX, X10 \
	VPBROADCASTD X10, Y10 \
	MOVL $1, AX \
	VMOVD AX, X11 \
	VPBROADCASTD X11, Y11 \
	MOVL $0xFFFF0000, AX \
	VMOVD AX, X12 \
	VPBROADCASTD X12, Y12 \
	MOVL $0x7FC0, AX \
	VMOVD AX, X13 \
	VPBROADCASTD X13, Y13

// ARGSk loads out, the first k input pointers (R8 …), the constants and n
// in bytes.
#define ARGS2 \
	MOVQ out+0(FP), DI \
	MOVQ ins+8(FP), SI \
	MOVQ n+16(FP), CX \
	MOVQ 0(SI), R8 \
	MOVQ 8(SI), R9 \
	CONSTS \
	XORQ BX, BX \
	SHLQ $1, CX

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
	WIDEN(R8, Y0) \
	WIDEN(R9, Y1) \
	NODE(Y0, Y1) \
	ROOT(ST)

#define TREE4(ST) \
	WIDEN(R8, Y0) \
	WIDEN(R9, Y1) \
	WIDEN(R10, Y2) \
	WIDEN(R11, Y3) \
	NODE(Y0, Y1) \
	NODE(Y2, Y3) \
	NODE(Y0, Y2) \
	ROOT(ST)

#define TREE8(ST) \
	WIDEN(R8, Y0) \
	WIDEN(R9, Y1) \
	WIDEN(R10, Y2) \
	WIDEN(R11, Y3) \
	WIDEN(R12, Y4) \
	WIDEN(R13, Y5) \
	WIDEN(R14, Y6) \
	WIDEN(R15, Y7) \
	NODE(Y0, Y1) \
	NODE(Y2, Y3) \
	NODE(Y4, Y5) \
	NODE(Y6, Y7) \
	NODE(Y0, Y2) \
	NODE(Y4, Y6) \
	NODE(Y0, Y4) \
	ROOT(ST)

// KERNEL(ARGS, TREE, ST) is a kernel's loop: eight elements a step.
#define KERNEL(ARGS, TREE, ST) \
	ARGS \
loop: \
	CMPQ BX, CX \
	JGE done \
	TREE(ST) \
	ADDQ $16, BX \
	JMP loop \
done:

// func treeBF16x2AVX2(out *uint16, ins *[8]*uint16, n int)
TEXT ·treeBF16x2AVX2(SB), NOSPLIT, $0-24
	KERNEL(ARGS2, TREE2, VMOVDQU)
	VZEROUPPER
	RET

// func treeBF16x2NTAVX2(out *uint16, ins *[8]*uint16, n int)
TEXT ·treeBF16x2NTAVX2(SB), NOSPLIT, $0-24
	KERNEL(ARGS2, TREE2, VMOVNTDQ)
	SFENCE
	VZEROUPPER
	RET

// func treeBF16x4AVX2(out *uint16, ins *[8]*uint16, n int)
TEXT ·treeBF16x4AVX2(SB), NOSPLIT, $0-24
	KERNEL(ARGS4, TREE4, VMOVDQU)
	VZEROUPPER
	RET

// func treeBF16x4NTAVX2(out *uint16, ins *[8]*uint16, n int)
TEXT ·treeBF16x4NTAVX2(SB), NOSPLIT, $0-24
	KERNEL(ARGS4, TREE4, VMOVNTDQ)
	SFENCE
	VZEROUPPER
	RET

// func treeBF16x8AVX2(out *uint16, ins *[8]*uint16, n int)
TEXT ·treeBF16x8AVX2(SB), NOSPLIT, $0-24
	KERNEL(ARGS8, TREE8, VMOVDQU)
	VZEROUPPER
	RET

// func treeBF16x8NTAVX2(out *uint16, ins *[8]*uint16, n int)
TEXT ·treeBF16x8NTAVX2(SB), NOSPLIT, $0-24
	KERNEL(ARGS8, TREE8, VMOVNTDQ)
	SFENCE
	VZEROUPPER
	RET
