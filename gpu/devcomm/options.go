package devcomm

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/gpu"
)

// Options of New and of single calls, and the environment variables that
// set their defaults. Everything a call reads is in the communicator's
// config (a value fixed at New); no package variable is read per call.

// Environment variables of the NCCL-transport path.
const (
	// GatherEnv, when set to "auto", "p2p" or "allgather", is the default Gather.
	GatherEnv = "DETCOLL_NCCL_GATHER"
	// ChunkEnv sets the default pipeline chunk (bytes; 0 turns pipelining off).
	ChunkEnv = "DETCOLL_NCCL_CHUNK_BYTES"
)

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
	// IPCBlocksEnv caps the blocks of one IPC kernel (1..256):
	// Thresholds.IPCMaxBlocks.
	IPCBlocksEnv = "DETCOLL_IPC_BLOCKS"
	// IPCBlockBytesEnv is the bytes each block moves, which sets the grid
	// of smaller messages: Thresholds.IPCBlockBytes.
	IPCBlockBytesEnv = "DETCOLL_IPC_BLOCK_BYTES"
	// IPCLLBytesEnv overrides Thresholds.LLBytes (0: never LL).
	IPCLLBytesEnv = "DETCOLL_IPC_LL_BYTES"
	// IPCOneShotBytesEnv overrides Thresholds.OneShotBytes.
	IPCOneShotBytesEnv = "DETCOLL_IPC_ONE_SHOT_BYTES"
)

// DefaultChunkBytes is the default pipeline chunk (0: off). With a chunk
// set, a reduction whose send/receive phase moves at least two chunks per
// rank is cut into chunks; chunk i+1 moves while chunk i is reduced on a
// second stream. Off by default: on two H200s it gained nothing (the
// chunk sweep in docs/benchmarks/cuda-h200x2-2026-11-29.md).
const DefaultChunkBytes = 0

// DefaultIPCBytes is the default staging capacity (one half): messages
// larger than one half's share run as several kernels, in pieces.
const DefaultIPCBytes = 64 << 20

// DefaultIPCTimeout bounds the device-side waits for peers.
const DefaultIPCTimeout = 30 * time.Second

// DefaultWaitTimeout bounds every host wait for device work (Synchronize,
// Close) when the caller's context has no deadline: past it the
// communicator aborts NCCL, poisons itself and returns ErrWaitTimeout.
const DefaultWaitTimeout = 5 * time.Minute

// Gather selects how the gathers inside the reductions move data. Every
// choice gives identical bits; it is part of the call signature, so all
// ranks must use the same one.
type Gather uint8

const (
	// GatherAuto uses grouped ncclSend/ncclRecv from Thresholds.P2PBytes
	// per rank and ncclAllGather below (the default). AllGather itself
	// always uses ncclAllGather.
	GatherAuto Gather = iota
	// GatherAllGather always uses ncclAllGather.
	GatherAllGather
	// GatherP2P always uses one group of ncclSend/ncclRecv pairs (AllGather
	// too, after copying the own block).
	GatherP2P
)

