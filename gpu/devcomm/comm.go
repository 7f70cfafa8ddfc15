package devcomm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/internal/ccl"
)

// DevicePtr is a device address (a CUdeviceptr or hipDeviceptr_t;
// cuda.DevicePtr and hip.DevicePtr are this type).
type DevicePtr = devrt.Ptr

// Stream is a stream handle of the communicator's runtime (a CUstream or
// cudaStream_t; a hipStream_t on ROCm); 0 is the legacy default stream.
type Stream = devrt.Stream

// Buffer is device memory lent to a collective: its address and the number
// of bytes the caller vouches for. Calls check their counts against Bytes.
type Buffer struct {
	Ptr   DevicePtr
	Bytes int
}

// Slice is the part [off, off+n) of b (no bounds check beyond b's own:
// an out-of-range slice is caught by the collective that uses it).
func (b Buffer) Slice(off, n int) Buffer { return Buffer{Ptr: b.Ptr.Add(off), Bytes: n} }

// ErrCaptureGrowth is returned (wrapped) when a collective issued on a
// capturing stream would have to grow the workspace: run it once outside
// the capture, or call Reserve, first. Nothing is enqueued and the capture
// stays valid.
var ErrCaptureGrowth = errors.New("the workspace would have to grow during a CUDA graph capture")

// AutoA2ABytes is the per-rank message size (bytes of one rank's input)
// from which Auto uses a2a_tree instead of gather_tree when W > 2.
var AutoA2ABytes = 1 << 20

// AutoA2ABytesTwoRanks is the same threshold for W = 2, where both
// algorithms receive the same bytes: gather_tree needs one NCCL operation
// instead of two and wins below it, a2a_tree reduces half as much and wins
// above (measured on two H200s, docs/benchmarks/cuda-h200x2-2026-11-29.md).
var AutoA2ABytesTwoRanks = 64 << 20

// Gather selects how the gathers inside the reductions move data. Every
// choice gives identical bits; it is part of the call signature, so all
// ranks must use the same one.
type Gather uint8

const (
	// GatherAuto uses grouped ncclSend/ncclRecv from AutoP2PBytes per rank
	// and ncclAllGather below (the default). AllGather itself always uses
	// ncclAllGather.
	GatherAuto Gather = iota
	// GatherAllGather always uses ncclAllGather.
	GatherAllGather
	// GatherP2P always uses one group of ncclSend/ncclRecv pairs (AllGather
	// too, after copying the own block).
	GatherP2P
)

// AutoP2PBytes is the per-rank gather size from which GatherAuto uses
// send/receive pairs: on two NVLink-connected H200s they moved large blocks
// faster than ncclAllGather (docs/benchmarks/cuda-h200x2-2026-11-29.md).
var AutoP2PBytes = 4 << 20

func (g Gather) String() string {
	switch g {
	case GatherAllGather:
		return "allgather"
	case GatherP2P:
		return "p2p"
	}
	return "auto"
}

// GatherEnv, when set to "auto", "p2p" or "allgather", is the default Gather.
const GatherEnv = "DETCOLL_NCCL_GATHER"

// ChunkEnv sets the default pipeline chunk (bytes; 0 turns pipelining off).
const ChunkEnv = "DETCOLL_NCCL_CHUNK_BYTES"

// DefaultChunkBytes is the default pipeline chunk (0: off). With a chunk
// set, a reduction whose send/receive phase moves at least two chunks per
// rank is cut into chunks; chunk i+1 moves while chunk i is reduced on a
// second stream. Off by default: on two H200s it gained nothing (the
// chunk sweep in docs/benchmarks/cuda-h200x2-2026-11-29.md).
var DefaultChunkBytes = 0

// listLimit is the largest W reduced through the pointer-list kernel (the
// own input read in place); above it the own block is copied into the
// workspace and the strided kernel is used. A variable so that tests can
// exercise the strided path on two GPUs.
var listLimit = gpu.MaxListInputs

