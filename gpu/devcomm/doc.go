// Package devcomm is detcoll's deterministic collectives on GPU device
// memory — NVIDIA over NCCL, or AMD over RCCL (WithVendor("rocm") or
// DETCOLL_DEVICE=rocm; default: the first vendor linked in and usable, CUDA
// first) through the vendor-neutral runtime of package gpu/devrt, one code
// path for both; the AMD side has never run on AMD hardware (docs/rocm.md) —
// with NCCL (or RCCL) as the transport only: NCCL moves bytes (ncclAllGather,
// grouped ncclSend/ncclRecv), detcoll's reduce kernels (package gpu's, and
// this package's kernels/fast.cu for W = 2, 4, 8) do all the arithmetic with
// the fixed rank tree of docs/contract.md. NCCL's own
// reductions are never used for a result, so the output bits equal the host
// oracle (reduce.Oracle) and every other detcoll backend, whatever the
// algorithm, size, stream or graph capture.
//
// # API
//
// The calls are shaped like NCCL's: device buffers, element counts, a dtype
// and a CUDA stream.
//
//	c, err := devcomm.New(ctx, job)              // job from cluster.Init
//	err = c.AllReduce(ctx, send, recv, count, detcoll.BF16)
//	err = c.AllGather(ctx, send, recv, count, detcoll.BF16, devcomm.OnStream(s))
//	err = c.ReduceScatter(ctx, send, recv, recvCount, detcoll.FP32, devcomm.WithAlgorithm(detcoll.A2ATree))
//
// A Buffer is a device address plus the number of bytes the caller vouches
// for; every call checks its element count against that size, so a count
// beyond the declared buffer is an error rather than a stray write. Layouts
// are those of package detcoll (and NCCL): AllGather places rank r's block
// at [r*count, (r+1)*count) of recv; ReduceScatter's send holds W*count
// elements and rank r receives the reduction of block r; AllReduce is count
// in, count out, in place allowed. AllGatherMany and ReduceScatterMany run
// several independent lanes in one call (one NCCL group); each lane has its
// own tree.
//
// # Stream ordering and CUDA graphs
//
// Every collective only enqueues work on its stream (the communicator's own
// non-blocking stream, Stream, unless OnStream names another) and returns
// before the data moves: there is no host synchronisation inside a
// collective, so a collective can be captured into a CUDA graph and the
// graph replayed. Synchronise the stream (Comm.Synchronize, or an event)
// before reading the output on the host. Two exceptions, both outside the
// steady state: the first call with a new signature compares it across
// ranks over the host communicator (out of band, no CUDA work), and a call
// that needs more workspace than is retained grows it (cuMemAlloc, and the
// old buffer is freed after synchronising the stream that used it). Growth
// is refused while the stream is being captured: run the collective once
// outside the capture, or call Reserve, first.
//
// The workspace is shared by the reductions of a communicator. Reductions
// on one stream are ordered by the stream; when one uses a different stream
// from the previous one, the new stream is made to wait for the old one (an
// event, no host synchronisation), so a stream passed with OnStream must stay
// alive until the next reduction has been issued, or be handed to
// ReleaseStream before it is destroyed. The join is skipped while either
// stream is capturing: order graph launches after earlier collectives of the
// same communicator yourself (same stream, or events). AllGather uses no
// workspace and is ordered by NCCL alone. Once anything has
// been captured, a growing workspace keeps its old buffers alive (a graph may
// still use them) until ReleaseWorkspace or Close; ReleaseWorkspace frees
// them, so destroy graphs that use this communicator before calling it.
//
// # Threads and CUDA contexts
//
// A Comm drives one GPU through its primary context (the context NCCL and
// the CUDA runtime use). Every method locks the calling goroutine to its OS
// thread, makes the context current and unlocks again, so any goroutine may
// call. A Comm is safe for concurrent use but serialises its calls, and
// collectives are matched across ranks by call order (as in NCCL): issue
// them from one goroutine, in the same order on every rank. To capture,
// call the collective inside gpu.Device.Capture (Comm.Device) on the stream
// being captured: the capture and the collective then run on one locked
// thread.
//
// # Initialisation
//
// New joins the communicator of a launched job (cluster.Job): rank 0 calls
// ncclGetUniqueId and publishes the id in the job's store under a key below
// the prefix (default "detcoll/devcomm"), every rank reads it and calls
// ncclCommInitRank on GPU LOCAL_RANK (or WithDevice). NCCL refuses two ranks
// on one GPU; New checks that first and says so. New sets NCCL_NVLS_ENABLE=0
// in the process environment when it is unset (NVLink multicast stays off).
// The host communicator of the job is split once (detcoll.Comm.Split) for the
// signature checks, so they never interleave with the job's own host
// collectives.
//
// # Ownership
//
// Buffers belong to the caller and are borrowed until the enqueued work has
// completed on the stream; the Comm keeps no reference to them. The
// workspace, the stream, the NCCL communicator and the host sub-communicator
// belong to the Comm and are released by Close.
//
// # Errors
//
// Bad arguments (a nil pointer with a non-zero count, a count beyond the
// declared Bytes, a negative count, a dtype that cannot be reduced, a
// misaligned pointer, overlapping buffers, a count that does not split as
// the layout needs) return an error wrapping detcoll.ErrInvalidArgument
// before anything is enqueued; the Comm stays usable. A closed Comm returns
// detcoll.ErrClosed. Ranks that called different collectives get
// detcoll.ErrMismatch, an *agree.MismatchError (internal/agree, the host
// Comm's agreement primitive) naming every rank's call and call number:
// found when a new signature is compared across ranks over the host
// sub-communicator, and by the peer-memory kernels (below); on the NCCL
// path a validated call carries nothing, so a difference there shows only
// at the next comparison (docs/reliability.md, "Device communicator", has
// what each path catches). Any NCCL or CUDA
// failure poisons the Comm: its NCCL communicator is aborted and every later
// call returns detcoll.ErrPoisoned wrapping the cause. Errors are
// *detcoll.Error values naming the operation and the rank.
//
// # Bounded waits and Abort
//
// No host wait is unbounded. Synchronize (WithWaitTimeout, default
// DefaultWaitTimeout; SynchronizeCtx takes a context) and Close poll the
// stream (cuStreamQuery) and, between polls, ncclCommGetAsyncError, the
// peer-memory error word and the abort flag: a peer that died (its process
// exited, or it stopped calling) leaves NCCL's kernel spinning, so the wait
// ends with NCCL's asynchronous error or ErrWaitTimeout, NCCL is aborted and
// the Comm poisoned. A call's context bounds its signature check and its
// enqueue (which can block in NCCL, waiting for a dead peer): when it ends
// first, the Comm aborts itself and the call fails. AsyncError also
// poisons. Abort, from any goroutine and
// while another call holds the Comm, aborts NCCL (ncclCommAbort) and the
// peer-memory kernels and poisons (ErrAborted). Close never frees memory a
// device may still write: when the streams did not drain, or the
// peer-memory close handshake failed, the workspace or the staging buffer
// is leaked, logged and counted in Stats.LeakedBytes.
//
// # Where things are
//
// lifecycle.go (New, Close, Abort), options.go (Option, CallOption, the
// environment), choose.go (Thresholds and the automatic choice), agree.go
// and signature.go (the signature record and the agreement: call numbers,
// the cross-rank comparison, mismatch errors), comm.go (state, the
// workspace, the frame of every call), collectives.go (the calls and their
// argument checks, args.go), ccl_*.go (the NCCL-transport algorithms),
// ipc_*.go and kernels/ipc*.cu (the peer-memory protocol and its kernels),
// fast.go and kernels/fast.cu (the unrolled reduce kernels), wait.go (the
// bounded waits). The verification harness is package gpu/devverify.
//
// # Algorithms and memory
//
// gather_tree: every rank's whole input is gathered into the workspace
// ((W-1) or W × the input), then the tree kernel reduces the W slabs
// straight into the caller's output. a2a_tree: one NCCL group of
// ncclSend/ncclRecv pairs so that rank r holds shard r of every rank
// (workspace (W-1)/W × the input), the tree kernel on that shard written
// straight into the caller's output, then a gather of the reduced shards in
// place in the output. When the count does not divide by W the shards are
// uneven (package tree's Shard: the first count%W ranks get one more
// element) and the final gather is a group of sends and receives instead of
// ncclAllGather. ReduceScatter reduces only the local block: a2a_tree
// receives block r of every peer, gather_tree gathers the whole inputs (up
// to W × the input) and reduces block r. AllGather with the NCCL
// algorithms (GatherTree, A2ATree) is one ncclAllGather straight into the
// caller's output and needs no workspace; with peer memory (below) Auto,
// OneShot and TwoShot copy through peer memory instead. For AllReduce,
// Auto picks gather_tree below AutoA2ABytes and a2a_tree from there; with two
// ranks (both algorithms receive the same bytes, gather_tree in one NCCL
// operation instead of two) the threshold is AutoA2ABytesTwoRanks. For the
// reduce-scatters Auto is always a2a_tree, which receives W× fewer bytes.
// These sizes are the defaults of Thresholds, a value of the communicator
// (WithThresholds; Comm.Thresholds), and the choice is one pure function of
// the operation, the size, W, the topology and the thresholds (choose.go).
//
// The gathers inside the reductions use grouped sends and receives from
// Thresholds.P2PBytes per rank and ncclAllGather below (GatherAuto; WithGather
// forces one). With a pipeline chunk set (WithChunkBytes; off by default),
// reductions whose send/receive phase moves at least two chunks are
// pipelined: the transfer of chunk i+1 (NCCL, on the call's stream)
// overlaps the reduce of chunk i (on the communicator's second stream,
// joined back with events, so still stream-ordered and capturable). The reduce kernels for W = 2, 4 and
// 8 are this package's kernels/fast.cu, the tree unrolled at compile time
// over the element types of package gpu (same arithmetic code, same bits);
// other W use package gpu's kernels. None of these choices changes a bit.
//
// # Peer memory (CUDA IPC, HIP IPC)
//
// Peer memory is CUDA IPC on NVIDIA and HIP IPC on AMD (the same protocol
// and kernels; written and compiled in CI, never run on AMD hardware).
// When every rank is on one host, in its own process, and every pair of
// GPUs has peer access (checked at New, the same answer on every rank;
// IPC reports it), New also maps every peer's staging buffer (2 × the
// capacity of WithIPC, default DefaultIPCBytes, plus IPCHeaderBytes per
// rank) and the algorithms OneShot and TwoShot run as one kernel each over
// NVLink stores: one-shot AllReduce (LL lines for small messages),
// two-shot AllReduce, and peer-memory ReduceScatter and AllGather (forced
// with OneShot or TwoShot, NCCL with GatherTree or A2ATree). Auto then
// picks peer memory at every size (AutoOneShotBytes splits one-shot from
// two-shot). The protocol keeps its sequence numbers in device memory, so
// these collectives are stream-ordered and can be captured in CUDA graphs
// like the others; every device wait is bounded (WithIPCTimeout) and a
// timeout poisons the communicator with ErrIPCTimeout, reported by the next
// call or Synchronize; Close meets every rank before freeing the staging.
// Every launch carries the call's identity (the low 32 bits of its call
// number and the folded signature hash), which the kernels compare with
// every peer's: ranks that called different collectives at the same point
// (e.g. two already-validated collectives in different orders), or the same
// one under different call numbers, get detcoll.ErrMismatch (an
// *agree.MismatchError with cause ErrIPCMismatch) instead of each other's
// data. A graph replays the call numbers of its capture, so every rank
// replays where its peers replay. A CUDA
// graph of peer-memory collectives shares the staging and its sequence
// counter with the eager calls: launch it with LaunchGraph, which orders it
// after the previous call and before the next one.
// Without peer memory OneShot and TwoShot run as GatherTree and A2ATree.
// docs/ipc.md has the protocol, the thresholds and their measurements.
package devcomm
