package ccl

import "github.com/detcoll/detcoll/internal/binding/gpurt"

// TypedLib is a loaded library with its runtime's types: device buffers are
// gpurt.DevicePtr (cuda.DevicePtr and hip.DevicePtr are that type) and
// streams are the runtime binding's (gpurt.Stream[R]: cuda.Stream,
// hip.Stream), so internal/nccl's Lib is TypedLib[cuda.Runtime] and
// internal/rccl's TypedLib[hip.Runtime], the one typed face written once.
// A nil *TypedLib fails its calls as a nil *Lib does.
type TypedLib[R gpurt.Runtime] struct{ l *Lib }

// TypedComm is a communicator of a TypedLib (see there).
type TypedComm[R gpurt.Runtime] struct {
	c   *Comm
	lib *TypedLib[R]
}

// Typed gives l the types of runtime R; nil stays nil.
func Typed[R gpurt.Runtime](l *Lib) *TypedLib[R] {
	if l == nil {
		return nil
	}
	return &TypedLib[R]{l: l}
}

// LoadTyped is Load with runtime R's types.
func LoadTyped[R gpurt.Runtime](vendor, envVar string, names ...string) (*TypedLib[R], error) {
	l, err := Load(vendor, envVar, names...)
	if err != nil {
		return nil, err
	}
	return Typed[R](l), nil
}

// WrapComm gives a communicator of the shared binding (e.g.
// devcomm.Comm.CCL) the typed face of runtime R; nil stays nil.
func WrapComm[R gpurt.Runtime](c *Comm) *TypedComm[R] {
	if c == nil {
		return nil
	}
	return &TypedComm[R]{c: c, lib: Typed[R](c.Lib())}
}

// Core is the shared binding's *Lib.
func (l *TypedLib[R]) Core() *Lib {
	if l == nil {
		return nil
	}
	return l.l
}

// Path is the loaded file.
func (l *TypedLib[R]) Path() string { return l.l.Path() }

// Name is the candidate that loaded, e.g. libnccl.so.2.
func (l *TypedLib[R]) Name() string { return l.l.Name() }

// IsRCCL reports whether the library looks like RCCL.
func (l *TypedLib[R]) IsRCCL() bool { return l.l.IsRCCL() }

// Version is ncclGetVersion, decoded.
func (l *TypedLib[R]) Version() (Version, error) { return l.Core().Version() }

// GetUniqueID makes the id that rank 0 distributes to every rank.
func (l *TypedLib[R]) GetUniqueID() (UniqueID, error) { return l.Core().GetUniqueID() }

// GroupStart opens a group of calls issued from this goroutine.
func (l *TypedLib[R]) GroupStart() error { return l.Core().GroupStart() }

// GroupEnd closes the group and launches its calls.
func (l *TypedLib[R]) GroupEnd() error { return l.Core().GroupEnd() }

// CommInitRank joins rank (of nranks) to the communicator named by id. It
// blocks until every rank has joined. The device is the one current on the
// calling thread (CUDA's context, HIP's device: call it inside the
// binding's Do).
func (l *TypedLib[R]) CommInitRank(nranks int, id UniqueID, rank int) (*TypedComm[R], error) {
	c, err := l.Core().CommInitRank(nranks, id, rank)
	if err != nil {
		return nil, err
	}
	return &TypedComm[R]{c: c, lib: l}, nil
}

// Core is the shared binding's *Comm.
func (c *TypedComm[R]) Core() *Comm {
	if c == nil {
		return nil
	}
	return c.c
}

// Rank and Size as given to CommInitRank.
func (c *TypedComm[R]) Rank() int { return c.c.Rank() }
func (c *TypedComm[R]) Size() int { return c.c.Size() }

// Lib is the library the communicator belongs to.
func (c *TypedComm[R]) Lib() *TypedLib[R] { return c.lib }

// Destroy frees the communicator after its queued work completes.
func (c *TypedComm[R]) Destroy() error { return c.Core().Destroy() }

// Abort frees the communicator without waiting, cancelling its work.
func (c *TypedComm[R]) Abort() error { return c.Core().Abort() }

// AsyncError is ncclCommGetAsyncError: nil while the communicator is
// healthy, an *Error (InProgress while still initialising) otherwise.
func (c *TypedComm[R]) AsyncError() error { return c.Core().AsyncError() }

// AllReduce reduces count elements from every rank's send into every rank's
// recv (the library's own order: not deterministic across algorithms;
// detcoll uses it as the native reference).
func (c *TypedComm[R]) AllReduce(send, recv gpurt.DevicePtr, count int, dt DataType, op RedOp, s gpurt.Stream[R]) error {
	return c.Core().AllReduce(uint64(send), uint64(recv), count, dt, op, uintptr(s))
}

// ReduceScatter: recv gets recvcount elements, rank r's block of the sum.
func (c *TypedComm[R]) ReduceScatter(send, recv gpurt.DevicePtr, recvcount int, dt DataType, op RedOp, s gpurt.Stream[R]) error {
	return c.Core().ReduceScatter(uint64(send), uint64(recv), recvcount, dt, op, uintptr(s))
}

// AllGather: every rank's sendcount elements land at rank*sendcount in recv.
func (c *TypedComm[R]) AllGather(send, recv gpurt.DevicePtr, sendcount int, dt DataType, s gpurt.Stream[R]) error {
	return c.Core().AllGather(uint64(send), uint64(recv), sendcount, dt, uintptr(s))
}

// Broadcast copies root's send into every rank's recv.
func (c *TypedComm[R]) Broadcast(send, recv gpurt.DevicePtr, count int, dt DataType, root int, s gpurt.Stream[R]) error {
	return c.Core().Broadcast(uint64(send), uint64(recv), count, dt, root, uintptr(s))
}

// Send enqueues count elements to peer.
func (c *TypedComm[R]) Send(buf gpurt.DevicePtr, count int, dt DataType, peer int, s gpurt.Stream[R]) error {
	return c.Core().Send(uint64(buf), count, dt, peer, uintptr(s))
}

// Recv enqueues a receive of count elements from peer.
func (c *TypedComm[R]) Recv(buf gpurt.DevicePtr, count int, dt DataType, peer int, s gpurt.Stream[R]) error {
	return c.Core().Recv(uint64(buf), count, dt, peer, uintptr(s))
}