// Comm is one rank's deterministic device-memory communicator. See the
// package doc for the contract.
type Comm struct {
	rt     devrt.Runtime
	dev    *gpu.Device
	k      *gpu.ReduceKernels
	fast   *fastKernels  // nil: generic kernels only
	lib    *ccl.Lib      // NCCL or RCCL
	nc     *ccl.Comm     // NCCL or RCCL
	host   *detcoll.Comm // split off the job's communicator: signature checks only
	rank   int
	size   int
	stream Stream // own, non-blocking
	side   Stream // own, non-blocking: the reduces of pipelined algorithms
	joinEv devrt.Event
	evT    devrt.Event // pipeline: a chunk has arrived
	evR    devrt.Event // pipeline: every chunk is reduced
	cfg    config

	mu         sync.Mutex
	closed     bool
	poison     error
	sigs       map[signature]struct{}
	ws         DevicePtr
	wsBytes    int
	retired    []DevicePtr // old workspaces a captured graph may still use
	retiredB   int
	peak       int
	captured   bool
	lastStream Stream
	lastCapt   bool
	haveLast   bool
	stats      Stats
	lastSig    signature   // the last validated signature (skips the map)
	ptrs       []DevicePtr // scratch: reduce input lists
	ipc        *ipcState   // nil: no peer-memory path (see ipcWhy)
	ipcWhy     string
}

// Stats are a communicator's counters.
type Stats struct {
	Collectives        int64 // collectives enqueued
	Captured           int64 // of which enqueued into a CUDA graph capture
	SignatureExchanges int64 // first sightings compared across ranks
	WorkspaceBytes     int   // device workspace retained now (retired buffers included)
	WorkspacePeakBytes int   // most workspace ever retained at once
}

type config struct {
	prefix     string
	device     int
	alg        detcoll.Algorithm
	acc        detcoll.Accumulate
	gather     Gather
	chunk      int
	checkAlloc bool
	initTO     time.Duration
	ipcBytes   int
	ipcTimeout time.Duration
	vendor     string // "", "cuda" or "rocm" (devrt.Get)
}

// Option configures New.
type Option func(*config)

// WithDevice picks the CUDA device ordinal (default: the job's LOCAL_RANK).
func WithDevice(ordinal int) Option { return func(c *config) { c.device = ordinal } }

// WithVendor picks the GPU vendor: "cuda" (NCCL, NVRTC) or "rocm" (RCCL,
// hiprtc). The default ("" or "auto") is $DETCOLL_DEVICE if set, else the
// first vendor linked into the binary that is usable here, CUDA first
// (gpu/devrt.Get).
func WithVendor(v string) Option { return func(c *config) { c.vendor = v } }

// WithPrefix sets the store prefix under which rank 0 publishes the NCCL
// unique id (default "detcoll/devcomm"). Communicators created in the same
// order on every rank get distinct keys below it.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithDefaultAlgorithm sets the algorithm of calls that do not choose one
// (default Auto).
func WithDefaultAlgorithm(a detcoll.Algorithm) Option { return func(c *config) { c.alg = a } }

// WithDefaultAccumulate sets the fp16/bf16 accumulate mode of calls that do
// not choose one (default native).
func WithDefaultAccumulate(a detcoll.Accumulate) Option { return func(c *config) { c.acc = a } }

// WithGather sets how the reductions gather (default $DETCOLL_NCCL_GATHER,
// else GatherAuto).
func WithGather(g Gather) Option { return func(c *config) { c.gather = g } }

// WithChunkBytes sets the pipeline chunk (default $DETCOLL_NCCL_CHUNK_BYTES,
// else DefaultChunkBytes; 0 turns pipelining off). It changes no bits but
// the number of NCCL operations, so it is part of the call signature.
func WithChunkBytes(n int) Option { return func(c *config) { c.chunk = n } }

// WithAllocationChecks makes every call also check, with
// cuMemGetAddressRange, that each buffer lies inside one device allocation
// of this context (about a microsecond per buffer; off by default).
func WithAllocationChecks(on bool) Option { return func(c *config) { c.checkAlloc = on } }

// WithInitTimeout bounds the wait for the NCCL unique id in the store when
// ctx has no deadline (default 2 minutes).
func WithInitTimeout(d time.Duration) Option { return func(c *config) { c.initTO = d } }

// CallOption adjusts one collective call. It is a small value (no closure,
// no allocation per call): build it with OnStream, WithAlgorithm or
// WithAccumulate.
type CallOption struct {
	what   uint8
	stream Stream
	alg    detcoll.Algorithm
	acc    detcoll.Accumulate
}

const (
	optStream uint8 = iota + 1
	optAlg
	optAcc
)

type callConfig struct {
	stream Stream
	alg    detcoll.Algorithm
	acc    detcoll.Accumulate
}

// OnStream enqueues the call on s instead of the communicator's own stream.
func OnStream(s Stream) CallOption { return CallOption{what: optStream, stream: s} }

// WithAlgorithm forces an algorithm for one call.
func WithAlgorithm(a detcoll.Algorithm) CallOption { return CallOption{what: optAlg, alg: a} }

// WithAccumulate sets the fp16/bf16 accumulate mode for one call.
func WithAccumulate(a detcoll.Accumulate) CallOption { return CallOption{what: optAcc, acc: a} }

