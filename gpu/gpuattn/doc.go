// Package gpuattn is the communication path of package parallel's
// context-parallel ag_rs attention on NVIDIA GPUs, over detcoll's
// deterministic collectives (gpu/devcomm), with device buffers:
//
//	forward   AllGatherMany (rank order) of this rank's zigzag shard of Q, K,
//	          V (bf16, tokens × heads·head_dim) and its position ids
//	          reorder kernel (kernels/gather_rows.cu): zigzag → sequence order
//	          the attention core over the whole sequence, the same on every rank
//	          this rank's shard of (out, lse): a device row gather of the core's
//	          output on this rank
//	backward  AllGather of the output-gradient shards, reorder kernel
//	          the core backward over the whole sequence
//	          ReduceScatterMany of dQ, dK, dV: rank 0 (the root) contributes its
//	          gradients in the ranks' zigzag blocks, every other rank -0
//
// The attention core itself runs on the host: the gathered, reordered
// tensors are copied back and handed to parallel.AttentionCore and
// parallel.AttentionCoreBackward, and the results are copied to the device
// again. What is under test is the device communication and layout path,
// not a GPU attention kernel.
//
// # No Scatter
//
// The host package delivers the root's (out, lse) with a Scatter; devcomm
// has none, and none is needed. After the all-gather every rank holds the
// same bytes of Q, K, V and positions (an all-gather moves bytes and does
// no arithmetic), reorders them with the same permutation, and runs the
// same deterministic core, so every rank's (out, lse) is bit for bit the
// root's. Taking this rank's rows of its own result is therefore exactly
// the root's Scatter, with no communication. The GPU test checks the
// premise: it compares a hash of every rank's whole out and lse.
//
// The gradients are delivered as in package parallel, by a reduce-scatter
// whose non-root contributions are -0: -0 is the identity of IEEE addition
// (x + -0 == x for every x, -0 included), so each lane returns the root's
// bits exactly.
//
// # Determinism contract
//
// For the same inputs, CP = W (the job's GPUs, W = 1, 2, 4 or 8) gives the
// same bytes of out, lse, dQ, dK and dV as CP = 1 (each rank alone on its
// GPU, all tokens local, no collectives) and as package parallel's host
// attention (cuda_ag_rs on DeviceHost over the job's host communicator, and
// local_debug). bf16 only; the per-rank token count must be even (the
// sequence splits into 2·CP zigzag chunks).
package gpuattn
