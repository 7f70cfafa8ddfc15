package ccl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/binding"
)

// ErrUnavailable is wrapped by errors meaning "library not usable here".
var ErrUnavailable = errors.New("nccl: unavailable")

// Result is an ncclResult_t.
type Result int32

// Its values (identical in RCCL) and the Go constants detcoll uses (Success,
// InvalidArgument, …) are the code lines of symbols.txt (symbols_gen.go).

// ResultName is the ncclResult_t name of a code (the table in
// symbols.txt), or "ncclResult(<n>)".
func ResultName(r Result) string { return binding.Name(resultNames, resultFallback, r) }

// Error is a failed call.
type Error struct {
	Code    Result
	Name    string
	Message string // ncclGetErrorString
	Last    string // ncclGetLastError, when available and non-empty
	Call    string
	Vendor  string // "nccl" or "rccl": the library that failed ("" reads as nccl)
}

func (e *Error) Error() string {
	v := e.Vendor
	if v == "" {
		v = "nccl"
	}
	s := v + ": " + e.Call + ": " + e.Name
	if e.Message != "" {
		s += " (" + e.Message + ")"
	}
	if e.Last != "" {
		s += ": " + e.Last
	}
	return s
}

// Is matches *Error values by code.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// Unwrap makes load failures match ErrUnavailable.
func (e *Error) Unwrap() error {
	if e.Code == resultUnavailable {
		return ErrUnavailable
	}
	return nil
}

// DataType is an ncclDataType_t.
type DataType int32

// ncclDataType_t values shared by NCCL and RCCL.
const (
	Int8     DataType = 0
	Uint8    DataType = 1
	Int32    DataType = 2
	Uint32   DataType = 3
	Int64    DataType = 4
	Uint64   DataType = 5
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	BFloat16 DataType = 9
)