// generation numbers the communicators created per prefix in this process.
var (
	genMu sync.Mutex
	gens  = map[string]int{}
)

func nextGen(prefix string) int {
	genMu.Lock()
	defer genMu.Unlock()
	gens[prefix]++
	return gens[prefix]
}

// New joins this rank of job to a new NCCL communicator on GPU LOCAL_RANK
// and returns the deterministic communicator over it. Every rank of the job
// calls New, in the same order relative to other New calls. ctx bounds the
// rendezvous. The job (its store and host communicator) must outlive the
// Comm.
func New(ctx context.Context, job *cluster.Job, opts ...Option) (*Comm, error) {
	if job == nil || job.Comm == nil || job.Store == nil {
		return nil, fmt.Errorf("devcomm: New: %w: the job has no communicator or store", detcoll.ErrInvalidArgument)
	}
	cfg := config{prefix: "detcoll/devcomm", device: -1, acc: detcoll.AccumulateNative, initTO: 2 * time.Minute, chunk: DefaultChunkBytes}
	switch strings.ToLower(os.Getenv(GatherEnv)) {
	case "p2p":
		cfg.gather = GatherP2P
	case "allgather":
		cfg.gather = GatherAllGather
	}
	if v := os.Getenv(ChunkEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("devcomm: New: %w: %s=%q is not a byte count", detcoll.ErrInvalidArgument, ChunkEnv, v)
		}
		cfg.chunk = n
	}
	if err := ipcConfig(&cfg); err != nil {
		return nil, fmt.Errorf("devcomm: New: %w: %v", detcoll.ErrInvalidArgument, err)
	}
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.alg.Valid() || !cfg.acc.Valid() || cfg.gather > GatherP2P || cfg.chunk < 0 || cfg.ipcBytes < 0 || cfg.ipcTimeout <= 0 {
		return nil, fmt.Errorf("devcomm: New: %w: bad options (algorithm %v, accumulate %v, gather %v, chunk %d, IPC %d bytes, IPC timeout %v)",
			detcoll.ErrInvalidArgument, cfg.alg, cfg.acc, cfg.gather, cfg.chunk, cfg.ipcBytes, cfg.ipcTimeout)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.initTO)
		defer cancel()
	}
	keepNVLSOff()
	rank, size := job.Comm.Rank(), job.Comm.Size()
	gen := nextGen(cfg.prefix)

	// Everything that can fail locally is tried first; then every rank
	// reports, so that no rank waits in NCCL for a rank that gave up.
	c := &Comm{rank: rank, size: size, cfg: cfg, sigs: map[signature]struct{}{}}
	var lerr error
	if c.rt, lerr = devrt.Get(cfg.vendor); lerr != nil {
		lerr = fmt.Errorf("devcomm: %w", lerr)
	} else {
		lerr = c.openLocal(job.Env.LocalRank, job.Env.LocalWorldSize)
	}
	host, err := job.Comm.Split(ctx, 0, rank)
	if err != nil {
		c.closeLocal()
		return nil, fmt.Errorf("devcomm: New: splitting the host communicator: %w", err)
	}
	c.host = host
	if err := c.agreeDevices(ctx, lerr); err != nil {
		c.closeLocal()
		return nil, err
	}
	key := fmt.Sprintf("%s/%d/nccl-unique-id", cfg.prefix, gen)
	var id ccl.UniqueID
	if rank == 0 {
		if id, err = c.lib.GetUniqueID(); err == nil {
			err = job.Store.Set(ctx, key, id[:])
		}
		if err != nil {
			// Publish an empty id so that the other ranks fail too.
			_ = job.Store.Set(ctx, key, nil)
			c.closeLocal()
			return nil, fmt.Errorf("devcomm: New: rank 0 making the NCCL id: %w", err)
		}
	} else {
		v, err := job.Store.Get(ctx, key)
		if err == nil && len(v) != len(id) {
			err = fmt.Errorf("rank 0 published no id (it failed)")
		}
		if err != nil {
			c.closeLocal()
			return nil, fmt.Errorf("devcomm: New: rank %d reading the NCCL id at %q: %w", rank, key, err)
		}
		copy(id[:], v)
	}
	err = c.dev.Do(func() (err error) {
		c.nc, err = c.lib.CommInitRank(size, id, rank)
		return err
	})
	if err != nil {
		c.closeLocal()
		return nil, fmt.Errorf("devcomm: New: ncclCommInitRank on GPU %d (rank %d of %d): %w", c.dev.Ordinal(), rank, size, err)
	}
	if rank == 0 {
		// Every rank has read the id once all ranks are past init.
		if err := c.host.Barrier(ctx); err == nil {
			_, _ = job.Store.Delete(ctx, key)
		}
	} else {
		_ = c.host.Barrier(ctx)
	}
	if err := c.setupIPC(ctx); err != nil {
		c.closeLocal()
		return nil, err
	}
	return c, nil
}

