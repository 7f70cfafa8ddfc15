// Package bench is the benchmark behind `detcoll bench`: it times detcoll's
// deterministic collectives against the native collective of the same
// device on the same buffers, checks their bits, and writes the versioned
// report detcoll.bench.v1 (docs/contract.md, "Benchmark report") as JSON, a text table and a
// latency plot.
//
// # What is measured
//
// A run is a list of operations (all_reduce, all_gather, reduce_scatter)
// × per-rank sizes × algorithms (gather_tree, a2a_tree; all_gather has one,
// reported as "direct") in one dtype. For each (operation, size) a Backend
// prepares a Case: the input of every rank, a pure function of (seed, rank,
// dtype) (FillInput), a deterministic output and a native output. Native is
// NCCL/RCCL on GPUs and, on the CPU backend, the ring reduce-scatter +
// all-gather of internal/ring over the same transport (the order Gloo
// uses) — a performance reference, not an arithmetic oracle.
//
// Every measurement (native once per case, then deterministic once per
// algorithm) is: one untimed run; Warmup iterations; then Samples samples,
// each a barrier, Iterations back-to-back iterations and this rank's mean
// time per iteration, of which the slowest rank's (the maximum over ranks,
// all-gathered over the Comm) is the sample. A row reports the median, min,
// max and every sample in microseconds. On CPU the time is the wall clock
// around the loop; GPU backends time with events on the stream.
//
// Derived figures: latency_ratio_vs_native = deterministic median / the
// faster native median (below 1: detcoll is faster); input_gbps = input_bytes / median and
// native_input_gbps likewise; bus_gbps follows nccl-tests (see BusBytes:
// 2(W-1)/W·S/t for all_reduce, (W-1)/W·S_total/t for all_gather and
// reduce_scatter, S_total the whole output or input). GB/s are 1e9 B/s.
// input_bytes is per rank, see Op; requested sizes are rounded down to
// whole elements, and for reduce_scatter to a multiple of W elements
// (InputBytes), and both numbers are recorded.
//
// # What is checked
//
//   - repeat_bitwise: the deterministic output of the untimed first run
//     (written over a buffer poisoned with 0xFF bytes) and of the last timed
//     iteration are the same bytes on every rank, and for all_reduce and
//     all_gather every rank's output hashes the same (CRC-32C and CRC-32
//     side by side).
//   - oracle_bitwise: the output equals the host reference byte for byte:
//     reduce.Oracle over every rank's input (all_gather: the inputs'
//     concatenation). No input moves: every rank regenerates the inputs it
//     needs. For all_reduce and all_gather each rank checks its shard of
//     the output and the equal hashes extend that to the whole output on
//     every rank; for reduce_scatter each rank checks its own output.
//   - max_abs_vs_native: the largest float64 |deterministic − native| over
//     every output element, NaN-aware (positions where both are NaN are
//     skipped). Non-zero is expected: native adds in another order.
//   - all_rank_repeat_bitwise: the AND of every row's repeat_bitwise.
//
// workspace_bytes and peak_allocated_bytes are detcoll's workspace retained
// after the row and its peak during the row (the workspace is released
// before each row); native_peak_allocated_bytes is the native collective's
// scratch. All three are the maximum over ranks.
//
// The baseline is named in the report's baseline: "NCCL", "RCCL", or on
// CPUs "ring (detcoll's reference of Gloo's order)" — detcoll's own ring, not
// Gloo or MPI, whose figures come in as a Peer. A backend whose cases are
// SymmetricCase (NCCL ≥ 2.27) also measures the baseline on symmetric
// registered buffers; both are kept and the ratio is against the faster.
// With Config.InPlace, InPlaceCase cases also run and check in place
// (nccl-tests' in-place columns).
//
// # Bounds
//
// Config.Timeout bounds every phase on every rank — a case's preparation,
// a first run, a warm-up, a sample, the checks — each together with the
// agreement that follows it, so a stopped or dead peer (SIGSTOP, kill -9)
// makes every other rank return an error within the timeout; the native
// baselines that talk to the transport directly (internal/ring) have no
// other bound. RawAllToAll is bounded by its context in every step.
//
// Run is collective: every rank calls it with the same Config (checked
// field by field: a mismatch names the field, ErrConfigMismatch); every
// rank returns the same Report and sees every row through Config.OnRow as
// soon as it is finished. Backends other than CPU (CUDA, ROCm) implement
// Backend and Case.
package bench
