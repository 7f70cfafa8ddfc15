package devcomm

import (
	"fmt"

	"github.com/detcoll/detcoll"
)

// The automatic choice of algorithm: a pure function of the operation, the
// message size, W, the topology (peer memory or not) and the thresholds,
// which are a value of the communicator (Thresholds, WithThresholds)
// defaulted from the measured tables below. No choice changes a bit.

// The measured defaults (two H200s; docs/benchmarks/cuda-h200x2-2026-11-29.md
// and docs/ipc.md). Sizes are bytes of one rank's input.
const (
	// AutoA2ABytes: W > 2, AllReduce uses a2a_tree from this size.
	AutoA2ABytes = 1 << 20
	// AutoA2ABytesTwoRanks: W = 2, where both algorithms receive the same
	// bytes: gather_tree needs one NCCL operation instead of two and wins
	// below it, a2a_tree reduces half as much and wins above.
	AutoA2ABytesTwoRanks = 64 << 20
	// AutoP2PBytes: GatherAuto uses send/receive pairs from this gather
	// size per rank (they moved large blocks faster than ncclAllGather).
	AutoP2PBytes = 4 << 20
	// AutoOneShotBytes: AllReduce runs one-shot while (W-1) × the message,
	// the bytes each rank writes to its peers, is at most this, and
	// two-shot above. On two H200s one-shot won up to 4 MiB and two-shot
	// from 16 MiB; for W > 2 the rule is an extrapolation (equal bytes
	// written per rank), not a measurement.
	AutoOneShotBytes = 4 << 20
	// AutoLLBytes: one-shot AllReduce, ReduceScatter and AllGather messages
	// up to this size (and within the LL area) use the LL kernels.
	AutoLLBytes = 256 << 10
	// ipcDefaultMaxBlocks and ipcDefaultBlockBytes shape the grid.
	ipcDefaultMaxBlocks  = 128
	ipcDefaultBlockBytes = 16 << 10
)

// Thresholds set the automatic choice of algorithm and the grid of the
// peer-memory kernels. They are part of the configuration every rank must
// share (the grid and slots of every launch follow from them).
type Thresholds struct {
	// A2ABytes: W > 2, Auto AllReduce uses a2a_tree from this size (bytes
	// of one rank's input), gather_tree below.
	A2ABytes int
	// A2ABytesTwoRanks is A2ABytes for W = 2.
	A2ABytesTwoRanks int
	// P2PBytes: GatherAuto gathers with send/receive pairs from this size
	// per rank, ncclAllGather below.
	P2PBytes int
	// OneShotBytes: with peer memory, Auto AllReduce is one-shot while
	// (W-1) × the message is at most this, two-shot above.
	OneShotBytes int
	// IPCReduceBytes: Auto AllReduce and ReduceScatter above this size use
	// NCCL instead of peer memory; 0 means never.
	IPCReduceBytes int
	// IPCGatherBytes: Auto AllGather above this size uses ncclAllGather
	// instead of peer memory; 0 means never.
	IPCGatherBytes int
	// LLBytes: peer-memory messages up to this size use the LL kernels.
	LLBytes int
	// IPCMaxBlocks caps the blocks of one peer-memory kernel (1..256).
	IPCMaxBlocks int
	// IPCBlockBytes is the bytes each block of a peer-memory kernel moves
	// (at least 1024), which sets the grid of smaller messages.
	IPCBlockBytes int
	// ListInputs is the most inputs reduced through the pointer-list
	// kernel (the own input read in place); above it the own block is
	// copied into the workspace and the strided kernel runs. 0 means
	// gpu.MaxListInputs; a smaller value exercises the strided path.
	ListInputs int
}

// DefaultThresholds are the measured defaults (see the constants above).
func DefaultThresholds() Thresholds {
	return Thresholds{A2ABytes: AutoA2ABytes, A2ABytesTwoRanks: AutoA2ABytesTwoRanks, P2PBytes: AutoP2PBytes,
		OneShotBytes: AutoOneShotBytes, LLBytes: AutoLLBytes, IPCMaxBlocks: ipcDefaultMaxBlocks, IPCBlockBytes: ipcDefaultBlockBytes}
}