// keepNVLSOff sets NCCL_NVLS_ENABLE=0 when it is unset: NVLink multicast can
// take a shared host's GPUs out of service.
func keepNVLSOff() {
	if _, ok := os.LookupEnv("NCCL_NVLS_ENABLE"); !ok {
		os.Setenv("NCCL_NVLS_ENABLE", "0")
	}
}

// openLocal loads NCCL, opens the device, compiles the kernels and creates
// the stream and event. On error c holds what was opened (closeLocal frees it).
func (c *Comm) openLocal(localRank, localWorld int) error {
	lib, err := c.rt.CCL()
	if err != nil {
		return fmt.Errorf("devcomm: no %s: %w", c.rt.CCLName(), err)
	}
	c.lib = lib
	if err := c.rt.DriverAvailable(); err != nil {
		return fmt.Errorf("devcomm: no %s: %w", driverName(c.rt), err)
	}
	n, err := c.rt.DeviceCount()
	if err != nil {
		return err
	}
	ord := c.cfg.device
	if ord < 0 {
		switch {
		case n == 0:
			return fmt.Errorf("devcomm: the %s sees no GPU", driverName(c.rt))
		case localRank < n:
			ord = localRank
		case n == 1:
			ord = 0 // one visible GPU per process (CUDA_VISIBLE_DEVICES per rank)
		default:
			return fmt.Errorf("devcomm: local rank %d of %d has no GPU of its own: %d visible, and NCCL refuses two ranks on one GPU", localRank, localWorld, n)
		}
	}
	if c.dev, err = gpu.OpenWith(c.rt, ord); err != nil {
		return err
	}
	if c.k, err = c.dev.Kernels(); err != nil {
		return err
	}
	if c.fast, err = loadFast(c.dev); err != nil {
		return err
	}
	if c.stream, err = c.dev.NewStream(); err != nil {
		return err
	}
	if c.side, err = c.dev.NewStream(); err != nil {
		return err
	}
	return c.dev.Do(func() (err error) {
		for _, e := range []*devrt.Event{&c.joinEv, &c.evT, &c.evR} {
			if *e, err = c.rt.EventCreate(false); err != nil {
				return err
			}
		}
		return nil
	})
}

// agreeDevices tells every rank whether some rank failed to open its GPU and
// whether two ranks of one host share a GPU (NCCL would refuse).
func (c *Comm) agreeDevices(ctx context.Context, lerr error) error {
	const n = 128
	mine := make([]byte, n)
	if lerr != nil {
		mine[0] = 1
	} else {
		host, _ := os.Hostname()
		id := c.dev.Name()
		if u, err := c.dev.UUID(); err == nil {
			id = fmt.Sprintf("%x", u)
		} else if b, err := c.dev.PCIBusID(); err == nil {
			id = b
		}
		copy(mine[1:], host+"\x00"+id)
	}
	all := make([]byte, n*c.size)
	if err := c.host.AllGather(ctx, mine, all, dtype.Byte); err != nil {
		if lerr != nil {
			return lerr
		}
		return fmt.Errorf("devcomm: New: comparing devices: %w", err)
	}
	if lerr != nil {
		return lerr
	}
	for p := 0; p < c.size; p++ {
		m := all[p*n : (p+1)*n]
		if m[0] != 0 {
			return fmt.Errorf("devcomm: New: rank %d could not open its GPU", p)
		}
		if p != c.rank && bytes.Equal(m, mine) {
			return fmt.Errorf("devcomm: New: ranks %d and %d would share GPU %d of one host (NCCL refuses two ranks on one GPU): give every rank its own GPU (LOCAL_RANK or CUDA_VISIBLE_DEVICES)", min(p, c.rank), max(p, c.rank), c.dev.Ordinal())
		}
	}
	return nil
}

func (c *Comm) closeLocal() {
	if c.ipc != nil {
		c.dev.Do(func() error { return c.ipc.free() })
		c.ipc = nil
	}
	if c.dev == nil {
		if c.host != nil {
			c.host.Close()
		}
		return
	}
	_ = c.dev.Do(func() error {
		if c.nc != nil {
			_ = c.nc.Abort()
		}
		_ = c.rt.EventDestroy(c.joinEv)
		_ = c.rt.EventDestroy(c.evT)
		_ = c.rt.EventDestroy(c.evR)
		if c.stream != 0 {
			_ = c.rt.StreamDestroy(c.stream)
		}
		if c.side != 0 {
			_ = c.rt.StreamDestroy(c.side)
		}
		return nil
	})
	_ = c.fast.unload()
	if c.host != nil {
		c.host.Close()
	}
	c.dev.Close()
}

