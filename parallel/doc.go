// Package parallel is the host side of detcoll's parallel layers: a TP × CP
// × DP process mesh, the tensor-, sequence- and context-parallel
// communication of a gated (SwiGLU) feed-forward layer, and the
// context-parallel communication of causal attention (the seed's ag_rs
// pattern), with a Go reference of the arithmetic so that the whole
// schedule runs, and is tested bit for bit, with goroutine ranks. GPU
// backends plug in through RegisterGPUBackend. docs/parallel.md has the
// narrative version and the measured errors.
//
// # Mesh
//
// NewMesh splits a world communicator into TP, CP, DP and Model (TP × CP)
// groups, TP fastest: world rank = t + TP·(c + CP·d). SP is the TP group.
// The (tp, cp, dp) triples are all-gathered first, so a wrong product or
// ranks that disagree are an error on every rank.
//
// # The determinism contract
//
// For one configuration (dtype, sizes, L canonical chunks, heads) the
// layer outputs and gradients, put back in sequence order and full size,
// are the same bits for every TP with L/TP a power of two (L = 8: TP = 1, 2,
// 4, 8), every CP, with or without sequence parallelism, in either token
// layout, in every DP replica and on every run: the single rank (TP = CP =
// 1) is the reference for every mesh. Replicated results (y and dx without
// SP, the weight gradients over CP) are identical on every rank that holds
// them.
//
// # Canonical K chunks (docs/contract.md, "Layouts")
//
// Every GEMM is MatMul: the shared dimension K is split into L canonical
// chunks (ChunkBounds: contiguous, as even as possible); each chunk is a
// float32 accumulation rounded once to the dtype; the L partials are joined
// by the canonical pairwise tree with the dtype's addition (reduce.Oracle,
// accumulate native — the collectives' arithmetic). In a row-parallel GEMM
// (K = the intermediate dimension I, split over TP) rank t holds chunks
// [t·L/TP, (t+1)·L/TP) — the same I columns as its Gate/Up shard — reduces
// them locally with the tree, and the deterministic AllReduce (or
// ReduceScatter) over the TP group continues the same tree: the first
// log2(L/TP) levels of the tree over L pair values inside aligned blocks of
// L/TP, the rest is the tree over TP. That holds for:
//
//   - forward: y = a·Down (K = I);
//   - backward: the input-gradient lanes dg·Gateᵀ and du·Upᵀ (K = I), each
//     reduced by its own tree (ReduceScatterMany under SP, one AllReduce
//     over both lanes side by side otherwise) and only then added:
//     dx = lane_gate + lane_up in the dtype;
//   - the weight gradients xᵀ·dg (Gate), xᵀ·du (Up) and aᵀ·dy (Down) (K = every
//     token of the sequence): each rank all-gathers the activations over CP
//     (AllGatherMany of x, dy, a, dg, du), puts the tokens back in sequence
//     order and forms the canonical token chunks itself, so the result does
//     not depend on CP;
//   - and, trivially, the local GEMMs x·Gate, x·Up and dy·Downᵀ (K = H).
//
// The collectives are called with AccumulateNative whatever the
// communicator's default: the F32 mode would round the ranks' partials
// differently from the local tree.
//
// # Arithmetic of the host reference
//
// Within a chunk the float32 accumulator starts at +0 and adds, in
// ascending k, the products rounded to float32: acc += float32(a·b). The
// explicit conversion is what the Go specification defines to round and to
// forbid fusing the multiply and the add into an FMA (the compiler fuses on
// arm64, ppc64le, s390x, riscv64, loong64 and amd64 with GOAMD64=v3); every
// product in the package is written that way. TestMatMulDefinition and
// TestFormulasNotFused check the bits against restatements done in float64
// (which round exactly like float32 here and cannot be fused). Results are rounded to nearest even into bf16, fp16 or
// fp32 with NaN canonical.
//
// Activations use fixed float32 formulas, so their bits are the same on
// every platform: Exp32 and Log32 (Cody–Waite reduction and the Cephes
// polynomials, every step rounded), Sigmoid32(x) = 1/(1+Exp32(-x)),
// a = round(SiLU32(g)·u), du = round(da·(g·s)), dg = round((da·u)·(s·(1 +
// g·(1-s)))) with s = Sigmoid32(g). Attention: AttentionCore and
// AttentionCoreBackward state their orders.
//
// # FFN communication (FFN, NewFFN)
//
// Gate and Up [H × I] are column-parallel, Down [I × H] row-parallel.
// Forward: under SP an AllGather of the tokens over TP before Gate/Up; after
// Down an AllReduce over TP, or under SP a ReduceScatter. Backward: under SP
// an AllGather of dy; the gate and up input-gradient lanes as above; the CP
// AllGatherMany for the weight gradients. Each call first all-gathers a
// small shape descriptor over the Model group.
//
// # Attention communication (Attention, NewAttention)
//
// Tokens are in the zigzag layout (2·CP chunks, CP rank r holds r and
// 2·CP-1-r). Forward: a rank-ordered AllGatherMany of Q, K, V and the
// position ids, a reorder to sequence order, the same AttentionCore on
// every CP rank over the whole sequence, and a Scatter of the root's (CP
// rank 0) output and log-sum-exp to every rank's shard: data movement only,
// so a -0 arrives as -0. Backward: an AllGather of the output gradient, the
// same AttentionCoreBackward on every rank, and one three-lane
// ReduceScatterMany of dQ, dK, dV in which the root contributes its
// gradients and every other rank -0. -0 is the additive identity of IEEE
// addition (x + -0 = x for every x, -0 included), so the tree returns the
// root's bits exactly; the seed's +0 padding would turn -0 into +0.
//
// Backends: cuda_ag_rs and rccl_ag_rs (ParseBackend) run on their
// registered GPU backend by default and fail with ErrNoGPUBackend ("needs a
// GPU backend") when there is none; with DeviceHost every name runs the
// same ag_rs communication on the host. local_debug is one rank without
// communication (a nil or one-rank CP group) and gives the same bits.
//
// # Errors
//
// Constructors and layer calls are collective. Each rank checks its own
// arguments and then all-gathers a fixed-size descriptor (the operation, a
// rejected flag, the shapes or configuration), so a rank with bad
// arguments (wrong shapes or dtype, a token count that does not divide over
// SP or into the zigzag chunks of CP, TP incompatible with L) and ranks that
// disagree (different token counts, sizes, configurations) produce an error
// on every rank of the group — ErrInvalidArgument or ErrMismatch, which wrap
// detcoll's sentinels of the same name — before any data moves, and the
// communicators stay usable. Only shapes are compared: inputs that a
// configuration replicates (x without SP) must also have the same values.
//
// # GPU backends
//
// The layers are interfaces (FFN, Attention) over Tensor: *Matrix on the
// host, a backend's device tensors on a GPU. A GPU package implements
// GPUBackend and registers it for a backend name; NewFFN and NewAttention
// pick it by Backend and Device. It must keep the contract above (L
// canonical chunks, the tree, rank-ordered collectives, the root's results);
// to equal the host reference bit for bit it must also keep the
// within-chunk order and the fixed formulas, which the host functions
// (MatMul, AttentionCore, Exp32, …) let its tests check.
package parallel
