package devcomm

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devrt"
)

// ipcSource is appended to gpu.ReduceSource and fastSource: the one-shot,
// two-shot, reduce-scatter and all-gather kernels over peer memory.
//
//go:embed kernels/ipc.cu
var ipcSource string

// Environment variables of the peer-memory (CUDA IPC) path.
const (
	// IPCEnv set to 0 turns the peer-memory path off (NCCL only).
	IPCEnv = "DETCOLL_IPC"
	// IPCBytesEnv sets the staging capacity (bytes of one half; each rank
	// allocates two halves plus IPCHeaderBytes).
	IPCBytesEnv = "DETCOLL_IPC_BYTES"
	// IPCTimeoutEnv bounds every device-side wait for a peer (a Go
	// duration, e.g. 30s).
	IPCTimeoutEnv = "DETCOLL_IPC_TIMEOUT"
	// IPCBlocksEnv caps the blocks of one IPC kernel (1..256).
	IPCBlocksEnv = "DETCOLL_IPC_BLOCKS"
	// IPCBlockBytesEnv is the bytes each block moves, which sets the grid
	// of smaller messages.
	IPCBlockBytesEnv = "DETCOLL_IPC_BLOCK_BYTES"
	// IPCLLBytesEnv overrides AutoLLBytes (0: never LL).
	IPCLLBytesEnv = "DETCOLL_IPC_LL_BYTES"
	// IPCOneShotBytesEnv overrides AutoOneShotBytes.
	IPCOneShotBytesEnv = "DETCOLL_IPC_ONE_SHOT_BYTES"
)

const (
	ipcMaxW = 8   // DC_IPC_MAXW: the largest node the kernels serve
	ipcMaxB = 256 // DC_IPC_MAXB: blocks per launch (flags are per block)
	// IPCHeaderBytes is the control area (flags, sequence counter, error
	// word) before the two halves of every staging allocation.
	IPCHeaderBytes = 32768
	ipcThreads     = 512
	ipcArgBytes    = 160 // sizeof(struct dc_ipc)
	// ipcLLMaxBytes is the largest message (bytes of one rank's input) the
	// LL kernels take; their area of a half is at most a quarter of it.
	ipcLLMaxBytes = 512 << 10
	// minIPCBytes is the smallest capacity accepted.
	minIPCBytes = 64 << 10
)

// DefaultIPCBytes is the default staging capacity (one half): messages
// larger than one half's share run as several kernels, in pieces.
var DefaultIPCBytes = 64 << 20

// DefaultIPCTimeout bounds the device-side waits for peers.
var DefaultIPCTimeout = 30 * time.Second

// Automatic choice with peer memory (measured on two H200s; see
// docs/benchmarks/ and docs/ipc.md). Sizes are bytes of one rank's input.
var (
	// AutoOneShotBytes: AllReduce runs one-shot while (W-1) × the message,
	// the bytes each rank writes to its peers, is at most this, and
	// two-shot above. On two H200s one-shot won up to 4 MiB and two-shot
	// from 16 MiB (docs/ipc.md); for W > 2 the rule is an extrapolation
	// (equal bytes written per rank), not a measurement.
	AutoOneShotBytes = 4 << 20
	// AutoIPCReduceBytes: AllReduce and ReduceScatter above this size use
	// NCCL (a2a_tree) instead of peer memory; 0 means never.
	AutoIPCReduceBytes = 0
	// AutoIPCGatherBytes: AllGather above this size uses ncclAllGather
	// instead of peer memory; 0 means never.
	AutoIPCGatherBytes = 0
)

// ipcDefaultMaxBlocks and ipcDefaultBlockBytes shape the grid (see
// IPCBlocksEnv, IPCBlockBytesEnv).
var (
	ipcDefaultMaxBlocks  = 128
	ipcDefaultBlockBytes = 16 << 10
)

// WithIPC sets the staging capacity of the peer-memory path in bytes (one
// half; default $DETCOLL_IPC_BYTES, else DefaultIPCBytes); 0 turns the path
// off. Every rank must pass the same value.
func WithIPC(capacity int) Option { return func(c *config) { c.ipcBytes = capacity } }