// Rank is this rank's index.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks W.
func (c *Comm) Size() int { return c.size }

// Device is the GPU this rank drives (for allocation, copies and graph
// capture; do not close it: Close does).
func (c *Comm) Device() *gpu.Device { return c.dev }

// Stream is the communicator's own non-blocking stream, the default stream
// of every collective.
func (c *Comm) Stream() Stream { return c.stream }

// CCL is the underlying NCCL or RCCL communicator (for native baselines;
// issue nothing on it that other ranks do not issue in the same order).
// nccl.WrapComm and rccl.WrapComm give it the vendor's typed face.
func (c *Comm) CCL() *ccl.Comm { return c.nc }

// Vendor is "cuda" (NCCL) or "rocm" (RCCL).
func (c *Comm) Vendor() string { return c.rt.Vendor() }

// NCCLVersion is the version of the NCCL (or RCCL) library actually loaded.
func (c *Comm) NCCLVersion() string {
	v, err := c.lib.Version()
	if err != nil {
		return ""
	}
	return v.String()
}

// Gather is how the reductions gather (see WithGather).
func (c *Comm) Gather() Gather { return c.cfg.gather }

// Stats returns the counters.
func (c *Comm) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Err returns the error that poisoned the communicator, or nil.
func (c *Comm) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.poison
}

// AsyncError asks NCCL whether the communicator has failed asynchronously
// (a peer died, a network error): nil while healthy.
func (c *Comm) AsyncError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.nc == nil {
		return c.errClosed("AsyncError")
	}
	return c.dev.Do(func() error { return c.nc.AsyncError() })
}

// Synchronize waits on the host for the work queued on the communicator's
// own stream. It also reports (and poisons the communicator with) a failure
// that a peer-memory kernel recorded, such as ErrIPCTimeout.
func (c *Comm) Synchronize() error {
	if err := c.dev.Synchronize(c.stream); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ipcCheck("Synchronize")
}

// Alloc allocates device memory on this rank's GPU as a Buffer; free it with
// Free before Close.
func (c *Comm) Alloc(bytes int) (Buffer, error) {
	p, err := c.dev.Alloc(bytes)
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{Ptr: p, Bytes: bytes}, nil
}

// Free frees a Buffer from Alloc.
func (c *Comm) Free(b Buffer) error { return c.dev.Free(b.Ptr) }

// Reserve grows the workspace to at least n bytes now (so that no later
// call, nor a capture, has to). It may synchronise the last stream used.
func (c *Comm) Reserve(n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable("Reserve"); err != nil {
		return err
	}
	return c.dev.Do(func() error {
		_, err := c.workspace(n, false)
		return err
	})
}

// ReleaseWorkspace synchronises the last stream used and frees the
// workspace, retired buffers included (the peak is kept in Stats). Graphs
// that captured collectives of this communicator must not be launched
// afterwards.
func (c *Comm) ReleaseWorkspace() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	return c.dev.Do(func() error {
		var errs []error
		if c.haveLast {
			errs = append(errs, c.rt.StreamSynchronize(c.lastStream))
		}
		errs = append(errs, c.rt.MemFree(c.ws))
		for _, p := range c.retired {
			errs = append(errs, c.rt.MemFree(p))
		}
		c.ws, c.wsBytes, c.retired, c.retiredB = 0, 0, nil, 0
		c.stats.WorkspaceBytes = 0
		c.peak = 0
		return errors.Join(errs...)
	})
}

// ReleaseStream tells the communicator that s (a stream passed with
// OnStream) is about to be destroyed. The next call on another stream waits
// for the last one used, so a stream must stay alive until then, or be
// released here: this waits on the host for s if it was the last stream
// used and forgets it.
func (c *Comm) ReleaseStream(s Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !c.haveLast || c.lastStream != s || s == c.stream {
		return nil
	}
	c.haveLast = false
	if c.lastCapt {
		return nil
	}
	return c.dev.Synchronize(s)
}

// PeakSinceRelease is the most workspace retained at once since the last
// ReleaseWorkspace (or since New).
func (c *Comm) PeakSinceRelease() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}