func (t Thresholds) check() error {
	switch {
	case t.A2ABytes < 0 || t.A2ABytesTwoRanks < 0 || t.P2PBytes < 0 || t.OneShotBytes < 0 || t.IPCReduceBytes < 0 ||
		t.IPCGatherBytes < 0 || t.LLBytes < 0 || t.ListInputs < 0:
		return fmt.Errorf("negative threshold in %+v", t)
	case t.IPCMaxBlocks < 1 || t.IPCMaxBlocks > ipcMaxB:
		return fmt.Errorf("IPCMaxBlocks %d: want 1..%d", t.IPCMaxBlocks, ipcMaxB)
	case t.IPCBlockBytes < 1024:
		return fmt.Errorf("IPCBlockBytes %d: want at least 1024", t.IPCBlockBytes)
	}
	return nil
}

// collOp is a collective operation (also the op byte of a signature).
type collOp uint8

const (
	opAllReduce collOp = iota + 1
	opAllGather
	opReduceScatter
	opAllGatherMany
	opReduceScatterMany
)

var opNames = []string{"?", "AllReduce", "AllGather", "ReduceScatter", "AllGatherMany", "ReduceScatterMany"}

func (o collOp) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "?"
}

func (o collOp) gathers() bool { return o == opAllGather || o == opAllGatherMany }

// choose is the algorithm a call runs: asked (the call's or the
// communicator's default; Auto lets the thresholds decide) for op over
// bytes (AllReduce: one rank's input; the all-gathers: every lane's input;
// the reduce-scatters: every lane's whole input) on w ranks, ipc telling
// whether the peer-memory path is on.
//
// The all-gathers return OneShot for peer memory and GatherTree for NCCL.
// The reduce-scatters' Auto is a2a_tree, which receives only this rank's
// block of every input in one NCCL group while gather_tree receives every
// whole input (measured on two H200s as fast or faster at every size,
// 16 MiB: 63 µs against 92 µs). Without peer memory one_shot and two_shot
// run as their NCCL twins (Algorithm.Transport), which move the same bytes.
// recursive_doubling runs as gather_tree, a reduce-scatter's as a2a_tree
// (the same bits). An unknown
// algorithm is returned as asked (the argument checks reject it).
func choose(op collOp, asked detcoll.Algorithm, bytes, w int, ipc bool, t Thresholds) detcoll.Algorithm {
	if asked == detcoll.HalvingDoubling {
		asked = detcoll.A2ATree // its twin: the same bytes, no host messages
	}
	if asked == detcoll.RecursiveDoubling {
		// Its steps are host messages; a device AllReduce is one NCCL
		// all-gather or one peer-memory kernel, which gather_tree is. A
		// reduce-scatter runs it as a2a_tree, as on the host.
		asked = detcoll.GatherTree
		if op == opReduceScatter || op == opReduceScatterMany {
			asked = detcoll.A2ATree
		}
	}
	auto := asked == detcoll.Auto
	switch op {
	case opAllGather, opAllGatherMany:
		useIPC := ipc && (asked == detcoll.OneShot || asked == detcoll.TwoShot)
		if auto {
			useIPC = ipc && (t.IPCGatherBytes == 0 || bytes <= t.IPCGatherBytes)
		}
		if useIPC {
			return detcoll.OneShot
		}
		return detcoll.GatherTree
	case opReduceScatter, opReduceScatterMany:
		switch {
		case auto && ipc && (t.IPCReduceBytes == 0 || bytes <= t.IPCReduceBytes):
			return detcoll.TwoShot // the one peer-memory reduce-scatter
		case auto:
			return detcoll.A2ATree
		case !ipc:
			return asked.Transport()
		case asked == detcoll.OneShot:
			return detcoll.TwoShot
		}
		return asked
	}
	alg := asked
	if auto {
		alg = chooseAllReduce(bytes, w, ipc, t)
	}
	if !ipc {
		alg = alg.Transport()
	}
	return alg
}

// chooseAllReduce is Auto for AllReduce.
func chooseAllReduce(bytes, w int, ipc bool, t Thresholds) detcoll.Algorithm {
	switch {
	case ipc && bytes*(w-1) <= t.OneShotBytes:
		return detcoll.OneShot
	case ipc && (t.IPCReduceBytes == 0 || bytes <= t.IPCReduceBytes):
		return detcoll.TwoShot
	case (w > 2 && bytes >= t.A2ABytes) || (w == 2 && bytes >= t.A2ABytesTwoRanks):
		return detcoll.A2ATree
	}
	return detcoll.GatherTree
}

// p2pFor reports whether a gather of n bytes per rank uses send/receive
// pairs rather than ncclAllGather.
func (cfg *config) p2pFor(n int) bool {
	return cfg.gather == GatherP2P || (cfg.gather == GatherAuto && n >= cfg.th.P2PBytes)
}
