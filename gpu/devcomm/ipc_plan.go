package devcomm

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
)

// The peer-memory (CUDA IPC) path's plan: what every launch of a
// collective looks like (pieces, slots, grid), the kernels' names and
// argument layout, and the set-up decision from every rank's record. Pure
// functions of the geometry, tested on the host (TestIPCPlan, TestIPCDecide);
// the protocol itself is in kernels/ipc.cu and docs/ipc.md.

// ipcProtoSource (the protocol: layout, flags, signature lines, bounded
// waits) and ipcKernelSource (data movement and the kernels) make
// ipcSource, which is appended to gpu.ReduceSource and fastSource: the
// one-shot, two-shot, reduce-scatter and all-gather kernels over peer
// memory.
var (
	//go:embed kernels/ipc_proto.cu
	ipcProtoSource string
	//go:embed kernels/ipc.cu
	ipcKernelSource string
	ipcSource       = ipcProtoSource + "\n" + ipcKernelSource
)

const (
	ipcMaxW = 8   // DC_IPC_MAXW: the largest node the kernels serve
	ipcMaxB = 256 // DC_IPC_MAXB: blocks per launch (flags are per block)
	// IPCHeaderBytes is the control area (flags, sequence counter, error
	// word) before the two halves of every staging allocation.
	IPCHeaderBytes = 32768
	ipcThreads     = 512
	ipcArgBytes    = 168 // sizeof(struct dc_ipc)
	// ipcLLMaxBytes is the largest message (bytes of one rank's input) the
	// LL kernels take; their area of a half is at most a quarter of it.
	ipcLLMaxBytes = 512 << 10
	// minIPCBytes is the smallest capacity accepted.
	minIPCBytes = 64 << 10
)

// ErrIPCTimeout is the cause (wrapped) when a peer-memory kernel gave up
// waiting for a peer: the peer died, stopped calling, or called a
// different collective.
var ErrIPCTimeout = errors.New("a peer did not arrive within the IPC timeout")

// ErrIPCAborted is the cause (wrapped) when the host aborted the waits of
// peer-memory kernels (Close of a poisoned communicator).
var ErrIPCAborted = errors.New("IPC waits aborted by the host")

// ErrIPCMismatch is the cause (the Cause of an *agree.MismatchError,
// which matches detcoll.ErrMismatch) when a peer-memory kernel met a peer
// running another call at the same point of the sequence: the call number
// or the signature hash in the peer's flags differs, so the ranks called
// collectives in different orders, or one made a call the other did not.
var ErrIPCMismatch = errors.New("a peer ran another call at this point (its call number or signature hash in the IPC flags differs)")

type ipcOp uint8

const (
	ipcAR1   ipcOp = iota // one-shot AllReduce
	ipcAR2                // two-shot AllReduce
	ipcRS                 // ReduceScatter
	ipcAG                 // AllGather
	ipcAR1LL              // one-shot AllReduce, LL lines
	ipcRSLL               // ReduceScatter, LL lines
	ipcAGLL               // AllGather, LL lines
)

func (o ipcOp) String() string {
	return [...]string{"one_shot", "two_shot", "reduce_scatter", "all_gather", "one_shot_ll", "reduce_scatter_ll", "all_gather_ll"}[o]
}

func (o ipcOp) ll() bool { return o >= ipcAR1LL }

// ipcGeom is the capacity and grid shape, the same on every rank.
type ipcGeom struct {
	w          int
	capacity   int // bytes of one half
	maxBlocks  int
	blockBytes int
	llBytes    int // the LL kernels up to this message size (and llMax)
	oneShot    int // Auto AllReduce: one-shot up to this size
}

