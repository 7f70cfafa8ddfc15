// Package gpuffn is the gated SwiGLU feed-forward layer of package parallel
// on NVIDIA GPUs: bf16 GEMMs by cuBLAS (internal/cublas, loaded at run
// time), detcoll's tree kernel (package gpu) for every sum of partial
// products, an NVRTC-compiled SwiGLU kernel (kernels/swiglu.cu), and
// detcoll's deterministic all-reduce over NCCL (gpu/devcomm) across the
// tensor-parallel group. Its forward and backward give the same bits at
// TP = 1, 2, 4 and 8 (with L = 8 canonical chunks).
//
// # The determinism contract
//
// For one configuration (H, I, L, tokens, bf16, Config.Pedantic) the
// layer's y, dx and the weight gradients (reassembled from the TP shards)
// are the same bits at every TP size with L/TP a power of two, on every
// rank and every run, provided that
//
//   - every GPU involved is the same model with the same SM count (cuBLAS
//     picks its kernels by architecture and SM count),
//   - the same cuBLAS library version is loaded on every rank and run
//     (cuBLAS does not promise the same bits across versions), and
//   - the math mode is fixed: CUBLAS_DEFAULT_MATH with
//     CUBLAS_COMPUTE_32F (bf16 inputs, float32 accumulation, never TF32:
//     the inputs are bf16), or with Config.Pedantic CUBLAS_PEDANTIC_MATH
//     with CUBLAS_COMPUTE_32F_PEDANTIC, both with
//     CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (split-K sums stay
//     float32); CUBLAS_GEMM_DEFAULT; alpha 1, beta 0; atomics not allowed;
//     one stream per handle and a fixed 32 MiB workspace
//     (cublasSetWorkspace).
//
// The GPU results are not the host reference's bits (cuBLAS's order of
// products inside a chunk is its own, and tensor cores accumulate their
// own way); the contract is TP invariance, which needs only that every
// canonical chunk's product is computed identically at every TP size.
//
// # How: the same cuBLAS calls at every TP size
//
// Every GEMM of the layer is package parallel's MatMul structure — K split
// into L canonical chunks (parallel.ChunkBounds), one bf16 partial product
// per chunk (float32 accumulation inside cuBLAS, rounded to bf16 by
// cuBLAS), the partials joined by the canonical pairwise tree — with the
// intermediate dimension cut into the L blocks of I/L that are those
// chunks. A TP rank holds L/TP whole blocks, and every cuBLAS call is over
// one block (or one chunk of one block), so each call a TP rank makes is
// exactly a call of the TP = 1 layer: the same m, n, k, transpositions,
// leading dimensions, strides, batch count, and pointer alignment (blocks
// and slabs start on 256-byte boundaries). cuBLAS being deterministic for a
// fixed call on one GPU type, every chunk partial has the same bits. The
// trees over the partials are detcoll's reduce kernel; in a row-parallel
// GEMM a rank reduces its L/TP chunks, and the deterministic all-reduce over
// TP continues the same tree (docs/contract.md, the subtree property).
//
// The calls, with T tokens, nb = I/L, nl = L/TP (package parallel's host
// FFN without sequence parallelism, step for step):
//
//	forward   g, u = x·Gate, x·Up      per block j: K = H in L chunks (one strided batched call), tree → g_j, u_j
//	          a = SwiGLU(g, u)         the kernel, package parallel's formulas
//	          y = a·Down               per local chunk c: K = nb (one call), tree over nl, all-reduce over TP
//	backward  da = dy·Downᵀ            per block j: K = H in L chunks, tree
//	          dg, du = SwiGLU'(g,u,da) the kernel
//	          lanes dg·Gateᵀ, du·Upᵀ   per local chunk, tree over nl per lane, one all-reduce of both lanes side by side
//	          dx = lane_g + lane_u     one bf16 addition (a tree of two), after the all-reduce
//	          xᵀ·dg, xᵀ·du, aᵀ·dy      per block j: K = tokens in L chunks, tree
//
// Chunks of equal non-zero length are one cublasGemmStridedBatchedEx call
// (batch L); otherwise one cublasGemmEx per chunk and a zeroed slab for an
// empty chunk (its partial is +0). Both depend only on the shape, so TP
// ranks and the TP = 1 layer plan the same calls (TestPlanSameCallsAtEveryTP
// checks it, and TestEmulatedLayerEqualsHost runs the whole plan on the
// host with the host reference's arithmetic and gets package parallel's
// bits).
//
// # Scope
//
// bf16 only; no sequence parallelism; CP = 1 (the weight gradients'
// all-gather over CP is not done on the device). Forward and Backward
// allocate their outputs; the layer keeps one partial-product workspace
// (grown on demand) and synchronises its stream at the end of Backward to
// free the temporaries. Timing (SetTiming, Timings) records CUDA events
// around each phase and each collective on the layer's stream.
package gpuffn
