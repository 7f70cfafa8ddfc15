#include "textflag.h"

// The fused bf16 trees of tree_bf16_amd64.s in AVX-512, sixteen elements
// at a time: the same tree and the same round to nearest even on the
// float32 bits, with fewer instructions per element. The rounding adds
// 0x7FFF, then 1 more in the lanes whose bit 16 (the bf16 lsb) is set (a
// masked add), then clears the low half; the root narrows with VPMOVDW after
// putting the canonical NaN (0x7FC0) in the NaN lanes. bf16 at W = 8 is
// bound by instructions, not memory (docs/benchmarks/reduce-bandwidth-*.md).

// WIDEN16 loads the 16 bf16 at (ptr)(BX*1) into reg as float32.
#define WIDEN16(ptr, reg) \
	VPMOVZXWD (ptr)(BX*1), reg \
	VPSLLD $16, reg, reg

// NODE16 sets a = round_bf16(a + b); clobbers K1.
#define NODE16(a, b) \
	VADDPS b, a, a \
	VPTESTMD Z11, a, K1 \
	VPADDD Z10, a, a \
	VPADDD Z14, a, K1, a \
	VPANDD Z12, a, a

// ROOT16 stores the 16 bf16 of the rounded float32 Z0 at (DI)(BX*1).
#define ROOT16 \
	VCMPPS $3, Z0, Z0, K2 \
	VPSRLD $16, Z0, Z0 \
	VMOVDQA32 Z13, K2, Z0 \
	VPMOVDW Z0, Y0 \
	VMOVDQU Y0, (DI)(BX*1)

#define CONSTS16 \
	MOVL $0x7FFF, AX \
	VPBROADCASTD AX, Z10 \
	MOVL $0x10000, AX \
	VPBROADCASTD AX, Z11 \
	MOVL $0xFFFF0000, AX \
	VPBROADCASTD AX, Z12 \
	MOVL $0x7FC0, AX \
	VPBROADCASTD AX, Z13 \
	MOVL $1, AX \
	VPBROADCASTD AX, Z14

// func treeBF16x2AVX512(out *uint16, ins *[8]*uint16, n int)
TEXT ·treeBF16x2AVX512(SB), NOSPLIT, $0-24
	MOVQ out+0(FP), DI
	MOVQ ins+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ 0(SI), R8
	MOVQ 8(SI), R9
	CONSTS16
	XORQ BX, BX
	SHLQ $1, CX
loop2:
	CMPQ BX, CX
	JGE done2
	WIDEN16(R8, Z0)
	WIDEN16(R9, Z1)
	NODE16(Z0, Z1)
	ROOT16
	ADDQ $32, BX
	JMP loop2
done2:
	VZEROUPPER
	RET

// func treeBF16x4AVX512(out *uint16, ins *[8]*uint16, n int)
TEXT ·treeBF16x4AVX512(SB), NOSPLIT, $0-24
	MOVQ out+0(FP), DI
	MOVQ ins+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ 0(SI), R8
	MOVQ 8(SI), R9
	MOVQ 16(SI), R10
	MOVQ 24(SI), R11
	CONSTS16
	XORQ BX, BX
	SHLQ $1, CX
loop4:
	CMPQ BX, CX
	JGE done4
	WIDEN16(R8, Z0)
	WIDEN16(R9, Z1)
	WIDEN16(R10, Z2)
	WIDEN16(R11, Z3)
	NODE16(Z0, Z1)
	NODE16(Z2, Z3)
	NODE16(Z0, Z2)
	ROOT16
	ADDQ $32, BX
	JMP loop4
done4:
	VZEROUPPER
	RET

// func treeBF16x8AVX512(out *uint16, ins *[8]*uint16, n int)
TEXT ·treeBF16x8AVX512(SB), NOSPLIT, $0-24
	MOVQ out+0(FP), DI
	MOVQ ins+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ 0(SI), R8
	MOVQ 8(SI), R9
	MOVQ 16(SI), R10
	MOVQ 24(SI), R11
	MOVQ 32(SI), R12
	MOVQ 40(SI), R13
	MOVQ 48(SI), R14
	MOVQ 56(SI), R15
	CONSTS16
	XORQ BX, BX
	SHLQ $1, CX
loop8:
	CMPQ BX, CX
	JGE done8
	WIDEN16(R8, Z0)
	WIDEN16(R9, Z1)
	WIDEN16(R10, Z2)
	WIDEN16(R11, Z3)
	WIDEN16(R12, Z4)
	WIDEN16(R13, Z5)
	WIDEN16(R14, Z6)
	WIDEN16(R15, Z7)
	NODE16(Z0, Z1)
	NODE16(Z2, Z3)
	NODE16(Z4, Z5)
	NODE16(Z6, Z7)
	NODE16(Z0, Z2)
	NODE16(Z4, Z6)
	NODE16(Z0, Z4)
	ROOT16
	ADDQ $32, BX
	JMP loop8
done8:
	VZEROUPPER
	RET
