//go:build cgo

package ccl

/*
#include <stdint.h>
#include <stddef.h>
#include <string.h>

typedef int ncclResult_t;
typedef void* ncclComm_t;
typedef void* cudaStream_t;
typedef struct { char internal[128]; } ncclUniqueId;
#define F(T) ((T)(fn))

static int w_pint(uintptr_t fn, int* v) { return F(ncclResult_t(*)(int*))(v); }
static int w_uid(uintptr_t fn, unsigned char* out) {
	ncclUniqueId id;
	ncclResult_t r = F(ncclResult_t(*)(ncclUniqueId*))(&id);
	memcpy(out, &id, 128);
	return r;
}
static int w_init(uintptr_t fn, uintptr_t* comm, int n, const unsigned char* idb, int rank) {
	ncclUniqueId id;
	memcpy(&id, idb, 128);
	return F(ncclResult_t(*)(ncclComm_t*, int, ncclUniqueId, int))((ncclComm_t*)comm, n, id, rank);
}
static int w_comm(uintptr_t fn, uintptr_t c) { return F(ncclResult_t(*)(ncclComm_t))((ncclComm_t)c); }
static int w_async(uintptr_t fn, uintptr_t c, int* r) { return F(ncclResult_t(*)(ncclComm_t, ncclResult_t*))((ncclComm_t)c, r); }
static const char* w_errstr(uintptr_t fn, int r) { return F(const char*(*)(ncclResult_t))(r); }
static const char* w_last(uintptr_t fn, uintptr_t c) { return F(const char*(*)(ncclComm_t))((ncclComm_t)c); }
static int w_reduce(uintptr_t fn, unsigned long long s, unsigned long long r, size_t n, int dt, int op, uintptr_t c, uintptr_t st) {
	return F(ncclResult_t(*)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t))(
		(const void*)(uintptr_t)s, (void*)(uintptr_t)r, n, dt, op, (ncclComm_t)c, (cudaStream_t)st);
}
static int w_gather(uintptr_t fn, unsigned long long s, unsigned long long r, size_t n, int dt, uintptr_t c, uintptr_t st) {
	return F(ncclResult_t(*)(const void*, void*, size_t, int, ncclComm_t, cudaStream_t))(
		(const void*)(uintptr_t)s, (void*)(uintptr_t)r, n, dt, (ncclComm_t)c, (cudaStream_t)st);
}
static int w_bcast(uintptr_t fn, unsigned long long s, unsigned long long r, size_t n, int dt, int root, uintptr_t c, uintptr_t st) {
	return F(ncclResult_t(*)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t))(
		(const void*)(uintptr_t)s, (void*)(uintptr_t)r, n, dt, root, (ncclComm_t)c, (cudaStream_t)st);
}
// ncclSend(const void*, ...) and ncclRecv(void*, ...) have the same shape.
static int w_p2p(uintptr_t fn, unsigned long long b, size_t n, int dt, int peer, uintptr_t c, uintptr_t st) {
	return F(ncclResult_t(*)(void*, size_t, int, int, ncclComm_t, cudaStream_t))(
		(void*)(uintptr_t)b, n, dt, peer, (ncclComm_t)c, (cudaStream_t)st);
}
static int w_void(uintptr_t fn) { return F(ncclResult_t(*)(void))(); }
// ncclMemAlloc(void** ptr, size_t size) and ncclMemFree(void* ptr).
static int w_memalloc(uintptr_t fn, unsigned long long* ptr, size_t size) {
	void* p = NULL;
	ncclResult_t r = F(ncclResult_t(*)(void**, size_t))(&p, size);
	*ptr = (unsigned long long)(uintptr_t)p;
	return r;
}
static int w_memfree(uintptr_t fn, unsigned long long ptr) { return F(ncclResult_t(*)(void*))((void*)(uintptr_t)ptr); }
// ncclCommWindowRegister(ncclComm_t, void* buff, size_t size, ncclWindow_t* win, int winFlags).
static int w_winreg(uintptr_t fn, uintptr_t c, unsigned long long buf, size_t size, uintptr_t* win, int flags) {
	return F(ncclResult_t(*)(ncclComm_t, void*, size_t, void**, int))((ncclComm_t)c, (void*)(uintptr_t)buf, size, (void**)win, flags);
}
// ncclCommWindowDeregister(ncclComm_t, ncclWindow_t).
static int w_windereg(uintptr_t fn, uintptr_t c, uintptr_t win) {
	return F(ncclResult_t(*)(ncclComm_t, void*))((ncclComm_t)c, (void*)win);
}
*/
import "C"

import (
	"unsafe"

	"github.com/detcoll/detcoll/internal/binding"
)