// ipcPiece is one kernel launch of a collective.
type ipcPiece struct {
	off   int // element offset (AG: byte offset) of the piece
	count int // the kernel's count: elements (AG: bytes)
	slot  int // bytes of one staging slot
	base  int // offset of slot 0 in a half
	grid  int
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// llSlot is the bytes of one LL slot; the LL area of a half is the last
// (W-1) slots.
func (g ipcGeom) llSlot() int {
	return min(g.capacity/4/(g.w-1)&^255, 2*ipcLLMaxBytes)
}

// llBase is the offset of the LL area in a half.
func (g ipcGeom) llBase() int { return g.capacity - (g.w-1)*g.llSlot() }

// llMax is the largest message (bytes per rank) of one LL launch.
func (g ipcGeom) llMax() int { return g.llSlot() / 2 &^ 7 }

// pieceMax is the most elements (AG: bytes) one launch of op can take.
func (g ipcGeom) pieceMax(op ipcOp, sz int) int {
	main := g.llBase()
	switch op {
	case ipcAR2:
		slot := main / (2 * (g.w - 1)) &^ 255
		return slot / 16 * g.w * (16 / sz)
	case ipcAG:
		return main / (g.w - 1) &^ 255
	case ipcAR1LL, ipcRSLL, ipcAGLL:
		return g.llMax() / sz
	}
	return (main / (g.w - 1) &^ 255) / sz
}

// pieces is the number of launches of op over total elements (AG: bytes).
func (g ipcGeom) pieces(op ipcOp, sz, total int) int {
	if total == 0 {
		return 0
	}
	m := g.pieceMax(op, sz)
	return (total + m - 1) / m
}

// piece is launch i of op over total elements (AG: bytes).
func (g ipcGeom) piece(op ipcOp, sz, total, i int) ipcPiece {
	m := g.pieceMax(op, sz)
	p := ipcPiece{off: i * m, count: min(m, total-i*m)}
	var moved int // bytes this rank writes to its peers
	switch op {
	case ipcAR1:
		p.slot = roundUp(p.count*sz, 256)
		moved = p.count * sz * (g.w - 1)
	case ipcAR2:
		nv := 16 / sz
		vecs := (p.count + nv - 1) / nv
		p.slot = roundUp((vecs+g.w-1)/g.w*16, 256)
		moved = 2 * p.count * sz * (g.w - 1) / g.w
	case ipcRS:
		p.slot = roundUp(p.count*sz, 256)
		moved = p.count * sz * (g.w - 1)
	case ipcAG:
		p.slot = roundUp(p.count, 256)
		moved = p.count * (g.w - 1)
	case ipcAR1LL, ipcRSLL, ipcAGLL:
		p.slot = g.llSlot()
		p.base = g.llBase()
		moved = 2 * p.count * sz * (g.w - 1)
	}
	p.grid = max(1, min(g.maxBlocks, (moved+g.blockBytes-1)/g.blockBytes))
	if op.ll() {
		// Latency first: one 8-byte chunk per thread, up to every flag slot.
		chunks := (p.count*sz + 7) / 8
		p.grid = max(1, min(ipcMaxB, (chunks+ipcThreads-1)/ipcThreads))
	}
	return p
}

// ipcKernelName is the kernel of op for dt and acc.
func ipcKernelName(op ipcOp, dt dtype.DType, acc detcoll.Accumulate) string {
	switch op {
	case ipcAG:
		return "detcoll_ipc_ag"
	case ipcAGLL:
		return "detcoll_ipc_agll"
	}
	v := dt.String()
	if dt == dtype.BF16 || dt == dtype.FP16 {
		v += "_" + acc.String()
	}
	// The one-shot AllReduce is the ReduceScatter kernel with an input
	// stride of 0 (every peer gets the whole input).
	return fmt.Sprintf("detcoll_ipc_%s_%s", [...]string{"rs", "ar2", "rs", "", "rsll", "rsll"}[op], v)
}

func ipcKernelNames() []string {
	names := []string{ipcKernelName(ipcAG, 0, 0), ipcKernelName(ipcAGLL, 0, 0)}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32, dtype.FP64} {
		accs := []detcoll.Accumulate{detcoll.AccumulateNative}
		if dt.Size() == 2 {
			accs = append(accs, detcoll.AccumulateF32)
		}
		for _, acc := range accs {
			for _, op := range []ipcOp{ipcAR2, ipcRS, ipcRSLL} {
				names = append(names, ipcKernelName(op, dt, acc))
			}
		}
	}
	return names
}

