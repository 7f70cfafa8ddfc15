//go:build cgo

package main

// The exported functions: thin shims from C types to the Go layer. The
// preamble may only declare (cgo copies it into the generated header), and
// it must not include detcoll.h's prototypes: cgo writes its own, with
// uintptr_t for detcollComm_t and for device pointers and streams (which Go
// never holds in pointer types), int for the enums and no const: the same
// ABI as the header's on every supported platform.

/*
#include <stddef.h>
#include <stdint.h>
typedef struct { char internal[128]; } detcoll_capi_uid;
*/
import "C"

import (
	"unsafe"
)

func main() {}

//export detcollGetVersion
func detcollGetVersion(version *C.int) C.int {
	return C.int(guarded("detcollGetVersion", 0, func() error {
		if version == nil {
			return argError("version is NULL")
		}
		*version = C.int(headerVersionCode)
		return nil
	}))
}

//export detcollGetUniqueId
func detcollGetUniqueId(uid *C.detcoll_capi_uid) C.int {
	return C.int(guarded("detcollGetUniqueId", 0, func() error {
		if uid == nil {
			return argError("uniqueId is NULL")
		}
		b, err := getUniqueID(cgetenv)
		if err != nil {
			return err
		}
		dst := unsafe.Slice((*byte)(unsafe.Pointer(&uid.internal[0])), uniqueIDBytes)
		copy(dst, b[:])
		return nil
	}))
}

//export detcollCommInitRank
func detcollCommInitRank(comm *C.uintptr_t, nranks C.int, id C.detcoll_capi_uid, rank C.int) C.int {
	return C.int(guarded("detcollCommInitRank", 0, func() error {
		if comm == nil {
			return argError("comm is NULL")
		}
		*comm = 0
		var b [uniqueIDBytes]byte
		copy(b[:], unsafe.Slice((*byte)(unsafe.Pointer(&id.internal[0])), uniqueIDBytes))
		ctx, cancel, _, err := initContext(cgetenv)
		if err != nil {
			return err
		}
		defer cancel()
		c, o, err := initRank(ctx, cgetenv, b, int(nranks), int(rank))
		if err != nil {
			return err
		}
		*comm = C.uintptr_t(register(c, o))
		return nil
	}))
}

//export detcollCommInitFromEnv
func detcollCommInitFromEnv(comm *C.uintptr_t) C.int {
	return C.int(guarded("detcollCommInitFromEnv", 0, func() error {
		if comm == nil {
			return argError("comm is NULL")
		}
		*comm = 0
		ctx, cancel, d, err := initContext(cgetenv)
		if err != nil {
			return err
		}
		defer cancel()
		c, o, err := initFromEnv(ctx, cgetenv, d)
		if err != nil {
			return err
		}
		*comm = C.uintptr_t(register(c, o))
		return nil
	}))
}

//export detcollCommCount
func detcollCommCount(comm C.uintptr_t, count *C.int) C.int {
	h := uintptr(comm)
	return C.int(guarded("detcollCommCount", h, func() error {
		e, err := lookup(h)
		if err != nil {
			return err
		}
		if count == nil {
			return argError("count is NULL")
		}
		*count = C.int(e.comm.Size())
		return nil
	}))
}

//export detcollCommUserRank
func detcollCommUserRank(comm C.uintptr_t, rank *C.int) C.int {
	h := uintptr(comm)
	return C.int(guarded("detcollCommUserRank", h, func() error {
		e, err := lookup(h)
		if err != nil {
			return err
		}
		if rank == nil {
			return argError("rank is NULL")
		}
		*rank = C.int(e.comm.Rank())
		return nil
	}))
}

//export detcollAllReduce
func detcollAllReduce(send, recv C.uintptr_t, count C.size_t, dt C.int, comm C.uintptr_t, stream C.uintptr_t) C.int {
	return C.int(deviceCollective("detcollAllReduce", opAllReduce, uintptr(send), uintptr(recv), uint64(count), int32(dt), uintptr(comm), uintptr(stream)))
}

//export detcollAllGather
func detcollAllGather(send, recv C.uintptr_t, sendcount C.size_t, dt C.int, comm C.uintptr_t, stream C.uintptr_t) C.int {
	return C.int(deviceCollective("detcollAllGather", opAllGather, uintptr(send), uintptr(recv), uint64(sendcount), int32(dt), uintptr(comm), uintptr(stream)))
}

//export detcollReduceScatter
func detcollReduceScatter(send, recv C.uintptr_t, recvcount C.size_t, dt C.int, comm C.uintptr_t, stream C.uintptr_t) C.int {
	return C.int(deviceCollective("detcollReduceScatter", opReduceScatter, uintptr(send), uintptr(recv), uint64(recvcount), int32(dt), uintptr(comm), uintptr(stream)))
}

//export detcollHostAllReduce
func detcollHostAllReduce(send, recv unsafe.Pointer, count C.size_t, dt C.int, comm C.uintptr_t) C.int {
	return C.int(hostCollective("detcollHostAllReduce", opAllReduce, send, recv, uint64(count), int32(dt), uintptr(comm)))
}

//export detcollHostAllGather
func detcollHostAllGather(send, recv unsafe.Pointer, sendcount C.size_t, dt C.int, comm C.uintptr_t) C.int {
	return C.int(hostCollective("detcollHostAllGather", opAllGather, send, recv, uint64(sendcount), int32(dt), uintptr(comm)))
}

//export detcollHostReduceScatter
func detcollHostReduceScatter(send, recv unsafe.Pointer, recvcount C.size_t, dt C.int, comm C.uintptr_t) C.int {
	return C.int(hostCollective("detcollHostReduceScatter", opReduceScatter, send, recv, uint64(recvcount), int32(dt), uintptr(comm)))
}

//export detcollCommDestroy
func detcollCommDestroy(comm C.uintptr_t) C.int {
	return C.int(destroyHandle("detcollCommDestroy", uintptr(comm), false))
}

//export detcollCommAbort
func detcollCommAbort(comm C.uintptr_t) C.int {
	return C.int(destroyHandle("detcollCommAbort", uintptr(comm), true))
}

//export detcollGetErrorString
func detcollGetErrorString(r C.int) *C.char {
	return resultString(result(r))
}

//export detcollGetLastError
func detcollGetLastError(comm C.uintptr_t) (msg *C.char) {
	defer func() {
		if recover() != nil {
			msg = threadMessage(slotThread)
		}
	}()
	return lastError(uintptr(comm))
}