func load(vendor, envVar string, names []string) (*Lib, error) {
	t := newSyms()
	if err := t.Open(envVar, names...); err != nil {
		e := &Error{Code: resultUnavailable, Name: ResultName(resultUnavailable), Message: err.Error(), Call: "load", Vendor: vendor}
		if le, ok := err.(*binding.LoadError); ok {
			e.Call, e.Message = le.Call, le.Message
		}
		return nil, e
	}
	return &Lib{name: t.Name(), path: t.Path(), vendor: vendor, syms: t}, nil
}

func (l *Lib) f(s sym) C.uintptr_t { return C.uintptr_t(l.syms.Ptr(s)) }

func (l *Lib) errorString(r Result) string {
	if !l.syms.Have(ncclGetErrorString) {
		return ""
	}
	if s := C.w_errstr(l.f(ncclGetErrorString), C.int(r)); s != nil {
		return C.GoString(s)
	}
	return ""
}

func (l *Lib) lastError(c *Comm) string {
	if !l.syms.Have(ncclGetLastError) {
		return ""
	}
	var h uintptr
	if c != nil {
		h = c.h
	}
	if s := C.w_last(l.f(ncclGetLastError), C.uintptr_t(h)); s != nil {
		return C.GoString(s)
	}
	return ""
}

func (l *Lib) rGetVersion(v *int32) Result {
	return Result(C.w_pint(l.f(ncclGetVersion), (*C.int)(unsafe.Pointer(v))))
}
func (l *Lib) rGetUniqueID(id *UniqueID) Result {
	return Result(C.w_uid(l.f(ncclGetUniqueId), (*C.uchar)(unsafe.Pointer(&id[0]))))
}
func (l *Lib) rCommInitRank(h *uintptr, n int, id *UniqueID, rank int) Result {
	return Result(C.w_init(l.f(ncclCommInitRank), (*C.uintptr_t)(unsafe.Pointer(h)), C.int(n), (*C.uchar)(unsafe.Pointer(&id[0])), C.int(rank)))
}
func (l *Lib) rComm(s sym, h uintptr) Result { return Result(C.w_comm(l.f(s), C.uintptr_t(h))) }
func (l *Lib) rCommGetAsyncError(h uintptr, r *Result) Result {
	return Result(C.w_async(l.f(ncclCommGetAsyncError), C.uintptr_t(h), (*C.int)(unsafe.Pointer(r))))
}
func (l *Lib) rReduceLike(s sym, send, recv uint64, n int, dt DataType, op RedOp, h uintptr, st uintptr) Result {
	return Result(C.w_reduce(l.f(s), C.ulonglong(send), C.ulonglong(recv), C.size_t(n), C.int(dt), C.int(op), C.uintptr_t(h), C.uintptr_t(st)))
}
func (l *Lib) rAllGather(send, recv uint64, n int, dt DataType, h uintptr, st uintptr) Result {
	return Result(C.w_gather(l.f(ncclAllGather), C.ulonglong(send), C.ulonglong(recv), C.size_t(n), C.int(dt), C.uintptr_t(h), C.uintptr_t(st)))
}
func (l *Lib) rBroadcast(send, recv uint64, n int, dt DataType, root int, h uintptr, st uintptr) Result {
	return Result(C.w_bcast(l.f(ncclBroadcast), C.ulonglong(send), C.ulonglong(recv), C.size_t(n), C.int(dt), C.int(root), C.uintptr_t(h), C.uintptr_t(st)))
}
func (l *Lib) rP2P(s sym, buf uint64, n int, dt DataType, peer int, h uintptr, st uintptr) Result {
	return Result(C.w_p2p(l.f(s), C.ulonglong(buf), C.size_t(n), C.int(dt), C.int(peer), C.uintptr_t(h), C.uintptr_t(st)))
}
func (l *Lib) rVoid(s sym) Result { return Result(C.w_void(l.f(s))) }
func (l *Lib) rMemAlloc(ptr *uint64, size int) Result {
	return Result(C.w_memalloc(l.f(ncclMemAlloc), (*C.ulonglong)(unsafe.Pointer(ptr)), C.size_t(size)))
}
func (l *Lib) rMemFree(ptr uint64) Result {
	return Result(C.w_memfree(l.f(ncclMemFree), C.ulonglong(ptr)))
}
func (l *Lib) rWindowRegister(h uintptr, buf uint64, size int, win *uintptr, flags int) Result {
	return Result(C.w_winreg(l.f(ncclCommWindowRegister), C.uintptr_t(h), C.ulonglong(buf), C.size_t(size), (*C.uintptr_t)(unsafe.Pointer(win)), C.int(flags)))
}
func (l *Lib) rWindowDeregister(h, win uintptr) Result {
	return Result(C.w_windereg(l.f(ncclCommWindowDeregister), C.uintptr_t(h), C.uintptr_t(win)))
}