// Close waits for the work queued on the last stream used, destroys the
// NCCL communicator (aborts it if poisoned), frees the workspace, the
// stream and the event, closes the host sub-communicator and the device.
// It is idempotent; later calls fail with detcoll.ErrClosed.
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.poison != nil {
		c.ipc.abort() // no kernel of ours may keep waiting for a peer
	}
	var errs []error
	errs = append(errs, c.dev.Do(func() error {
		var errs []error
		if c.haveLast && c.poison == nil {
			errs = append(errs, c.rt.StreamSynchronize(c.lastStream))
		}
		errs = append(errs, c.rt.StreamSynchronize(c.stream))
		return errors.Join(errs...)
	}))
	errs = append(errs, c.closeIPC())
	errs = append(errs, c.dev.Do(func() error {
		var errs []error
		if c.nc != nil {
			if c.poison != nil {
				errs = append(errs, c.nc.Abort())
			} else {
				errs = append(errs, c.nc.Destroy())
			}
		}
		errs = append(errs, c.rt.MemFree(c.ws))
		for _, p := range c.retired {
			errs = append(errs, c.rt.MemFree(p))
		}
		c.ws, c.wsBytes, c.retired, c.retiredB = 0, 0, nil, 0
		c.stats.WorkspaceBytes = 0
		errs = append(errs, c.rt.StreamSynchronize(c.side))
		errs = append(errs, c.rt.EventDestroy(c.joinEv), c.rt.EventDestroy(c.evT), c.rt.EventDestroy(c.evR), c.rt.StreamDestroy(c.stream), c.rt.StreamDestroy(c.side))
		return errors.Join(errs...)
	}))
	errs = append(errs, c.fast.unload())
	errs = append(errs, c.host.Close(), c.dev.Close())
	return errors.Join(errs...)
}

func (c *Comm) errClosed(op string) error {
	return &detcoll.Error{Op: op, Rank: c.rank, Peer: -1, Err: detcoll.ErrClosed}
}

// usable checks state; called with c.mu held.
func (c *Comm) usable(op string) error {
	if c.closed {
		return c.errClosed(op)
	}
	if c.poison != nil {
		return &detcoll.Error{Op: op, Rank: c.rank, Peer: -1, Err: fmt.Errorf("%w: %w", detcoll.ErrPoisoned, c.poison)}
	}
	return nil
}

// fail poisons the communicator and aborts NCCL. Called with c.mu held.
func (c *Comm) fail(op string, err error) error {
	e := &detcoll.Error{Op: op, Rank: c.rank, Peer: -1, Err: err}
	if c.poison == nil {
		c.poison = e
		if c.nc != nil {
			_ = c.dev.Do(func() error { return c.nc.Abort() })
			c.nc = nil
		}
	}
	return e
}

// workspace returns at least n bytes of workspace, growing it if needed.
// Called with c.mu held, inside c.dev.Do.
func (c *Comm) workspace(n int, capturing bool) (DevicePtr, error) {
	if n <= c.wsBytes {
		return c.ws, nil
	}
	if capturing {
		return 0, fmt.Errorf("%w: %w (need %d bytes, %d retained): run the collective once outside the capture or call Reserve first",
			detcoll.ErrInvalidArgument, ErrCaptureGrowth, n, c.wsBytes)
	}
	// Grow by at least a quarter so that a sweep of sizes does not
	// reallocate every time (retained ≤ 1.25 × the largest need).
	sz := n
	if c.wsBytes > 0 && sz < c.wsBytes+c.wsBytes/4 {
		sz = c.wsBytes + c.wsBytes/4
	}
	sz = (sz + 255) &^ 255
	if c.ws != 0 {
		if c.captured {
			c.retired = append(c.retired, c.ws)
			c.retiredB += c.wsBytes
		} else {
			if c.haveLast {
				if err := c.rt.StreamSynchronize(c.lastStream); err != nil {
					return 0, err
				}
			}
			if err := c.rt.MemFree(c.ws); err != nil {
				return 0, err
			}
		}
		c.ws, c.wsBytes = 0, 0
	}
	p, err := c.rt.MemAlloc(sz)
	if err != nil {
		c.stats.WorkspaceBytes = c.retiredB
		return 0, err
	}
	c.ws, c.wsBytes = p, sz
	c.stats.WorkspaceBytes = sz + c.retiredB
	c.stats.WorkspacePeakBytes = max(c.stats.WorkspacePeakBytes, c.stats.WorkspaceBytes)
	c.peak = max(c.peak, c.stats.WorkspaceBytes)
	return p, nil
}

// signature identifies a collective call for the cross-rank check.
type signature struct {
	op       uint8
	dt       uint8
	acc      uint8
	alg      uint8
	gather   uint8
	lanes    uint32
	count    uint64
	laneHash uint64
	chunk    uint64
}

