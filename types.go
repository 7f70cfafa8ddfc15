package detcoll

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/agree"
	"github.com/detcoll/detcoll/reduce"
)

// DType is an element type; see package dtype.
type DType = dtype.DType

// The reducible dtypes.
const (
	BF16 = dtype.BF16
	FP16 = dtype.FP16
	FP32 = dtype.FP32
	FP64 = dtype.FP64
	Byte = dtype.Byte // opaque bytes: data movement only
)

// ParseDType accepts bf16, fp16, fp32, fp64 and their common aliases.
func ParseDType(s string) (DType, error) { return dtype.Parse(s) }

// Accumulate selects fp16/bf16 accumulation; see package reduce.
type Accumulate = reduce.Accumulate

// Accumulate modes.
const (
	AccumulateNative = reduce.Native
	AccumulateF32    = reduce.F32
)

// Algorithm selects how a reduction moves data. All give identical bits.
type Algorithm uint8

const (
	// Auto picks by size for AllReduce (over messages: RecursiveDoubling
	// for small messages at W ≥ 4, then HalvingDoubling at W = 2^k,
	// GatherTree at W = 2 and 3, A2ATree for large ones; over a
	// shared-memory window GatherTree or A2ATree) and for ReduceScatter
	// (over messages at W ≥ 4: HalvingDoubling at W = 2^k for inputs up
	// to 32 KiB, else RecursiveDoubling up to 16 KiB; A2ATree otherwise;
	// docs/architecture.md, "Auto").
	Auto Algorithm = iota
	// GatherTree all-gathers every input, then reduces locally (the seed's
	// transport-only path): (W-1)·N bytes received per rank.
	GatherTree
	// A2ATree sends shard j of every input to rank j, reduces the shard, and
	// all-gathers the reduced shards: 2(W-1)/W·N bytes, bandwidth-optimal.
	A2ATree
	// OneShot is gather_tree over direct peer memory (CUDA IPC): every rank
	// writes its input into every peer's staging buffer and reduces all W
	// inputs locally in one kernel, the lowest-latency algorithm for small
	// messages. Transports without peer memory run it as GatherTree.
	OneShot
	// TwoShot is a2a_tree over direct peer memory: shard j of every input is
	// written to rank j, which reduces it and writes the reduced shard to
	// every peer, in one kernel and bandwidth-optimal. Transports without
	// peer memory run it as A2ATree.
	TwoShot
	// RecursiveDoubling evaluates the tree level by level on every rank:
	// at level l each rank sends the value of its block of 2^l ranks to
	// the sibling block and adds the sibling's, the lower block on the
	// left (tree.DoublingSteps). ⌈log2 W⌉ steps of one message of N bytes
	// each instead of gather_tree's one step of W-1 messages: the
	// low-latency AllReduce over point-to-point messages. It is an
	// AllReduce algorithm; where it cannot run it runs as GatherTree, with
	// the same bits: over a shared-memory window (one publication already
	// serves every level), on GPUs, and for fp16 and bf16 with f32
	// accumulation (whose partials would have to travel as float32).
	// ReduceScatter runs it as an AllReduce of its whole input of which
	// each rank keeps its block (there its twin is A2ATree);
	// ReduceScatterMany runs it as A2ATree.
	RecursiveDoubling
	// HalvingDoubling is a2a_tree's bytes in log2 W steps each way, at
	// W = 2^k (tree.HalvingSteps): at level l a rank sends half of the
	// range it holds to rank r xor 2^l and adds the partials of the other
	// half, the lower block on the left, then the levels run backwards to
	// all-gather the reduced ranges (Rabenseifner's all-reduce, in the
	// tree's order). 2·log2 W messages per rank instead of 2(W-1): the
	// bandwidth-optimal AllReduce over point-to-point messages at large W.
	// ReduceScatter runs its first half over the W blocks, each placed so
	// that rank r ends with block r (tree.HalvingPosition): log2 W
	// messages instead of W-1, the same bytes. Where it cannot run it
	// runs as A2ATree: at other W, over a window, on GPUs, for fp16 and
	// bf16 with f32 accumulation, and in ReduceScatterMany.
	HalvingDoubling
)

var algNames = []string{"auto", "gather_tree", "a2a_tree", "one_shot", "two_shot", "recursive_doubling", "halving_doubling"}

