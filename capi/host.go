//go:build cgo

package main

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"unsafe"

	"github.com/detcoll/detcoll"
)

// op is a collective of the C API.
type op int

const (
	opAllReduce op = iota
	opAllGather
	opReduceScatter
)

func (o op) String() string {
	return [...]string{"AllReduce", "AllGather", "ReduceScatter"}[o]
}

// dtypeInfo describes a detcollDataType_t.
type dtypeInfo struct {
	name string
	size int
	dt   detcoll.DType // detcoll.Byte for the types detcoll only moves
}

// dtypes is indexed by detcollDataType_t (NCCL's numbering).
var dtypes = [...]dtypeInfo{
	0:  {"detcollInt8", 1, detcoll.Byte},
	1:  {"detcollUint8", 1, detcoll.Byte},
	2:  {"detcollInt32", 4, detcoll.Byte},
	3:  {"detcollUint32", 4, detcoll.Byte},
	4:  {"detcollInt64", 8, detcoll.Byte},
	5:  {"detcollUint64", 8, detcoll.Byte},
	6:  {"detcollFloat16", 2, detcoll.FP16},
	7:  {"detcollFloat32", 4, detcoll.FP32},
	8:  {"detcollFloat64", 8, detcoll.FP64},
	9:  {"detcollBfloat16", 2, detcoll.BF16},
	10: {"detcollFloat8e4m3", 1, detcoll.Byte},
	11: {"detcollFloat8e5m2", 1, detcoll.Byte},
}

// request is a collective call, checked and normalised: count elements of
// dt (for AllGather of a type detcoll only moves, dt is detcoll.Byte and
// count is in bytes).
type request struct {
	op        op
	dt        detcoll.DType
	count     int // the C count argument, normalised as above
	sendBytes int
	recvBytes int
}

// check validates a call's arguments for a communicator of w ranks; haveSend
// and haveRecv say whether the buffers are non-NULL.
func check(o op, haveSend, haveRecv bool, count uint64, dtc int32, w int) (request, error) {
	if dtc < 0 || int(dtc) >= len(dtypes) {
		return request{}, argError("datatype %d is not a detcollDataType_t", dtc)
	}
	info := dtypes[dtc]
	r := request{op: o, dt: info.dt}
	if o != opAllGather && !info.dt.Valid() {
		return request{}, coded(rcUnsupported, "%s: detcoll reduces only detcollFloat16, detcollBfloat16, detcollFloat32 and detcollFloat64, not %s (integer and fp8 sums are not part of the contract)", o, info.name)
	}
	const maxBytes = math.MaxInt / 2
	if w < 1 || count > uint64(maxBytes)/uint64(info.size)/uint64(w) {
		return request{}, argError("count %d of %s overflows (times %d ranks)", count, info.name, w)
	}
	n := int(count) * info.size // bytes of one block
	switch o {
	case opAllReduce:
		r.sendBytes, r.recvBytes = n, n
	case opAllGather:
		r.sendBytes, r.recvBytes = n, w*n
	case opReduceScatter:
		r.sendBytes, r.recvBytes = w*n, n
	}
	r.count = int(count)
	if info.dt == detcoll.Byte {
		r.count = n
	}
	if !haveSend && r.sendBytes > 0 {
		return request{}, argError("sendbuff is NULL (count %d)", count)
	}
	if !haveRecv && r.recvBytes > 0 {
		return request{}, argError("recvbuff is NULL (count %d)", count)
	}
	return r, nil
}

// probe reads the first and last byte of a host buffer, turning a fault
// (an unmapped or device pointer) into an argument error.
func probe(what string, p unsafe.Pointer, n int) (err error) {
	if n == 0 {
		return nil
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = argError("%s %p (%d bytes) is not readable host memory (a device pointer? use the non-Host call): %v", what, p, n, r)
		}
	}()
	b := unsafe.Slice((*byte)(p), n)
	sink(b[0], b[n-1])
	return nil
}

//go:noinline
func sink(a, b byte) {}

// hostBytes views n bytes of C memory at p, for one call.
func hostBytes(p unsafe.Pointer, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

// hostCollective is detcollHost{AllReduce,AllGather,ReduceScatter}.
func hostCollective(name string, o op, send, recv unsafe.Pointer, count uint64, dtc int32, h uintptr) result {
	return guarded(name, h, func() error {
		e, err := lookup(h)
		if err != nil {
			return err
		}
		r, err := check(o, send != nil, recv != nil, count, dtc, e.comm.Size())
		if err != nil {
			return err
		}
		if err := probe("sendbuff", send, r.sendBytes); err != nil {
			return err
		}
		if err := probe("recvbuff", recv, r.recvBytes); err != nil {
			return err
		}
		s, d := hostBytes(send, r.sendBytes), hostBytes(recv, r.recvBytes)
		ctx := context.Background()
		switch o {
		case opAllReduce:
			return e.comm.AllReduce(ctx, s, d, r.dt)
		case opAllGather:
			return e.comm.AllGather(ctx, s, d, r.dt)
		case opReduceScatter:
			return e.comm.ReduceScatter(ctx, s, d, r.dt)
		}
		return fmt.Errorf("unknown operation %d", o)
	})
}
