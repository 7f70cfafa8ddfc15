//go:build cgo

package main

// Exports beyond the NCCL trio: creation from a caller's store, the data
// movement operations (Broadcast, Scatter, Gather, AllToAllv, Send/Recv) and
// Barrier. Thin shims, as in exports.go (whose preamble rules apply).

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"context"
	"time"
	"unsafe"
)

//export detcollCommInitStore
func detcollCommInitStore(comm *C.uintptr_t, nranks C.int, rank C.int, st unsafe.Pointer, prefix *C.char, timeoutMs C.int64_t) C.int {
	return C.int(guarded("detcollCommInitStore", 0, func() error {
		if comm == nil {
			return argError("comm is NULL")
		}
		*comm = 0
		if prefix == nil {
			return argError("prefix is NULL")
		}
		if timeoutMs < 0 {
			return argError("timeoutMs %d is negative", int64(timeoutMs))
		}
		s, err := newCBStore(st)
		if err != nil {
			return err
		}
		c, o, err := initStore(cgetenv, s, C.GoString(prefix), int(nranks), int(rank), time.Duration(timeoutMs)*time.Millisecond)
		if err != nil {
			return err
		}
		*comm = C.uintptr_t(register(c, o))
		return nil
	}))
}

//export detcollHostBroadcast
func detcollHostBroadcast(buf unsafe.Pointer, count C.size_t, dt C.int, root C.int, comm C.uintptr_t) C.int {
	h := uintptr(comm)
	return C.int(guarded("detcollHostBroadcast", h, func() error {
		e, n, err := movementArgs(h, int32(dt), uint64(count), 1)
		if err != nil {
			return err
		}
		b, err := hostArg("buf", buf, n)
		if err != nil {
			return err
		}
		return e.comm.Broadcast(context.Background(), b, int(root))
	}))
}

//export detcollHostScatter
func detcollHostScatter(send, recv unsafe.Pointer, recvcount C.size_t, dt C.int, root C.int, comm C.uintptr_t) C.int {
	h := uintptr(comm)
	return C.int(guarded("detcollHostScatter", h, func() error {
		e, n, err := movementArgs(h, int32(dt), uint64(recvcount), 1)
		if err != nil {
			return err
		}
		var s []byte
		if e.comm.Rank() == int(root) {
			if s, err = hostArg("sendbuff", send, n*e.comm.Size()); err != nil {
				return err
			}
		}
		r, err := hostArg("recvbuff", recv, n)
		if err != nil {
			return err
		}
		return e.comm.Scatter(context.Background(), s, r, int(root))
	}))
}

//export detcollHostGather
func detcollHostGather(send, recv unsafe.Pointer, sendcount C.size_t, dt C.int, root C.int, comm C.uintptr_t) C.int {
	h := uintptr(comm)
	return C.int(guarded("detcollHostGather", h, func() error {
		e, n, err := movementArgs(h, int32(dt), uint64(sendcount), 1)
		if err != nil {
			return err
		}
		s, err := hostArg("sendbuff", send, n)
		if err != nil {
			return err
		}
		var r []byte
		if e.comm.Rank() == int(root) {
			if r, err = hostArg("recvbuff", recv, n*e.comm.Size()); err != nil {
				return err
			}
		}
		return e.comm.Gather(context.Background(), s, r, int(root))
	}))
}

//export detcollBarrier
func detcollBarrier(comm C.uintptr_t) C.int {
	h := uintptr(comm)
	return C.int(guarded("detcollBarrier", h, func() error {
		e, err := lookup(h)
		if err != nil {
			return err
		}
		return e.comm.Barrier(context.Background())
	}))
}

//export detcollHostAllToAllv
func detcollHostAllToAllv(send unsafe.Pointer, sendcounts, sdispls *C.size_t, recv unsafe.Pointer, recvcounts, rdispls *C.size_t, dt C.int, comm C.uintptr_t) C.int {
	h := uintptr(comm)
	return C.int(guarded("detcollHostAllToAllv", h, func() error {
		e, _, err := movementArgs(h, int32(dt), 0, 1)
		if err != nil {
			return err
		}
		sz, _ := elemSize(int32(dt))
		w := e.comm.Size()
		if sendcounts == nil || sdispls == nil || recvcounts == nil || rdispls == nil {
			return argError("sendcounts, sdispls, recvcounts and rdispls must not be NULL")
		}
		sc, sd := unsafe.Slice((*uint64)(unsafe.Pointer(sendcounts)), w), unsafe.Slice((*uint64)(unsafe.Pointer(sdispls)), w)
		rc, rd := unsafe.Slice((*uint64)(unsafe.Pointer(recvcounts)), w), unsafe.Slice((*uint64)(unsafe.Pointer(rdispls)), w)
		sends, err := blocks("send", send, sc, sd, sz)
		if err != nil {
			return err
		}
		recvs, err := blocks("recv", recv, rc, rd, sz)
		if err != nil {
			return err
		}
		return e.comm.AllToAll(context.Background(), sends, recvs)
	}))
}

//export detcollHostSend
func detcollHostSend(buf unsafe.Pointer, count C.size_t, dt C.int, peer C.int, tag C.int, comm C.uintptr_t) C.int {
	return C.int(p2p("detcollHostSend", buf, count, dt, peer, tag, comm, true))
}

//export detcollHostRecv
func detcollHostRecv(buf unsafe.Pointer, count C.size_t, dt C.int, peer C.int, tag C.int, comm C.uintptr_t) C.int {
	return C.int(p2p("detcollHostRecv", buf, count, dt, peer, tag, comm, false))
}

func p2p(name string, buf unsafe.Pointer, count C.size_t, dt C.int, peer C.int, tag C.int, comm C.uintptr_t, send bool) result {
	h := uintptr(comm)
	return guarded(name, h, func() error {
		e, n, err := movementArgs(h, int32(dt), uint64(count), 1)
		if err != nil {
			return err
		}
		if tag < 0 {
			return argError("tag %d is negative", int(tag))
		}
		b, err := hostArg("buf", buf, n)
		if err != nil {
			return err
		}
		if send {
			return e.comm.Send(context.Background(), b, int(peer), uint32(tag))
		}
		return e.comm.Recv(context.Background(), b, int(peer), uint32(tag))
	})
}