// WithIPCTimeout bounds every device-side wait for a peer (default
// $DETCOLL_IPC_TIMEOUT, else DefaultIPCTimeout).
func WithIPCTimeout(d time.Duration) Option { return func(c *config) { c.ipcTimeout = d } }

// ErrIPCTimeout is the cause (wrapped) when a peer-memory kernel gave up
// waiting for a peer: the peer died, stopped calling, or called a
// different collective.
var ErrIPCTimeout = errors.New("a peer did not arrive within the IPC timeout")

// ErrIPCAborted is the cause (wrapped) when the host aborted the waits of
// peer-memory kernels (Close of a poisoned communicator).
var ErrIPCAborted = errors.New("IPC waits aborted by the host")

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
}

// ipcState is a communicator's peer-memory path: its staging allocation,
// the peers' staging mapped here, the host-mapped error and abort words and
// the kernels for this W.
type ipcState struct {
	geom    ipcGeom
	timeout time.Duration
	own     DevicePtr
	bytes   int
	stage   [ipcMaxW]DevicePtr
	opened  []DevicePtr
	host    devrt.HostMem // u32 [0] error word (device writes), [1] abort word (host writes)
	rt      devrt.Runtime
	mod     devrt.Module
	fns     map[string]devrt.Function
	args    devrt.Args
	argBuf  [ipcArgBytes]byte
	a       ipcArgs
}

// ipcConfig reads the environment into cfg (options override it later).
func ipcConfig(cfg *config) error {
	cfg.ipcBytes = DefaultIPCBytes
	cfg.ipcTimeout = DefaultIPCTimeout
	if v := os.Getenv(IPCEnv); v == "0" || strings.EqualFold(v, "off") || strings.EqualFold(v, "false") {
		cfg.ipcBytes = 0
	}
	if v := os.Getenv(IPCBytesEnv); v != "" && cfg.ipcBytes != 0 {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%s=%q is not a byte count", IPCBytesEnv, v)
		}
		cfg.ipcBytes = n
	}
	if v := os.Getenv(IPCTimeoutEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%s=%q is not a positive duration", IPCTimeoutEnv, v)
		}
		cfg.ipcTimeout = d
	}
	return nil
}

func envInt(name string, def, lo, hi int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s=%q: want an integer in [%d, %d]", name, v, lo, hi)
	}
	return n, nil
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