// Size is the element size in bytes.
func (d DataType) Size() int {
	switch d {
	case Int8, Uint8:
		return 1
	case Float16, BFloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

// DataTypeOf maps a detcoll dtype to NCCL's.
func DataTypeOf(d dtype.DType) (DataType, error) {
	switch d {
	case dtype.BF16:
		return BFloat16, nil
	case dtype.FP16:
		return Float16, nil
	case dtype.FP32:
		return Float32, nil
	case dtype.FP64:
		return Float64, nil
	}
	return 0, fmt.Errorf("nccl: no NCCL data type for %v", d)
}

// RedOp is an ncclRedOp_t.
type RedOp int32

// Reduction operators.
const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4
)

// UniqueID is an ncclUniqueId (NCCL_UNIQUE_ID_BYTES = 128).
type UniqueID [128]byte

// Version is a decoded ncclGetVersion code.
type Version struct {
	Major, Minor, Patch int
	Code                int
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// DecodeVersion decodes NCCL_VERSION_CODE: X*10000+Y*100+Z since 2.9,
// X*1000+Y*100+Z before.
func DecodeVersion(code int) Version {
	v := Version{Code: code}
	if code >= 20900 {
		v.Major, v.Minor, v.Patch = code/10000, code%10000/100, code%100
	} else {
		v.Major, v.Minor, v.Patch = code/1000, code%1000/100, code%100
	}
	return v
}

// apiNames is the symbol list, never opened: the names errors report, also
// when no library is loaded.
var apiNames = newSyms()

// Lib is one loaded NCCL or RCCL.
type Lib struct {
	name   string
	path   string
	vendor string
	syms   *binding.Table[sym] // nil until loaded
}

// Load opens a library with NCCL's API: the file named by envVar if set,
// else the first of names that loads; vendor ("nccl" or "rccl") names it in
// messages. Each call loads anew (the loader shares one copy per file);
// keep the *Lib.
func Load(vendor, envVar string, names ...string) (*Lib, error) {
	if vendor == "" {
		vendor = "nccl"
	}
	return load(vendor, envVar, names)
}

// Vendor is "nccl" or "rccl", as given to Load.
func (l *Lib) Vendor() string { return l.vendor }

// HasSymbol reports whether the library exports the entry point named api
// (e.g. "ncclSend"); optional ones may be missing from old versions.
func (l *Lib) HasSymbol(api string) bool {
	if l == nil || l.syms == nil {
		return false
	}
	s, ok := l.syms.Lookup(api)
	return ok && l.syms.Have(s)
}

// Path is the loaded file.
func (l *Lib) Path() string { return l.path }

// Name is the candidate that loaded, e.g. libnccl.so.2.
func (l *Lib) Name() string { return l.name }

func (l *Lib) vendorName() string {
	if l == nil {
		return ""
	}
	return l.vendor
}

// IsRCCL reports whether the library is RCCL: loaded as such, or its file
// name says so.
func (l *Lib) IsRCCL() bool {
	return l.vendor == "rccl" || strings.Contains(l.path, "rccl") || strings.Contains(l.name, "rccl")
}

func (l *Lib) errorOf(s sym, r Result, comm *Comm) error {
	if r == Success {
		return nil
	}
	e := &Error{Code: r, Name: ResultName(r), Call: apiNames.API(s), Vendor: l.vendor}
	if r >= 0 {
		e.Message = l.errorString(r)
		e.Last = l.lastError(comm)
	}
	return e
}

func (l *Lib) call(s sym, comm *Comm, f func() Result) error {
	if l == nil {
		return &Error{Code: resultUnavailable, Name: ResultName(resultUnavailable), Call: apiNames.API(s), Message: "no library"}
	}
	if !l.syms.Have(s) {
		return &Error{Code: resultNoSymbol, Name: ResultName(resultNoSymbol), Call: apiNames.API(s),
			Message: l.path + " does not export it", Vendor: l.vendor}
	}
	return l.errorOf(s, f(), comm)
}

// Version is ncclGetVersion, decoded.
func (l *Lib) Version() (Version, error) {
	var c int32
	err := l.call(ncclGetVersion, nil, func() Result { return l.rGetVersion(&c) })
	return DecodeVersion(int(c)), err
}

// GetUniqueID makes the id that rank 0 distributes to every rank.
func (l *Lib) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	err := l.call(ncclGetUniqueId, nil, func() Result { return l.rGetUniqueID(&id) })
	return id, err
}

// Comm is an ncclComm_t.
type Comm struct {
	lib    *Lib
	h      uintptr
	nranks int
	rank   int
}

// CommInitRank joins rank (of nranks) to the communicator named by id. It
// blocks until every rank has joined. The device is the one current on the
// calling thread.
func (l *Lib) CommInitRank(nranks int, id UniqueID, rank int) (*Comm, error) {
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, &Error{Code: InvalidArgument, Name: ResultName(InvalidArgument), Call: "ncclCommInitRank",
			Message: fmt.Sprintf("rank %d of %d", rank, nranks), Vendor: l.vendorName()}
	}
	c := &Comm{lib: l, nranks: nranks, rank: rank}
	err := l.call(ncclCommInitRank, nil, func() Result { return l.rCommInitRank(&c.h, nranks, &id, rank) })
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Rank and Size as given to CommInitRank.
func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.nranks }

// Lib is the library the communicator belongs to.
func (c *Comm) Lib() *Lib { return c.lib }

// Destroy frees the communicator after its queued work completes.
func (c *Comm) Destroy() error {
	if c == nil || c.h == 0 {
		return nil
	}
	err := c.lib.call(ncclCommDestroy, nil, func() Result { return c.lib.rComm(ncclCommDestroy, c.h) })
	c.h = 0
	return err
}

// Abort frees the communicator without waiting, cancelling its work.
func (c *Comm) Abort() error {
	if c == nil || c.h == 0 {
		return nil
	}
	err := c.lib.call(ncclCommAbort, nil, func() Result { return c.lib.rComm(ncclCommAbort, c.h) })
	c.h = 0
	return err
}

// AsyncError is ncclCommGetAsyncError: nil while the communicator is
// healthy, an *Error (InProgress while still initialising) otherwise.
func (c *Comm) AsyncError() error {
	if c == nil || c.h == 0 {
		return &Error{Code: InvalidUsage, Name: ResultName(InvalidUsage), Call: "ncclCommGetAsyncError", Message: "communicator destroyed"}
	}
	var r Result
	if err := c.lib.call(ncclCommGetAsyncError, c, func() Result { return c.lib.rCommGetAsyncError(c.h, &r) }); err != nil {
		return err
	}
	return c.lib.errorOf(ncclCommGetAsyncError, r, c)
}

