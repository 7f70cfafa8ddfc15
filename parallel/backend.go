package parallel

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/detcoll/detcoll"
)

// Backend names an implementation of the layers' communication, as the
// seed's configuration does. The ag_rs backends are the rank-ordered
// all-gather / scatter / reduce-scatter pattern of context-parallel
// attention on CUDA (NCCL) or ROCm (RCCL); local_debug is a single-rank
// path without communication.
type Backend string

// The backend names.
const (
	CUDAAgRs   Backend = "cuda_ag_rs"
	RCCLAgRs   Backend = "rccl_ag_rs"
	LocalDebug Backend = "local_debug"
)

// Backends lists the known names.
var Backends = []Backend{CUDAAgRs, RCCLAgRs, LocalDebug}

// ParseBackend accepts cuda_ag_rs, rccl_ag_rs and local_debug
// (case-insensitive, '-' for '_').
func ParseBackend(s string) (Backend, error) {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	for _, b := range Backends {
		if n == string(b) {
			return b, nil
		}
	}
	return "", fmt.Errorf("%w: unknown backend %q (want cuda_ag_rs, rccl_ag_rs or local_debug)", ErrInvalidArgument, s)
}

// Valid reports whether b is one of Backends.
func (b Backend) Valid() bool {
	for _, k := range Backends {
		if b == k {
			return true
		}
	}
	return false
}

func (b Backend) String() string { return string(b) }

// NeedsGPU reports whether the backend's default device is a GPU
// (cuda_ag_rs, rccl_ag_rs).
func (b Backend) NeedsGPU() bool { return b == CUDAAgRs || b == RCCLAgRs }

// SingleRank reports whether the backend runs one rank only (local_debug).
func (b Backend) SingleRank() bool { return b == LocalDebug }

// MarshalText and UnmarshalText make Backend usable in flags and JSON.
func (b Backend) MarshalText() ([]byte, error) {
	if !b.Valid() {
		return nil, fmt.Errorf("%w: cannot marshal backend %q", ErrInvalidArgument, string(b))
	}
	return []byte(b), nil
}

func (b *Backend) UnmarshalText(t []byte) error {
	v, err := ParseBackend(string(t))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Device selects where a layer's arithmetic and buffers live.
type Device uint8

const (
	// DeviceAuto (the zero value): cuda_ag_rs and rccl_ag_rs on the GPU
	// backend registered for them (an error wrapping ErrNoGPUBackend when
	// there is none), everything else on the host.
	DeviceAuto Device = iota
	// DeviceHost runs the host reference: Go arithmetic on *Matrix tensors,
	// communication through detcoll.Comm. Every backend name runs here; the
	// ag_rs names run the same rank-ordered communication pattern.
	DeviceHost
	// DeviceGPU runs on the GPU backend registered for the name.
	DeviceGPU
)

func (d Device) String() string {
	switch d {
	case DeviceAuto:
		return "auto"
	case DeviceHost:
		return "host"
	case DeviceGPU:
		return "gpu"
	}
	return fmt.Sprintf("device(%d)", uint8(d))
}

// FFN is the gated (SwiGLU) feed-forward layer's forward and backward with
// its tensor-, sequence- and context-parallel communication, on one rank.
// NewFFN returns one; see the package doc for the contract.
type FFN interface {
	// Forward returns y for this rank's tokens x and the state Backward
	// needs.
	Forward(ctx context.Context, x Tensor, w FFNWeights) (y Tensor, saved any, err error)
	// Backward returns the input gradient for this rank's tokens and the
	// gradients of this rank's weight shards over every token.
	Backward(ctx context.Context, dy Tensor, w FFNWeights, saved any) (*FFNGrads, error)
}

// Attention is context-parallel causal attention (the ag_rs pattern) on one
// rank. NewAttention returns one; see the package doc for the contract.
type Attention interface {
	// Forward takes this rank's shard of Q, K, V (tokens × heads·headDim)
	// and position ids in the zigzag layout and returns its shard of the
	// output and the log-sum-exp.
	Forward(ctx context.Context, q, k, v Tensor, pos []int32) (*AttnOutput, error)
	// Backward takes this rank's shard of the output gradient and returns
	// its shards of dQ, dK and dV.
	Backward(ctx context.Context, dout Tensor, fwd *AttnOutput) (*AttnGrads, error)
}

// GPUBackend is what a GPU package registers (RegisterGPUBackend) to run
// the layers on device memory. It receives the host communicators (for
// validation and to derive its device communicators from) and the same
// configurations as the host path; the tensors its layers take and return
// are its own device Tensors. A GPU backend must keep the contract of the
// package doc (canonical K chunks, the pairwise tree, rank-ordered
// collectives); to equal the host reference bit for bit it must also use
// the within-chunk order and the formulas documented there.
type GPUBackend interface {
	NewFFN(m *Mesh, cfg FFNConfig) (FFN, error)
	NewAttention(cp *detcoll.Comm, cfg AttentionConfig) (Attention, error)
}

var (
	gpuMu       sync.RWMutex
	gpuBackends = map[Backend]GPUBackend{}
)

// RegisterGPUBackend makes g the GPU implementation of backend name. It is
// meant for the init function of a GPU package; registering a name twice,
// an unknown name or a nil backend is an error.
func RegisterGPUBackend(name Backend, g GPUBackend) error {
	if !name.Valid() {
		return fmt.Errorf("%w: RegisterGPUBackend: unknown backend %q", ErrInvalidArgument, string(name))
	}
	if g == nil {
		return fmt.Errorf("%w: RegisterGPUBackend(%s): nil backend", ErrInvalidArgument, name)
	}
	gpuMu.Lock()
	defer gpuMu.Unlock()
	if _, ok := gpuBackends[name]; ok {
		return fmt.Errorf("%w: RegisterGPUBackend: %s is already registered", ErrInvalidArgument, name)
	}
	gpuBackends[name] = g
	return nil
}

// LookupGPUBackend returns the GPU backend registered for name, or an error
// wrapping ErrNoGPUBackend.
func LookupGPUBackend(name Backend) (GPUBackend, error) {
	gpuMu.RLock()
	g, ok := gpuBackends[name]
	gpuMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: backend %q runs on a GPU, but no GPU backend is registered for it "+
			"(a GPU package registers one with parallel.RegisterGPUBackend; to run the same communication "+
			"pattern on the host with Go arithmetic, set Device: parallel.DeviceHost)", ErrNoGPUBackend, string(name))
	}
	return g, nil
}

// resolve picks the implementation for (name, device): the host (nil, nil)
// or a registered GPU backend. name "" means no named backend (host).
func resolve(name Backend, d Device) (GPUBackend, error) {
	if name != "" && !name.Valid() {
		return nil, fmt.Errorf("%w: unknown backend %q (want cuda_ag_rs, rccl_ag_rs or local_debug)", ErrInvalidArgument, string(name))
	}
	switch d {
	case DeviceHost:
		return nil, nil
	case DeviceAuto:
		if !name.NeedsGPU() {
			return nil, nil
		}
	case DeviceGPU:
		if name == "" {
			return nil, fmt.Errorf("%w: DeviceGPU needs a backend name (cuda_ag_rs, rccl_ag_rs or local_debug)", ErrInvalidArgument)
		}
	default:
		return nil, fmt.Errorf("%w: unknown device %v", ErrInvalidArgument, d)
	}
	return LookupGPUBackend(name)
}