func (a Algorithm) String() string {
	if int(a) < len(algNames) {
		return algNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// Valid reports whether a is a known algorithm.
func (a Algorithm) Valid() bool { return a <= HalvingDoubling }

// Transport returns the algorithm a runs as on a transport without direct
// peer memory: OneShot as GatherTree, TwoShot as A2ATree, others unchanged.
// Both move the same bytes between the same ranks and give the same bits.
func (a Algorithm) Transport() Algorithm {
	switch a {
	case OneShot:
		return GatherTree
	case TwoShot:
		return A2ATree
	}
	return a
}

// ParseAlgorithm accepts auto, gather_tree, a2a_tree, one_shot, two_shot,
// recursive_doubling and halving_doubling.
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algNames {
		if strings.EqualFold(s, n) {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("detcoll: unknown algorithm %q (want auto, gather_tree, a2a_tree, one_shot, two_shot, recursive_doubling or halving_doubling)", s)
}

// autoA2ABytes is the per-rank message size from which Auto uses A2ATree
// at W > 2 without a window.
const autoA2ABytes = 64 << 10

// autoA2ABytesW2 is the per-rank message size from which Auto uses A2ATree
// at W = 2 without a window. Forced TCP, fp32, median of 3 (µs, gather /
// a2a): 1 MiB 373 / 405, 2 MiB 971 / 772, 4 MiB 2579 / 1896, 16 MiB
// 12511 / 9188 (docs/architecture.md, "Auto").
const autoA2ABytesW2 = 2 << 20

// autoA2AWindowElems is the per-rank element count from which Auto uses
// A2ATree over a shared window, at every W. W = 4 on 2 cores, 2026-12-02:
// fp32 64 KiB (16 Ki elements) gather 43–55 µs against a2a 66–74; 256 KiB
// (64 Ki) even; bf16 64 KiB (32 Ki) gather 43–97 against a2a 35–43. W = 2,
// 2026-12-03, median of 3, µs, gather / a2a: fp32 64 KiB 15.7 / 15.0,
// 256 KiB 39.6 / 42.5, 512 KiB 82.0 / 63.9, 1 MiB 159 / 115; bf16 64 KiB
// 18.5 / 13.9, 1 MiB 184 / 117 (docs/shm.md).
const autoA2AWindowElems = 32 << 10

// autoA2AWindowElemsSpread replaces autoA2AWindowElems at W ≥ 4 when the
// host has at least W CPUs online: ranks that need not take turns on cores
// pay little for a2a's second publication, and the gather form's W-fold
// reading is what costs. 16-core Xeon host, 2026-12-03, two rounds, µs,
// gather / a2a: W = 8 fp32 4 KiB (1 Ki elements) 7.2–7.9 / 8.5–9.8, 16 KiB
// 18.7–23.1 / 11.2, 64 KiB 65–69 / 25–32; bf16 4 KiB (2 Ki) 7.7–8.2 /
// 9.3–11.4, 16 KiB 34–120 / 11–12; W = 4 fp32 16 KiB 13.1–13.2 / 9.0–154,
// 64 KiB 34–36 / 19 (docs/shm.md). At W = 2 the same host favoured gather
// at 256 KiB and 1 MiB, this 2-core one a2a: W = 2 keeps the one threshold.
const autoA2AWindowElemsSpread = 4 << 10

// autoDoublingMinW is the smallest W at which Auto sends small AllReduce
// and AllGather messages by recursive doubling: at W = 2 it is the same
// single message as gather_tree, at W = 3 two steps against one. W = 4 on
// 2 cores, forced TCP, fp32, 5 interleaved runs, median µs, gather /
// doubling (Open MPI TCP): AllReduce 4 KiB 164 / 110 (108), 16 KiB
// 165 / 125 (236) (docs/benchmarks/tcp-loopback.md, "Recursive doubling").
const autoDoublingMinW = 4

// autoDoublingARBytes is the per-rank AllReduce size from which Auto
// leaves recursive doubling for a2a_tree over messages at W ≥ 4. 16-core
// Xeon host, forced TCP, fp32, 3 rounds, median µs, a2a / doubling: 64 KiB
// W = 4 96 / 77, W = 8 246 / 183, W = 16 552 / 278; 128 KiB W = 4
// 130 / 238, W = 8 340 / 355, W = 16 367 / 557. W = 4 on 2 cores, 64 KiB:
// 341, 283, 397 / 221, 273, 302 (docs/benchmarks/tcp-loopback.md,
// "Recursive doubling").
const autoDoublingARBytes = 128 << 10

// autoHalvingBytes is the per-rank AllReduce size from which Auto leaves
// halving_doubling (from autoDoublingARBytes on, W = 2^k ≥ 4) for a2a_tree
// over messages. 16-core Xeon host, forced TCP, fp32, 3 rounds, median µs,
// a2a / halving: 128 KiB W = 4 129 / 117, W = 8 224 / 175, W = 16
// 437 / 302; 256 KiB 235 / 305, 331 / 402, 647 / 415; 1 MiB 488 / 974,
// 866 / 1216, 1439 / 1929. a2a_tree's W-1 concurrent streams move large
// messages faster than one stream per level (docs/benchmarks/tcp-loopback.md,
// "Halving and doubling").
func autoHalvingBytes(w int) int {
	if w >= 16 {
		return 512 << 10
	}
	return 256 << 10
}

// autoDoublingGatherBytes is the largest AllGather block per rank that Auto
// gathers by recursive doubling over messages. W = 4 on 2 cores, same
// runs, direct / doubling (Open MPI TCP): 4 KiB 141 / 126 (118), 16 KiB
// 197 / 172 (188), 64 KiB 270 / 318 (696).
const autoDoublingGatherBytes = 16 << 10

// autoExposeBytes is the smallest AllGather block per rank that ranks of
// one host which may read each other's memory (a transport.Exposer) copy
// straight out of the peers' send buffers instead of through the shared
// window: one copy per block instead of two. At W = 2 on this project's
// 2-core machine the window's time at 64 KiB moves with where the
// hypervisor runs the two CPUs (4.0 µs in one hour, 13–14 in another),
// the exposed copies' does not (7.0 and 8.8; Open MPI's vader 8.3 and 10);
// at 32 KiB they are even, and from 160 KiB the exposed copies win by 2×.
// On a 16-core host they win from 64 KiB (docs/shm.md, "AllGather from
// exposed buffers").
const autoExposeBytes = 64 << 10

// exposeShardsCPUs: an AllReduce at W = 2 over exposed buffers reduces
// shards (two exposures, half the arithmetic) on a host with at least this
// many CPUs online, and the whole input from the peer's send buffer (one
// exposure, the peer's bytes read where nobody writes them, and recv
// written where nobody reads it) on a smaller one. Interleaved loops, 1 MiB
// per rank, µs, whole / shards / Open MPI's vader: this 2-core machine
// 151–156 / 233–243 / 228–235; the 16-core host 364 / 284 / 323
// (docs/shm.md, "AllReduce from exposed buffers").
const exposeShardsCPUs = 4

// autoDoublingRSBytes is the largest ReduceScatter input per rank (all W
// blocks) that Auto reduces level by level over messages: by halving at
// W = 2^k (the same messages as doubling, fewer bytes), else by recursive
// doubling. Doubling against a2a_tree on the 16-core
// host, same runs, a2a / doubling: 4 KiB W = 4 33 / 32, W = 8 84 / 63,
// W = 16 170 / 66; 16 KiB 38 / 41, 128 / 59, 228 / 142; 64 KiB 49 / 82,
// 105 / 152, 174 / 169.
const autoDoublingRSBytes = 16 << 10

// autoHalvingRSBytes is the largest ReduceScatter input per rank that Auto
// reduces by halving over messages at W = 2^k ≥ 4 (a2a_tree above). It
// sends recursive doubling's messages with a2a_tree's bytes, so it takes
// over doubling's range and goes on while the messages still cost more than
// the bytes. Medians µs, halving / a2a_tree / Open MPI TCP, same runs
// (docs/benchmarks/tcp-loopback.md, "ReduceScatter by halving"): this 2-core
// machine at W = 4, 32 KiB 93 / 89 / 104 (and 94 / 101, 108 / 113), 64 KiB
// 149 / 105 / 123; the 16-core host, 64 KiB, W = 4 58 / 75 / 52, W = 8
// 109 / 131 / 64, W = 16 112 / 250 / 88. The choice must not depend on the
// host (ranks on different hosts would choose differently), so the bound
// sits where the 2-core machine is even, below where it loses.
const autoHalvingRSBytes = 32 << 10

func elemsOf(bytes int, dt DType) int {
	if sz := dt.Size(); sz > 0 {
		return bytes / sz
	}
	return 0
}

// Sentinel errors; test with errors.Is.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrClosed          = errors.New("communicator closed")
	ErrPoisoned        = errors.New("communicator poisoned by an earlier failure")
	ErrMismatch        = agree.ErrMismatch // every rank's error when the ranks' calls differ; see docs/reliability.md

	ErrUnsupported = errors.New("unsupported by this transport")
)

// Error carries the operation, this rank and, when one is to blame, the peer.
type Error struct {
	Op   string
	Rank int
	Peer int // -1 when no single peer
	Err  error
}

func (e *Error) Error() string {
	if e.Peer >= 0 {
		return fmt.Sprintf("detcoll: %s on rank %d (peer %d): %v", e.Op, e.Rank, e.Peer, e.Err)
	}
	return fmt.Sprintf("detcoll: %s on rank %d: %v", e.Op, e.Rank, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Float32Bytes views s as its little-endian bytes without copying.
func Float32Bytes(s []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
}

// Float64Bytes views s as its little-endian bytes without copying.
func Float64Bytes(s []float64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 8*len(s))
}

// Uint16Bytes views s (fp16 or bf16 bit patterns) as bytes without copying.
func Uint16Bytes(s []uint16) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 2*len(s))
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// overlap reports whether a and b share any byte.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := addr(a), addr(b)
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

func same(a, b []byte) bool { return len(a) == len(b) && (len(a) == 0 || addr(a) == addr(b)) }
