package nccl

import (
	"sync"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/ccl"
	"github.com/detcoll/detcoll/internal/cuda"
)

// NCCLNames are the library candidates; $DETCOLL_NCCL_LIB (NCCLEnv)
// overrides them. RCCL's are internal/rccl's.
var NCCLNames = []string{"libnccl.so.2", "libnccl.so"}

// NCCLEnv names the variable that overrides NCCLNames.
const NCCLEnv = "DETCOLL_NCCL_LIB"

// ErrUnavailable is wrapped by errors meaning "library not usable here".
var ErrUnavailable = ccl.ErrUnavailable

// The types of the shared binding.
type (
	Result   = ccl.Result   // ncclResult_t
	Error    = ccl.Error    // a failed call
	DataType = ccl.DataType // ncclDataType_t
	RedOp    = ccl.RedOp    // ncclRedOp_t
	UniqueID = ccl.UniqueID // ncclUniqueId (128 bytes)
	Version  = ccl.Version  // a decoded ncclGetVersion
)

// ncclResult_t values.
const (
	Success            = ccl.Success
	UnhandledCudaError = ccl.UnhandledCudaError
	SystemError        = ccl.SystemError
	InternalError      = ccl.InternalError
	InvalidArgument    = ccl.InvalidArgument
	InvalidUsage       = ccl.InvalidUsage
	RemoteError        = ccl.RemoteError
	InProgress         = ccl.InProgress
)

// ncclDataType_t values.
const (
	Int8     = ccl.Int8
	Uint8    = ccl.Uint8
	Int32    = ccl.Int32
	Uint32   = ccl.Uint32
	Int64    = ccl.Int64
	Uint64   = ccl.Uint64
	Float16  = ccl.Float16
	Float32  = ccl.Float32
	Float64  = ccl.Float64
	BFloat16 = ccl.BFloat16
)

// Reduction operators.
const (
	Sum  = ccl.Sum
	Prod = ccl.Prod
	Max  = ccl.Max
	Min  = ccl.Min
	Avg  = ccl.Avg
)

// ResultName is the ncclResult_t name of a code.
func ResultName(r Result) string { return ccl.ResultName(r) }

// DecodeVersion decodes NCCL_VERSION_CODE.
func DecodeVersion(code int) Version { return ccl.DecodeVersion(code) }

// DataTypeOf maps a detcoll dtype to NCCL's.
func DataTypeOf(d dtype.DType) (DataType, error) { return ccl.DataTypeOf(d) }

// Lib is one loaded NCCL.
type Lib struct{ l *ccl.Lib }

var (
	defaultOnce sync.Once
	defaultLib  *Lib
	defaultErr  error
)

// Default loads NCCL ($DETCOLL_NCCL_LIB or NCCLNames) once per process.
func Default() (*Lib, error) {
	defaultOnce.Do(func() { defaultLib, defaultErr = Load(NCCLEnv, NCCLNames...) })
	return defaultLib, defaultErr
}

// Available reports why NCCL cannot be used, or nil.
func Available() error { _, err := Default(); return err }