func (g Gather) String() string {
	switch g {
	case GatherAllGather:
		return "allgather"
	case GatherP2P:
		return "p2p"
	}
	return "auto"
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
	waitTO     time.Duration
	ipcBytes   int
	ipcTimeout time.Duration
	vendor     string // "", "cuda" or "rocm" (devrt.Get)
	th         Thresholds
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

// WithWaitTimeout bounds the host waits for device work that take no
// context (Synchronize, Close; default DefaultWaitTimeout). SynchronizeCtx
// takes its bound from its context instead.
func WithWaitTimeout(d time.Duration) Option { return func(c *config) { c.waitTO = d } }

// WithIPC sets the staging capacity of the peer-memory path in bytes (one
// half; default $DETCOLL_IPC_BYTES, else DefaultIPCBytes); 0 turns the path
// off. Every rank must pass the same value.
func WithIPC(capacity int) Option { return func(c *config) { c.ipcBytes = capacity } }

// WithIPCTimeout bounds every device-side wait for a peer (default
// $DETCOLL_IPC_TIMEOUT, else DefaultIPCTimeout).
func WithIPCTimeout(d time.Duration) Option { return func(c *config) { c.ipcTimeout = d } }

// WithThresholds replaces the thresholds of the automatic choice and the
// peer-memory grid (default DefaultThresholds with the environment's
// overrides). Every rank must pass the same values.
func WithThresholds(t Thresholds) Option { return func(c *config) { c.th = t } }

// defaultConfig is the configuration before options: the built-in defaults
// with the environment's overrides.
func defaultConfig() (config, error) {
	cfg := config{prefix: "detcoll/devcomm", device: -1, acc: detcoll.AccumulateNative, initTO: 2 * time.Minute,
		waitTO: DefaultWaitTimeout, chunk: DefaultChunkBytes, ipcBytes: DefaultIPCBytes, ipcTimeout: DefaultIPCTimeout,
		th: DefaultThresholds()}
	switch strings.ToLower(os.Getenv(GatherEnv)) {
	case "p2p":
		cfg.gather = GatherP2P
	case "allgather":
		cfg.gather = GatherAllGather
	}
	if v := os.Getenv(ChunkEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return cfg, fmt.Errorf("%s=%q is not a byte count", ChunkEnv, v)
		}
		cfg.chunk = n
	}
	if err := ipcEnv(&cfg); err != nil {
		return cfg, err
	}
	return cfg, thresholdsEnv(&cfg.th)
}

// ipcEnv reads the peer-memory path's environment into cfg.
func ipcEnv(cfg *config) error {
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

// thresholdsEnv applies the environment's overrides of the peer-memory
// thresholds.
func thresholdsEnv(t *Thresholds) error {
	for _, e := range []struct {
		name   string
		v      *int
		lo, hi int
	}{
		{IPCBlocksEnv, &t.IPCMaxBlocks, 1, ipcMaxB},
		{IPCBlockBytesEnv, &t.IPCBlockBytes, 1024, 1 << 30},
		{IPCLLBytesEnv, &t.LLBytes, 0, 1 << 30},
		{IPCOneShotBytesEnv, &t.OneShotBytes, 0, 1 << 40},
	} {
		n, err := envInt(e.name, *e.v, e.lo, e.hi)
		if err != nil {
			return err
		}
		*e.v = n
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

// check validates the options (after the environment and the Options).
func (cfg *config) check() error {
	if !cfg.alg.Valid() || !cfg.acc.Valid() || cfg.gather > GatherP2P || cfg.chunk < 0 || cfg.ipcBytes < 0 || cfg.ipcTimeout <= 0 || cfg.waitTO <= 0 {
		return fmt.Errorf("bad options (algorithm %v, accumulate %v, gather %v, chunk %d, IPC %d bytes, IPC timeout %v, wait timeout %v)",
			cfg.alg, cfg.acc, cfg.gather, cfg.chunk, cfg.ipcBytes, cfg.ipcTimeout, cfg.waitTO)
	}
	return cfg.th.check()
}

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

// OnStream enqueues the call on s instead of the communicator's own stream.
func OnStream(s Stream) CallOption { return CallOption{what: optStream, stream: s} }

// WithAlgorithm forces an algorithm for one call.
func WithAlgorithm(a detcoll.Algorithm) CallOption { return CallOption{what: optAlg, alg: a} }

// WithAccumulate sets the fp16/bf16 accumulate mode for one call.
func WithAccumulate(a detcoll.Accumulate) CallOption { return CallOption{what: optAcc, acc: a} }

// callConfig is one call's resolved options.
type callConfig struct {
	stream Stream
	alg    detcoll.Algorithm // after the automatic choice
	acc    detcoll.Accumulate
}

// callOptions applies opts over the communicator's defaults; alg is the
// algorithm asked for (Auto included), before the automatic choice.
func (cfg *config) callOptions(own Stream, opts []CallOption) callConfig {
	cc := callConfig{stream: own, alg: cfg.alg, acc: cfg.acc}
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
	return cc
}

// listInputs is the largest W reduced through the pointer-list kernel (the
// own input read in place); above it the own block is copied into the
// workspace and the strided kernel is used.
func (cfg *config) listInputs() int {
	if cfg.th.ListInputs > 0 {
		return min(cfg.th.ListInputs, gpu.MaxListInputs)
	}
	return gpu.MaxListInputs
}