// ipcProgram is the whole kernel source for world size w.
func ipcProgram(w int) string {
	return fmt.Sprintf("#define DC_IPC_W %d\n", w) + gpu.ReduceSource + "\n" + fastSource + "\n" + ipcSource
}

// ipcArgs lays out struct dc_ipc.
type ipcArgs struct {
	stage                [ipcMaxW]DevicePtr
	in, out              DevicePtr
	count                int64
	inStride, outStride  int64
	capacity, slot, base int64
	timeoutNS            int64
	herr, habort         DevicePtr
	rank, w              int32
	sig                  uint32 // agree.Fold32 of the call's signature hash
	call                 uint32 // the low 32 bits of the call's number (agree.Call.Seq)
}

func (a *ipcArgs) encode(b []byte) {
	le := binary.LittleEndian
	for i, p := range a.stage {
		le.PutUint64(b[8*i:], uint64(p))
	}
	o := 8 * ipcMaxW
	for _, v := range []uint64{uint64(a.in), uint64(a.out), uint64(a.count), uint64(a.inStride), uint64(a.outStride),
		uint64(a.capacity), uint64(a.slot), uint64(a.base), uint64(a.timeoutNS), uint64(a.herr), uint64(a.habort)} {
		le.PutUint64(b[o:], v)
		o += 8
	}
	le.PutUint32(b[o:], uint32(a.rank))
	le.PutUint32(b[o+4:], uint32(a.w))
	le.PutUint32(b[o+8:], a.sig)
	le.PutUint32(b[o+12:], a.call)
}

// ipcRecord is what every rank publishes at set-up.
const ipcRecordBytes = 1 + 64 + 16 + 64 + 8 + 5*8

// ipcDecide reads every rank's set-up record (rank order) and says why the
// peer-memory path cannot be used ("" when it can, as far as the records
// tell: peer access is checked next), or returns an error when the ranks'
// configurations disagree (the grid and slots of every launch follow from
// it, so they must be equal). Every rank reaches the same answer.
func ipcDecide(all []byte) (why string, err error) {
	w := len(all) / ipcRecordBytes
	rec := func(p int) []byte { return all[p*ipcRecordBytes : (p+1)*ipcRecordBytes] }
	for p := 0; p < w; p++ {
		if rec(p)[0] == 0 {
			return fmt.Sprintf("rank %d could not allocate or export its staging buffer", p), nil
		}
	}
	first := rec(0)
	for p := 1; p < w; p++ {
		r := rec(p)
		if string(r[153:]) != string(first[153:]) {
			return "", fmt.Errorf("%w: rank %d has another IPC configuration than rank 0 (capacity, %s, %s, %s, %s must agree)",
				detcoll.ErrInvalidArgument, p, IPCBlocksEnv, IPCBlockBytesEnv, IPCLLBytesEnv, IPCOneShotBytesEnv)
		}
		if string(r[1:65]) != string(first[1:65]) {
			return fmt.Sprintf("ranks on more than one host (rank 0 on %q, rank %d on %q)",
				strings.TrimRight(string(first[1:65]), "\x00"), p, strings.TrimRight(string(r[1:65]), "\x00")), nil
		}
		for q := 0; q < p; q++ {
			if binary.LittleEndian.Uint64(r[145:]) == binary.LittleEndian.Uint64(rec(q)[145:]) {
				return fmt.Sprintf("ranks %d and %d share a process (CUDA IPC needs one process per GPU)", q, p), nil
			}
		}
	}
	return "", nil
}

// encode writes the geometry, which every rank must share (the grid and
// the slots of every launch follow from it).
func (g ipcGeom) encode(b []byte) {
	for i, v := range []int{g.capacity, g.maxBlocks, g.blockBytes, g.llBytes, g.oneShot} {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
}