func (c *Comm) check(call string, count int, dt DataType) error {
	if c == nil || c.h == 0 {
		return &Error{Code: InvalidUsage, Name: ResultName(InvalidUsage), Call: call, Message: "communicator destroyed"}
	}
	if count < 0 || dt.Size() == 0 {
		return &Error{Code: InvalidArgument, Name: ResultName(InvalidArgument), Call: call,
			Message: fmt.Sprintf("count %d, data type %d", count, dt)}
	}
	return nil
}

// AllReduce reduces count elements from every rank's send into every rank's
// recv (the library's own order: not deterministic across algorithms;
// detcoll uses it as the native reference). Buffers are device addresses,
// s the cudaStream_t or hipStream_t (0: the legacy default stream).
func (c *Comm) AllReduce(send, recv uint64, count int, dt DataType, op RedOp, s uintptr) error {
	if err := c.check("ncclAllReduce", count, dt); err != nil {
		return err
	}
	return c.lib.call(ncclAllReduce, c, func() Result { return c.lib.rReduceLike(ncclAllReduce, send, recv, count, dt, op, c.h, s) })
}

// ReduceScatter: recv gets recvcount elements, rank r's block of the sum.
func (c *Comm) ReduceScatter(send, recv uint64, recvcount int, dt DataType, op RedOp, s uintptr) error {
	if err := c.check("ncclReduceScatter", recvcount, dt); err != nil {
		return err
	}
	return c.lib.call(ncclReduceScatter, c, func() Result {
		return c.lib.rReduceLike(ncclReduceScatter, send, recv, recvcount, dt, op, c.h, s)
	})
}

// AllGather: every rank's sendcount elements land at rank*sendcount in recv.
func (c *Comm) AllGather(send, recv uint64, sendcount int, dt DataType, s uintptr) error {
	if err := c.check("ncclAllGather", sendcount, dt); err != nil {
		return err
	}
	return c.lib.call(ncclAllGather, c, func() Result { return c.lib.rAllGather(send, recv, sendcount, dt, c.h, s) })
}

// Broadcast copies root's send into every rank's recv.
func (c *Comm) Broadcast(send, recv uint64, count int, dt DataType, root int, s uintptr) error {
	if err := c.check("ncclBroadcast", count, dt); err != nil {
		return err
	}
	if root < 0 || root >= c.nranks {
		return &Error{Code: InvalidArgument, Name: ResultName(InvalidArgument), Call: "ncclBroadcast", Message: fmt.Sprintf("root %d of %d", root, c.nranks)}
	}
	return c.lib.call(ncclBroadcast, c, func() Result { return c.lib.rBroadcast(send, recv, count, dt, root, c.h, s) })
}

// Send enqueues count elements to peer.
func (c *Comm) Send(buf uint64, count int, dt DataType, peer int, s uintptr) error {
	if err := c.check("ncclSend", count, dt); err != nil {
		return err
	}
	if peer < 0 || peer >= c.nranks {
		return &Error{Code: InvalidArgument, Name: ResultName(InvalidArgument), Call: "ncclSend", Message: fmt.Sprintf("peer %d of %d", peer, c.nranks)}
	}
	return c.lib.call(ncclSend, c, func() Result { return c.lib.rP2P(ncclSend, buf, count, dt, peer, c.h, s) })
}

// Recv enqueues a receive of count elements from peer.
func (c *Comm) Recv(buf uint64, count int, dt DataType, peer int, s uintptr) error {
	if err := c.check("ncclRecv", count, dt); err != nil {
		return err
	}
	if peer < 0 || peer >= c.nranks {
		return &Error{Code: InvalidArgument, Name: ResultName(InvalidArgument), Call: "ncclRecv", Message: fmt.Sprintf("peer %d of %d", peer, c.nranks)}
	}
	return c.lib.call(ncclRecv, c, func() Result { return c.lib.rP2P(ncclRecv, buf, count, dt, peer, c.h, s) })
}

// GroupStart opens a group of calls issued from this goroutine.
func (l *Lib) GroupStart() error {
	return l.call(ncclGroupStart, nil, func() Result { return l.rVoid(ncclGroupStart) })
}

// GroupEnd closes the group and launches its calls.
func (l *Lib) GroupEnd() error {
	return l.call(ncclGroupEnd, nil, func() Result { return l.rVoid(ncclGroupEnd) })
}