const sigBytes = 40

func (s signature) encode(b []byte) {
	b[0], b[1], b[2], b[3], b[4] = s.op, s.dt, s.acc, s.alg, s.gather
	binary.LittleEndian.PutUint32(b[8:], s.lanes)
	binary.LittleEndian.PutUint64(b[12:], s.count)
	binary.LittleEndian.PutUint64(b[20:], s.laneHash)
	binary.LittleEndian.PutUint64(b[28:], s.chunk)
	binary.LittleEndian.PutUint32(b[36:], 0xD1CE)
}

func decodeSig(b []byte) signature {
	return signature{op: b[0], dt: b[1], acc: b[2], alg: b[3], gather: b[4],
		lanes: binary.LittleEndian.Uint32(b[8:]), count: binary.LittleEndian.Uint64(b[12:]),
		laneHash: binary.LittleEndian.Uint64(b[20:]), chunk: binary.LittleEndian.Uint64(b[28:])}
}

const (
	opAllReduce uint8 = iota + 1
	opAllGather
	opReduceScatter
	opAllGatherMany
	opReduceScatterMany
)

var opNames = []string{"?", "AllReduce", "AllGather", "ReduceScatter", "AllGatherMany", "ReduceScatterMany"}

func (s signature) String() string {
	name := "?"
	if int(s.op) < len(opNames) {
		name = opNames[s.op]
	}
	str := fmt.Sprintf("%s(count=%d, dtype=%v", name, s.count, dtype.DType(s.dt))
	switch s.op {
	case opAllReduce, opReduceScatter, opReduceScatterMany:
		str += fmt.Sprintf(", accumulate=%v, algorithm=%v", detcoll.Accumulate(s.acc), detcoll.Algorithm(s.alg))
	}
	str += ", gather=" + Gather(s.gather).String() + fmt.Sprintf(", chunk=%d", s.chunk)
	if s.op == opAllGatherMany || s.op == opReduceScatterMany {
		str += fmt.Sprintf(", lanes=%d, lane-counts-hash=%#x", s.lanes, s.laneHash)
	}
	return str + ")"
}

func laneHash(counts []int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, n := range counts {
		binary.LittleEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
	}
	return h.Sum64()
}

// validate compares s across ranks the first time this Comm sees it.
// Called with c.mu held.
func (c *Comm) validate(ctx context.Context, s signature) error {
	if _, ok := c.sigs[s]; ok {
		return nil
	}
	if c.size > 1 {
		if ctx == nil {
			ctx = context.Background()
		}
		var mine [sigBytes]byte
		s.encode(mine[:])
		all := make([]byte, sigBytes*c.size)
		c.stats.SignatureExchanges++
		if err := c.host.AllGather(ctx, mine[:], all, dtype.Byte); err != nil {
			return fmt.Errorf("comparing %v across ranks over the host communicator: %w", s, err)
		}
		var diff []string
		for p := 0; p < c.size; p++ {
			if ps := decodeSig(all[p*sigBytes:]); ps != s {
				diff = append(diff, fmt.Sprintf("rank %d called %v", p, ps))
			}
		}
		if diff != nil {
			return fmt.Errorf("%w: rank %d called %v; %s", detcoll.ErrMismatch, c.rank, s, strings.Join(diff, "; "))
		}
	}
	c.sigs[s] = struct{}{}
	return nil
}

// resolve applies the call options over the communicator's defaults.
func (c *Comm) resolve(opts []CallOption, bytes int) callConfig {
	cc := callConfig{stream: c.stream, alg: c.cfg.alg, acc: c.cfg.acc}
	for _, o := range opts {
		switch o.what {
		case optStream:
			cc.stream = o.stream
		case optAlg:
			cc.alg = o.alg
		case optAcc:
			cc.acc = o.acc
		}
	}
	switch {
	case cc.alg == detcoll.Auto && c.ipc != nil && bytes*(c.size-1) <= c.ipc.geom.oneShot:
		cc.alg = detcoll.OneShot
	case cc.alg == detcoll.Auto && c.ipc != nil && (AutoIPCReduceBytes == 0 || bytes <= AutoIPCReduceBytes):
		cc.alg = detcoll.TwoShot
	case cc.alg == detcoll.Auto:
		cc.alg = detcoll.GatherTree
		if (c.size > 2 && bytes >= AutoA2ABytes) || (c.size == 2 && bytes >= AutoA2ABytesTwoRanks) {
			cc.alg = detcoll.A2ATree
		}
	}
	if c.ipc == nil {
		// No peer memory: one_shot and two_shot run as their NCCL twins,
		// which move the same bytes (same bits, as always).
		cc.alg = cc.alg.Transport()
	}
	return cc
}