// setupIPC builds the peer-memory path when every rank is on one host,
// every pair of GPUs has peer access and every rank could allocate and
// export its staging buffer; otherwise it leaves c.ipc nil on every rank
// (the NCCL path, same bits) and says why in c.ipcWhy. Collective: every
// rank calls it at the same point of New.
func (c *Comm) setupIPC(ctx context.Context) error {
	w := c.size
	switch {
	case c.cfg.ipcBytes == 0:
		c.ipcWhy = "turned off (" + IPCEnv + "=0 or WithIPC(0))"
		return nil
	case w < 2:
		c.ipcWhy = "one rank"
		return nil
	case w > ipcMaxW:
		c.ipcWhy = fmt.Sprintf("%d ranks: the IPC kernels serve at most %d", w, ipcMaxW)
		return nil
	}
	if c.cfg.ipcBytes < minIPCBytes {
		return fmt.Errorf("devcomm: New: %w: IPC capacity %d bytes is below the minimum %d", detcoll.ErrInvalidArgument, c.cfg.ipcBytes, minIPCBytes)
	}
	maxB, err := envInt(IPCBlocksEnv, ipcDefaultMaxBlocks, 1, ipcMaxB)
	if err != nil {
		return fmt.Errorf("devcomm: New: %w: %v", detcoll.ErrInvalidArgument, err)
	}
	blockBytes, err := envInt(IPCBlockBytesEnv, ipcDefaultBlockBytes, 1024, 1<<30)
	if err != nil {
		return fmt.Errorf("devcomm: New: %w: %v", detcoll.ErrInvalidArgument, err)
	}
	llBytes, err := envInt(IPCLLBytesEnv, AutoLLBytes, 0, 1<<30)
	if err != nil {
		return fmt.Errorf("devcomm: New: %w: %v", detcoll.ErrInvalidArgument, err)
	}
	oneShot, err := envInt(IPCOneShotBytesEnv, AutoOneShotBytes, 0, 1<<40)
	if err != nil {
		return fmt.Errorf("devcomm: New: %w: %v", detcoll.ErrInvalidArgument, err)
	}
	st := &ipcState{rt: c.rt, args: c.rt.NewArgs(), geom: ipcGeom{w: w, capacity: c.cfg.ipcBytes &^ 255, maxBlocks: maxB, blockBytes: blockBytes,
		llBytes: llBytes, oneShot: oneShot}, timeout: c.cfg.ipcTimeout}

	// Round 1: allocate, export, publish host, GPU and handle.
	mine := make([]byte, ipcRecordBytes)
	lerr := c.dev.Do(func() error { return st.allocate() })
	if lerr == nil {
		var h devrt.IpcHandle
		if h, lerr = c.rt.IpcGetMemHandle(st.own); lerr == nil {
			mine[0] = 1
			host, _ := os.Hostname()
			copy(mine[1:65], host)
			if u, err := c.dev.UUID(); err == nil {
				copy(mine[65:81], u[:])
			}
			copy(mine[81:145], h[:])
			binary.LittleEndian.PutUint64(mine[145:], uint64(os.Getpid()))
			st.geom.encode(mine[153:])
		}
	}
	all := make([]byte, ipcRecordBytes*w)
	if err := c.host.AllGather(ctx, mine, all, dtype.Byte); err != nil {
		c.dev.Do(func() error { st.free(); return nil })
		return fmt.Errorf("devcomm: New: exchanging IPC handles: %w", err)
	}
	rec := func(p int) []byte { return all[p*ipcRecordBytes : (p+1)*ipcRecordBytes] }
	why, err := ipcDecide(all)
	if err != nil {
		c.dev.Do(func() error { st.free(); return nil })
		return fmt.Errorf("devcomm: New: %w", err)
	}
	if lerr != nil {
		why = fmt.Sprintf("rank %d could not allocate or export its staging buffer: %v", c.rank, lerr)
	}
	// Round 2: every peer's GPU visible here with peer access, and its
	// staging mapped.
	ok := byte(0)
	if why == "" {
		ok = 1
		lerr = c.dev.Do(func() error { return st.open(c, rec) })
		if lerr != nil {
			ok = 0
		}
	}
	oks := make([]byte, w)
	if err := c.host.AllGather(ctx, []byte{ok}, oks, dtype.Byte); err != nil {
		c.dev.Do(func() error { st.free(); return nil })
		return fmt.Errorf("devcomm: New: agreeing on IPC: %w", err)
	}
	for p := 0; p < w && why == ""; p++ {
		if oks[p] == 0 {
			why = fmt.Sprintf("rank %d cannot map every peer's memory", p)
			if p == c.rank && lerr != nil {
				why += ": " + lerr.Error()
			}
		}
	}
	if why != "" {
		c.dev.Do(func() error { st.free(); return nil })
		c.ipcWhy = why
		return nil
	}
	c.ipc = st
	c.ipcWhy = ""
	return nil
}

// allocate makes the staging buffer (zeroed), the host words and the
// kernels. Runs inside dev.Do.
func (st *ipcState) allocate() error {
	st.bytes = IPCHeaderBytes + 2*st.geom.capacity
	p, err := st.rt.MemAlloc(st.bytes)
	if err != nil {
		return err
	}
	st.own = p
	if err := st.rt.MemsetD8(p, 0, st.bytes); err != nil {
		return err
	}
	if st.host, err = st.rt.HostAlloc(64); err != nil {
		return err
	}
	clear(st.host.Bytes)
	return nil
}