// Load opens a library with NCCL's API: the file named by envVar if set,
// else the first of names that loads. Each call loads anew; keep the *Lib.
func Load(envVar string, names ...string) (*Lib, error) {
	l, err := ccl.Load("nccl", envVar, names...)
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

// Path is the loaded file.
func (l *Lib) Path() string { return l.l.Path() }

// Name is the candidate that loaded, e.g. libnccl.so.2.
func (l *Lib) Name() string { return l.l.Name() }

// IsRCCL reports whether the library looks like RCCL.
func (l *Lib) IsRCCL() bool { return l.l.IsRCCL() }

// Core is the shared binding's *ccl.Lib.
func (l *Lib) Core() *ccl.Lib { return l.core() }

// Version is ncclGetVersion, decoded.
func (l *Lib) Version() (Version, error) { return l.core().Version() }

// GetUniqueID makes the id that rank 0 distributes to every rank.
func (l *Lib) GetUniqueID() (UniqueID, error) { return l.core().GetUniqueID() }

// GroupStart opens a group of calls issued from this goroutine.
func (l *Lib) GroupStart() error { return l.core().GroupStart() }

// GroupEnd closes the group and launches its calls.
func (l *Lib) GroupEnd() error { return l.core().GroupEnd() }

// CommInitRank joins rank (of nranks) to the communicator named by id. It
// blocks until every rank has joined. The device is the one whose context is
// current on the calling thread.
func (l *Lib) CommInitRank(nranks int, id UniqueID, rank int) (*Comm, error) {
	c, err := l.core().CommInitRank(nranks, id, rank)
	if err != nil {
		return nil, err
	}
	return &Comm{c: c, lib: l}, nil
}

// Comm is an ncclComm_t.
type Comm struct {
	c   *ccl.Comm
	lib *Lib
}

// WrapComm gives a communicator of the shared binding (e.g.
// devcomm.Comm.CCL) NCCL's typed face; nil stays nil.
func WrapComm(c *ccl.Comm) *Comm {
	if c == nil {
		return nil
	}
	return &Comm{c: c, lib: &Lib{l: c.Lib()}}
}

func (c *Comm) core() *ccl.Comm {
	if c == nil {
		return nil
	}
	return c.c
}

// Rank and Size as given to CommInitRank.
func (c *Comm) Rank() int { return c.c.Rank() }
func (c *Comm) Size() int { return c.c.Size() }

// Lib is the library the communicator belongs to.
func (c *Comm) Lib() *Lib { return c.lib }

// Destroy frees the communicator after its queued work completes.
func (c *Comm) Destroy() error { return c.core().Destroy() }

// Abort frees the communicator without waiting, cancelling its work.
func (c *Comm) Abort() error { return c.core().Abort() }

// AsyncError is ncclCommGetAsyncError: nil while the communicator is
// healthy, an *Error (InProgress while still initialising) otherwise.
func (c *Comm) AsyncError() error { return c.core().AsyncError() }

// AllReduce reduces count elements from every rank's send into every rank's
// recv (NCCL's own order: not deterministic across algorithms; detcoll uses
// it as the native reference).
func (c *Comm) AllReduce(send, recv cuda.DevicePtr, count int, dt DataType, op RedOp, s cuda.Stream) error {
	return c.core().AllReduce(uint64(send), uint64(recv), count, dt, op, uintptr(s))
}

// ReduceScatter: recv gets recvcount elements, rank r's block of the sum.
func (c *Comm) ReduceScatter(send, recv cuda.DevicePtr, recvcount int, dt DataType, op RedOp, s cuda.Stream) error {
	return c.core().ReduceScatter(uint64(send), uint64(recv), recvcount, dt, op, uintptr(s))
}

// AllGather: every rank's sendcount elements land at rank*sendcount in recv.
func (c *Comm) AllGather(send, recv cuda.DevicePtr, sendcount int, dt DataType, s cuda.Stream) error {
	return c.core().AllGather(uint64(send), uint64(recv), sendcount, dt, uintptr(s))
}

// Broadcast copies root's send into every rank's recv.
func (c *Comm) Broadcast(send, recv cuda.DevicePtr, count int, dt DataType, root int, s cuda.Stream) error {
	return c.core().Broadcast(uint64(send), uint64(recv), count, dt, root, uintptr(s))
}

// Send enqueues count elements to peer.
func (c *Comm) Send(buf cuda.DevicePtr, count int, dt DataType, peer int, s cuda.Stream) error {
	return c.core().Send(uint64(buf), count, dt, peer, uintptr(s))
}

// Recv enqueues a receive of count elements from peer.
func (c *Comm) Recv(buf cuda.DevicePtr, count int, dt DataType, peer int, s cuda.Stream) error {
	return c.core().Recv(uint64(buf), count, dt, peer, uintptr(s))
}
