// Package detcoll is deterministic collective communication: AllReduce,
// AllGather and ReduceScatter (plus Broadcast, Scatter, Barrier and Split)
// whose floating-point results are a pure function of the inputs.
//
// # The promise
//
// For a given contract version (ContractVersion), the output bits of a
// collective depend only on the input bits of every rank, the world size W,
// the dtype, the operation and the accumulate mode. They do not depend on
// arrival order, algorithm, chunking, message size, transport or device.
// Every rank receives identical bits.
//
// Every element is reduced with one fixed tree over the ranks: adjacent pairs
// (r0,r1), (r2,r3), … are added with the lower rank on the left, an odd last
// value is carried up unchanged, and this repeats until one value is left.
// For W = 8 that is ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)); for W = 3 it is
// (r0+r1)+r2. Additions are IEEE round-to-nearest-even in the dtype (fp16 and
// bf16: every node rounded to the dtype, or with Accumulate F32 the whole
// tree in float32 rounded once at the root). Any NaN result is the canonical
// quiet NaN; signed zeros, infinities and subnormals follow IEEE. See
// docs/contract.md for the full contract and package reduce for the reference.
//
// # Layouts
//
// AllGather: every rank sends count elements and receives W*count, rank r's
// block at [r*count, (r+1)*count). ReduceScatter: every rank sends W*count
// and receives the reduction of block r. AllReduce: count in, count out.
// Buffers are raw little-endian elements ([]byte); Float32Bytes and friends
// view typed slices as bytes without copying.
//
// # Use
//
// A Comm is one rank's handle on a group. Build one over any
// transport.Transport with New, or W in-process ranks with NewInProc.
// Collectives are matched across ranks by call order: every rank must issue
// the same collectives in the same order, and the n-th call of one rank
// runs with the n-th call of every other. Every call that reaches the wire
// is numbered, and every message carries the call number and the 64-bit
// hash of the call's signature (operation, count, dtype, lanes, root,
// algorithm, accumulate). The first time a Comm sees a signature the ranks
// compare it before any data moves; a signature agreed before costs nothing
// more afterwards (no extra message). So a rank whose call differs from its
// peers' call of the same number — a skipped, extra or reordered call, or
// another signature — gets ErrMismatch, and so does every other rank,
// instead of a result of mixed data; the error names this rank's call, the
// peer's, and their call numbers. Calls that differ only in their data
// cannot be told apart. A call refused by its argument checks (see Errors)
// is not numbered. Sub-communicators from Split number their own calls.
// The promise in full, with its one limit (a rooted Broadcast or Scatter
// whose sender learns of a receiver's mismatch only at its next call):
// docs/reliability.md, "Mismatched collectives".
//
// Thread safety: a Comm is safe for concurrent use, but its collectives run
// one at a time and are matched by order, so issue them from one goroutine.
//
// Buffer ownership: collectives borrow the caller's buffers until they
// return and retain none of them. AllReduce may run in place (send and recv
// the same slice); AllGather runs in place when send is rank r's block of
// recv. Any other overlap is an error.
//
// Contexts: every collective takes one and ends when it ends. A context
// without a deadline gets the communicator's timeout (WithTimeout, 5 minutes
// by default). A call derives no context per call from the caller's; the
// communicator keeps one cancellable child of the last call's context for
// its exchange steps, replaced when a call brings another context and
// released by Close, so it holds a reference to that context between calls.
//
// Errors: bad arguments return errors wrapping ErrInvalidArgument before
// anything moves, and leave the Comm usable. Any transport failure, a
// cancelled or expired context during a collective, or a mismatch poisons the
// Comm: it closes its transport (so that peers fail fast instead of waiting)
// and every later call returns an error wrapping ErrPoisoned and the cause.
package detcoll

// ContractVersion names the arithmetic contract (tree, per-dtype addition,
// NaN and signed-zero rules). It changes only if the bits would.
const ContractVersion = "detcoll-tree-v1"