// open finds every peer's GPU, checks peer access, maps its staging buffer
// and compiles the kernels. Runs inside dev.Do.
func (st *ipcState) open(c *Comm, rec func(p int) []byte) error {
	n, err := c.rt.DeviceCount()
	if err != nil {
		return err
	}
	for p := 0; p < c.size; p++ {
		if p == c.rank {
			st.stage[p] = st.own
			continue
		}
		var uuid [16]byte
		copy(uuid[:], rec(p)[65:81])
		found := false
		for i := 0; i < n && !found; i++ {
			if u, err := c.rt.DeviceUUID(i); err == nil && u == uuid {
				found = true
				if ok, err := c.dev.Context().CanAccessPeer(i); err != nil || !ok {
					return fmt.Errorf("GPU %d has no peer access to rank %d's GPU %d (%v)", c.dev.Ordinal(), p, i, err)
				}
			}
		}
		if !found {
			return fmt.Errorf("rank %d's GPU is not visible to rank %d (CUDA_VISIBLE_DEVICES?)", p, c.rank)
		}
		var h devrt.IpcHandle
		copy(h[:], rec(p)[81:145])
		ptr, err := c.rt.IpcOpenMemHandle(h)
		if err != nil {
			return fmt.Errorf("opening rank %d's staging buffer: %w", p, err)
		}
		st.stage[p] = ptr
		st.opened = append(st.opened, ptr)
	}
	prog, err := c.rt.Build(ipcProgram(c.size), "detcoll_ipc.cu", c.dev.Props())
	if err != nil {
		return fmt.Errorf("compiling the IPC kernels: %w", err)
	}
	m, err := c.rt.ModuleLoad(prog.Image)
	if err != nil {
		c.rt.Invalidate(prog.Key)
		return fmt.Errorf("loading the IPC kernels: %w", err)
	}
	st.mod = m
	st.fns = map[string]devrt.Function{}
	for _, name := range ipcKernelNames() {
		fn, err := c.rt.ModuleFunction(m, name)
		if err != nil {
			return err
		}
		st.fns[name] = fn
	}
	st.a = ipcArgs{stage: st.stage, capacity: int64(st.geom.capacity), timeoutNS: int64(st.timeout),
		herr: st.hostPtr(0), habort: st.hostPtr(4), rank: int32(c.rank), w: int32(c.size)}
	return nil
}

func (st *ipcState) hostPtr(off int) DevicePtr {
	return DevicePtr(uintptr(unsafe.Pointer(&st.host.Bytes[off])))
}

func (st *ipcState) word(off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&st.host.Bytes[off]))
}

// failed is the error a kernel recorded, or nil.
func (st *ipcState) failed() error {
	if st == nil || st.host.Len() == 0 {
		return nil
	}
	switch atomic.LoadUint32(st.word(0)) {
	case 0:
		return nil
	case 2:
		return ErrIPCAborted
	case 1:
		return fmt.Errorf("%w (%v)", ErrIPCTimeout, st.timeout)
	default:
		return fmt.Errorf("IPC kernel error %d", atomic.LoadUint32(st.word(0)))
	}
}

// abort makes every waiting kernel of this rank give up.
func (st *ipcState) abort() {
	if st != nil && st.host.Len() > 0 {
		atomic.StoreUint32(st.word(4), 1)
	}
}

// free releases what allocate and open made. Runs inside dev.Do.
func (st *ipcState) free() error {
	var errs []error
	if st.mod != 0 {
		errs = append(errs, st.rt.ModuleUnload(st.mod))
		st.mod = 0
	}
	for _, p := range st.opened {
		errs = append(errs, st.rt.IpcCloseMemHandle(p))
	}
	st.opened = nil
	if st.own != 0 {
		errs = append(errs, st.rt.MemFree(st.own))
		st.own = 0
	}
	if st.host.Len() > 0 {
		errs = append(errs, st.rt.HostFree(st.host))
		st.host = devrt.HostMem{}
	}
	return errors.Join(errs...)
}

// launch enqueues one kernel. Called inside c.dev.Do with c.mu held.
func (st *ipcState) launch(s Stream, name string, grid int) error {
	fn, ok := st.fns[name]
	if !ok {
		return fmt.Errorf("no IPC kernel %s", name)
	}
	st.a.encode(st.argBuf[:])
	st.args.Reset()
	st.args.Raw(st.argBuf[:], 8)
	return st.rt.Launch(fn, devrt.Dim3{X: uint32(grid), Y: 1, Z: 1}, devrt.Dim3{X: ipcThreads, Y: 1, Z: 1}, 0, s, st.args)
}

// AutoLLBytes: one-shot AllReduce, ReduceScatter and AllGather messages
// up to this size (bytes of one rank's input, and within the LL area) use
// the LL kernels.
var AutoLLBytes = 256 << 10