// resolveAG is resolve for the all-gathers: peer memory (recorded as
// OneShot) for one_shot, two_shot and, up to AutoIPCGatherBytes, auto;
// NCCL (recorded as GatherTree) otherwise.
func (c *Comm) resolveAG(opts []CallOption, bytes int) callConfig {
	cc := c.resolve(opts, -1)
	auto := c.cfg.alg == detcoll.Auto
	for _, o := range opts {
		if o.what == optAlg {
			auto = o.alg == detcoll.Auto
		}
	}
	ipc := c.ipc != nil && (cc.alg == detcoll.OneShot || cc.alg == detcoll.TwoShot)
	if auto {
		ipc = c.ipc != nil && (AutoIPCGatherBytes == 0 || bytes <= AutoIPCGatherBytes)
	}
	cc.alg = detcoll.GatherTree
	if ipc {
		cc.alg = detcoll.OneShot
	}
	return cc
}

// resolveRS is resolve for the reduce-scatters, where Auto is always
// a2a_tree: it receives only this rank's block of every input, in one NCCL
// group, while gather_tree receives every rank's whole input. Measured on
// two H200s it is as fast or faster at every size (16 MiB: 63 µs against
// 92 µs; docs/benchmarks/cuda-h200x2-2026-11-29.md).
func (c *Comm) resolveRS(opts []CallOption, bytes int) callConfig {
	cc := c.resolve(opts, 0)
	auto := c.cfg.alg == detcoll.Auto
	for _, o := range opts {
		if o.what == optAlg {
			auto = o.alg == detcoll.Auto
		}
	}
	if auto {
		cc.alg = detcoll.A2ATree
	}
	if c.ipc != nil && (cc.alg == detcoll.OneShot || (auto && (AutoIPCReduceBytes == 0 || bytes <= AutoIPCReduceBytes))) {
		cc.alg = detcoll.TwoShot // the one peer-memory reduce-scatter
	}
	return cc
}

// run is the frame of every collective: state and argument checks (check
// must not enqueue anything), the cross-rank signature check on first
// sight, then body on a locked thread with the context current, after
// joining the previous call's stream when it differs.
//
// A collective that uses no workspace (AllGather) neither asks whether the
// stream is capturing nor joins streams: it is ordered by NCCL alone.
func (c *Comm) run(ctx context.Context, op string, cc callConfig, usesWS bool, check func() (signature, error), body func(s Stream, capturing bool) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(op); err != nil {
		return err
	}
	if err := c.ipcCheck(op); err != nil {
		return err
	}
	sig, err := check()
	if err != nil {
		return &detcoll.Error{Op: op, Rank: c.rank, Peer: -1, Err: err}
	}
	if sig != c.lastSig {
		// A signature not seen just before: the context bounds its
		// cross-rank check, if it needs one.
		if ctx != nil && ctx.Err() != nil {
			return &detcoll.Error{Op: op, Rank: c.rank, Peer: -1, Err: ctx.Err()}
		}
		if err := c.validate(ctx, sig); err != nil {
			return c.fail(op, err)
		}
		c.lastSig = sig
	}
	s := cc.stream
	var capturing bool
	if !usesWS {
		if err := c.dev.Do(func() error { return body(s, false) }); err != nil {
			return c.fail(op, err)
		}
		c.stats.Collectives++
		return nil
	}
	err = c.dev.Do(func() error {
		var err error
		capturing, err = c.rt.StreamCapturing(s)
		if err != nil {
			return err
		}
		if c.haveLast && c.lastStream != s && !capturing && !c.lastCapt {
			if err := c.rt.EventRecord(c.joinEv, c.lastStream); err != nil {
				return err
			}
			if err := c.rt.StreamWaitEvent(s, c.joinEv); err != nil {
				return err
			}
		}
		return body(s, capturing)
	})
	if err != nil {
		if errors.Is(err, detcoll.ErrInvalidArgument) {
			return &detcoll.Error{Op: op, Rank: c.rank, Peer: -1, Err: err}
		}
		return c.fail(op, err)
	}
	c.lastStream, c.lastCapt, c.haveLast = s, capturing, true
	if capturing {
		c.captured = true
		c.stats.Captured++
	}
	c.stats.Collectives++
	return nil
}

// driverName names the runtime's driver in messages ("CUDA driver").
func driverName(rt devrt.Runtime) string {
	if rt.Vendor() == "rocm" {
		return "HIP runtime"
	}
	return "CUDA driver"
}
