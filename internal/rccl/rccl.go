// Package rccl is RCCL for the ROCm side of detcoll: it loads librccl.so.1
// (or the file named by $DETCOLL_RCCL_LIB) through the NCCL-API binding
// shared with NCCL (internal/ccl: same entry points, enums and 128-byte
// unique id) and types device buffers and streams as the HIP binding's
// (hip.DevicePtr, hip.Stream). It imports nothing of CUDA.
//
// Communicators are created with the HIP device current on the calling OS
// thread: call CommInitRank inside hip.Device.Do. Everything else is as in
// internal/ccl's contract. RCCL reads the NCCL_* environment variables.
package rccl

import (
	"path/filepath"
	"sync"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/ccl"
	"github.com/detcoll/detcoll/internal/hip"
)

// LibraryEnv names the variable that overrides LibraryNames.
const LibraryEnv = "DETCOLL_RCCL_LIB"

// LibraryNames are the candidates: the soname on the loader path, then
// under $ROCM_PATH/lib, $ROCM_HOME/lib and /opt/rocm/lib.
func LibraryNames() []string {
	names := []string{"librccl.so.1", "librccl.so"}
	for _, r := range hip.RocmRoots() {
		names = append(names, filepath.Join(r, "lib", "librccl.so.1"))
	}
	return names
}

// ErrUnavailable is wrapped by errors meaning "library not usable here".
var ErrUnavailable = ccl.ErrUnavailable

// The types of the shared binding.
type (
	Result   = ccl.Result
	Error    = ccl.Error
	DataType = ccl.DataType
	RedOp    = ccl.RedOp
	UniqueID = ccl.UniqueID
	Version  = ccl.Version
)

// The data types and operators detcoll uses (values shared with NCCL).
const (
	Uint8    = ccl.Uint8
	Float16  = ccl.Float16
	Float32  = ccl.Float32
	Float64  = ccl.Float64
	BFloat16 = ccl.BFloat16
	Sum      = ccl.Sum
)

// DataTypeOf maps a detcoll dtype to RCCL's.
func DataTypeOf(d dtype.DType) (DataType, error) { return ccl.DataTypeOf(d) }

// Lib is one loaded RCCL.
type Lib struct{ l *ccl.Lib }

var (
	defaultOnce sync.Once
	defaultLib  *Lib
	defaultErr  error
)

// Default loads RCCL ($DETCOLL_RCCL_LIB or LibraryNames) once per process.
func Default() (*Lib, error) {
	defaultOnce.Do(func() { defaultLib, defaultErr = Load() })
	return defaultLib, defaultErr
}

// Available reports why RCCL cannot be used, or nil.
func Available() error { _, err := Default(); return err }

// Load opens RCCL anew ($DETCOLL_RCCL_LIB or LibraryNames); keep the *Lib.
func Load() (*Lib, error) {
	l, err := ccl.Load("rccl", LibraryEnv, LibraryNames()...)
	if err != nil {
		return nil, err
	}
	return &Lib{l: l}, nil
}

func (l *Lib) core() *ccl.Lib {
	if l == nil {
		return nil
	}
	return l.l
}

// Core is the shared binding's *ccl.Lib.
func (l *Lib) Core() *ccl.Lib { return l.core() }

// Path is the loaded file.
func (l *Lib) Path() string { return l.l.Path() }

// Version is ncclGetVersion as RCCL reports it, decoded.
func (l *Lib) Version() (Version, error) { return l.core().Version() }

// GetUniqueID makes the id that rank 0 distributes to every rank.
func (l *Lib) GetUniqueID() (UniqueID, error) { return l.core().GetUniqueID() }

// GroupStart opens a group of calls issued from this goroutine.
func (l *Lib) GroupStart() error { return l.core().GroupStart() }

// GroupEnd closes the group and launches its calls.
func (l *Lib) GroupEnd() error { return l.core().GroupEnd() }

// CommInitRank joins rank (of nranks) to the communicator named by id, on
// the HIP device current on the calling thread.
func (l *Lib) CommInitRank(nranks int, id UniqueID, rank int) (*Comm, error) {
	c, err := l.core().CommInitRank(nranks, id, rank)
	if err != nil {
		return nil, err
	}
	return &Comm{c: c}, nil
}

// Comm is an RCCL communicator.
type Comm struct{ c *ccl.Comm }

func (c *Comm) core() *ccl.Comm {
	if c == nil {
		return nil
	}
	return c.c
}

// Rank and Size as given to CommInitRank.
func (c *Comm) Rank() int { return c.c.Rank() }
func (c *Comm) Size() int { return c.c.Size() }

// Destroy frees the communicator after its queued work completes.
func (c *Comm) Destroy() error { return c.core().Destroy() }

// Abort frees the communicator without waiting, cancelling its work.
func (c *Comm) Abort() error { return c.core().Abort() }

// AsyncError is ncclCommGetAsyncError.
func (c *Comm) AsyncError() error { return c.core().AsyncError() }

// AllReduce is RCCL's own AllReduce (the native reference of benchmarks:
// not deterministic across algorithms).
func (c *Comm) AllReduce(send, recv hip.DevicePtr, count int, dt DataType, op RedOp, s hip.Stream) error {
	return c.core().AllReduce(uint64(send), uint64(recv), count, dt, op, uintptr(s))
}

// ReduceScatter is RCCL's own ReduceScatter (native reference).
func (c *Comm) ReduceScatter(send, recv hip.DevicePtr, recvcount int, dt DataType, op RedOp, s hip.Stream) error {
	return c.core().ReduceScatter(uint64(send), uint64(recv), recvcount, dt, op, uintptr(s))
}

// AllGather: every rank's sendcount elements land at rank*sendcount in recv.
func (c *Comm) AllGather(send, recv hip.DevicePtr, sendcount int, dt DataType, s hip.Stream) error {
	return c.core().AllGather(uint64(send), uint64(recv), sendcount, dt, uintptr(s))
}

// Send enqueues count elements to peer.
func (c *Comm) Send(buf hip.DevicePtr, count int, dt DataType, peer int, s hip.Stream) error {
	return c.core().Send(uint64(buf), count, dt, peer, uintptr(s))
}

// Recv enqueues a receive of count elements from peer.
func (c *Comm) Recv(buf hip.DevicePtr, count int, dt DataType, peer int, s hip.Stream) error {
	return c.core().Recv(uint64(buf), count, dt, peer, uintptr(s))
}