// ipcRun enqueues op over total elements of esz bytes (AG: bytes, esz 1)
// in pieces; inStride and outStride are the RS input and AG output block
// strides in bytes. Called inside c.dev.Do with c.mu held.
func (c *Comm) ipcRun(s Stream, op ipcOp, dt dtype.DType, acc detcoll.Accumulate, send, recv DevicePtr, total, esz, inStride, outStride int) error {
	st := c.ipc
	name := ipcKernelName(op, dt, acc)
	for i, k := 0, st.geom.pieces(op, esz, total); i < k; i++ {
		p := st.geom.piece(op, esz, total, i)
		st.a.in, st.a.out = send.Add(p.off*esz), recv.Add(p.off*esz)
		st.a.count, st.a.slot, st.a.base = int64(p.count), int64(p.slot), int64(p.base)
		st.a.inStride, st.a.outStride = int64(inStride), int64(outStride)
		if err := st.launch(s, name, p.grid); err != nil {
			return err
		}
	}
	return nil
}

// useLL reports whether a message of n bytes per rank goes through the LL
// kernels.
func (c *Comm) useLL(n int) bool { return n <= c.ipc.geom.llBytes && n <= c.ipc.geom.llMax() }

// allReduceIPC enqueues a one-shot (LL for small messages) or a two-shot
// AllReduce.
func (c *Comm) allReduceIPC(s Stream, send, recv DevicePtr, count int, dt dtype.DType, acc detcoll.Accumulate, two bool) error {
	op := ipcAR1
	switch {
	case two:
		op = ipcAR2
	case c.useLL(count * dt.Size()):
		op = ipcAR1LL
	}
	return c.ipcRun(s, op, dt, acc, send, recv, count, dt.Size(), 0, 0)
}

// reduceScatterIPC enqueues the ReduceScatter of one lane: m elements per
// block.
func (c *Comm) reduceScatterIPC(s Stream, send, recv DevicePtr, m int, dt dtype.DType, acc detcoll.Accumulate) error {
	op := ipcRS
	if c.useLL(m * dt.Size()) {
		op = ipcRSLL
	}
	return c.ipcRun(s, op, dt, acc, send, recv, m, dt.Size(), m*dt.Size(), 0)
}

// allGatherIPC enqueues the AllGather of one lane: n bytes per rank.
func (c *Comm) allGatherIPC(s Stream, send, recv DevicePtr, n int) error {
	op := ipcAG
	if c.useLL(n) {
		op = ipcAGLL
	}
	return c.ipcRun(s, op, 0, 0, send, recv, n, 1, 0, n)
}

// IPC reports whether the peer-memory path is on and, when it is not, why.
func (c *Comm) IPC() (on bool, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ipc != nil, c.ipcWhy
}

// IPCStagingBytes is the device memory of this rank's staging buffer (two
// halves of the capacity plus IPCHeaderBytes), 0 when the path is off.
func (c *Comm) IPCStagingBytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ipc == nil {
		return 0
	}
	return c.ipc.bytes
}

// closeIPC is the close handshake: this rank's stream work has finished
// (Close synchronised it), so once every rank has reached the barrier no
// kernel of any rank can still write into any staging buffer, and each
// rank unmaps its peers and frees its own. A poisoned communicator first
// aborts its own waiting kernels. Called with c.mu held.
func (c *Comm) closeIPC() error {
	st := c.ipc
	if st == nil {
		return nil
	}
	c.ipc = nil
	if c.poison != nil {
		st.abort()
		_ = c.dev.Synchronize(c.stream)
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.timeout)
	berr := c.host.Barrier(ctx)
	cancel()
	ferr := c.dev.Do(func() error { return st.free() })
	if berr != nil && c.poison == nil {
		return fmt.Errorf("devcomm: Close: the IPC close handshake failed (freed anyway): %w", berr)
	}
	return ferr
}

// ipcCheck returns the error a kernel recorded as a poisoning error.
// Called with c.mu held.
func (c *Comm) ipcCheck(op string) error {
	if err := c.ipc.failed(); err != nil {
		return c.fail(op, err)
	}
	return nil
}
