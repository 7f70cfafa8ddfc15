//go:build cgo

package cuda

/*
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdlib.h>

// Our own declarations of the driver ABI (no cuda.h at build time).
typedef int CUresult;
typedef int CUdevice;
typedef void* CUhandle; // CUcontext, CUstream, CUevent, CUmodule, CUfunction, CUgraph, CUgraphExec
typedef struct { char bytes[16]; } CUuuid;

#define F(T) ((T)(fn))

static int w_i(uintptr_t fn, unsigned a) { return F(CUresult(*)(unsigned))(a); }
static int w_pint(uintptr_t fn, int* a) { return F(CUresult(*)(int*))(a); }
static int w_errstr(uintptr_t fn, int r, const char** s) { return F(CUresult(*)(CUresult, const char**))(r, s); }
static int w_devget(uintptr_t fn, int* d, int ord) { return F(CUresult(*)(CUdevice*, int))(d, ord); }
static int w_devname(uintptr_t fn, char* s, int n, int d) { return F(CUresult(*)(char*, int, CUdevice))(s, n, d); }
static int w_devattr(uintptr_t fn, int* v, int a, int d) { return F(CUresult(*)(int*, int, CUdevice))(v, a, d); }
static int w_devmem(uintptr_t fn, size_t* b, int d) { return F(CUresult(*)(size_t*, CUdevice))(b, d); }
static int w_devuuid(uintptr_t fn, unsigned char* out, int d) {
	CUuuid u;
	CUresult r = F(CUresult(*)(CUuuid*, CUdevice))(&u, d);
	memcpy(out, &u, 16);
	return r;
}
static int w_canpeer(uintptr_t fn, int* c, int d, int p) { return F(CUresult(*)(int*, CUdevice, CUdevice))(c, d, p); }
static int w_retain(uintptr_t fn, uintptr_t* ctx, int d) { return F(CUresult(*)(CUhandle*, CUdevice))((CUhandle*)ctx, d); }
static int w_dev(uintptr_t fn, int d) { return F(CUresult(*)(CUdevice))(d); }
static int w_h(uintptr_t fn, uintptr_t h) { return F(CUresult(*)(CUhandle))((CUhandle)h); }
static int w_ph(uintptr_t fn, uintptr_t* h) { return F(CUresult(*)(CUhandle*))((CUhandle*)h); }
static int w_void(uintptr_t fn) { return F(CUresult(*)(void))(); }
static int w_hu(uintptr_t fn, uintptr_t h, unsigned f) { return F(CUresult(*)(CUhandle, unsigned))((CUhandle)h, f); }

*/
import "C"

import (
	"fmt"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
	"unsafe"

	"github.com/detcoll/detcoll/internal/binding"
)

func fn(s sym) C.uintptr_t { return C.uintptr_t(syms.Ptr(s)) }

// load opens the driver, resolves the table and calls cuInit(0).
func load() error {
	if err := syms.Open(LibraryEnv, LibraryNames...); err != nil {
		return binding.LoadFailure[Result, vendor](err, ResultName(gpurt.ResultUnavailable))
	}
	if r := Result(C.w_i(fn(cuInit), 0)); r != gpurt.ResultSuccess {
		return fmt.Errorf("%w: %w", ErrUnavailable, errorOf(cuInit, r))
	}
	return nil
}

func rErrorName(r Result) (string, bool) {
	if !syms.Have(cuGetErrorName) {
		return "", false
	}
	var s *C.char
	if C.w_errstr(fn(cuGetErrorName), C.int(r), &s) != 0 || s == nil {
		return "", false
	}
	return C.GoString(s), true
}

func rErrorString(r Result) (string, bool) {
	if !syms.Have(cuGetErrorString) {
		return "", false
	}
	var s *C.char
	if C.w_errstr(fn(cuGetErrorString), C.int(r), &s) != 0 || s == nil {
		return "", false
	}
	return C.GoString(s), true
}

func rDriverGetVersion(v *int32) Result {
	return Result(C.w_pint(fn(cuDriverGetVersion), (*C.int)(unsafe.Pointer(v))))
}
func rDeviceGetCount(n *int32) Result {
	return Result(C.w_pint(fn(cuDeviceGetCount), (*C.int)(unsafe.Pointer(n))))
}
func rDeviceGet(d *Device, ord int) Result {
	return Result(C.w_devget(fn(cuDeviceGet), (*C.int)(unsafe.Pointer(d)), C.int(ord)))
}
func rDeviceGetName(buf []byte, d Device) Result {
	return Result(C.w_devname(fn(cuDeviceGetName), (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)), C.int(d)))
}
func rDeviceGetAttribute(v *int32, a DeviceAttribute, d Device) Result {
	return Result(C.w_devattr(fn(cuDeviceGetAttribute), (*C.int)(unsafe.Pointer(v)), C.int(a), C.int(d)))
}
func rDeviceTotalMem(b *uint64, d Device) Result {
	var n C.size_t
	r := Result(C.w_devmem(fn(cuDeviceTotalMem), &n, C.int(d)))
	*b = uint64(n)
	return r
}
func rDeviceGetUUID(u *[16]byte, d Device) Result {
	return Result(C.w_devuuid(fn(cuDeviceGetUuid), (*C.uchar)(unsafe.Pointer(&u[0])), C.int(d)))
}
func rDeviceGetPCIBusID(buf []byte, d Device) Result {
	return Result(C.w_devname(fn(cuDeviceGetPCIBusId), (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)), C.int(d)))
}
func rDeviceCanAccessPeer(c *int32, d, p Device) Result {
	return Result(C.w_canpeer(fn(cuDeviceCanAccessPeer), (*C.int)(unsafe.Pointer(c)), C.int(d), C.int(p)))
}
func rPrimaryCtxRetain(c *Context, d Device) Result {
	return Result(C.w_retain(fn(cuDevicePrimaryCtxRetain), (*C.uintptr_t)(unsafe.Pointer(c)), C.int(d)))
}
func rPrimaryCtxRelease(d Device) Result {
	return Result(C.w_dev(fn(cuDevicePrimaryCtxRelease), C.int(d)))
}
func rCtxSetCurrent(c Context) Result { return Result(C.w_h(fn(cuCtxSetCurrent), C.uintptr_t(c))) }
func rCtxGetCurrent(c *Context) Result {
	return Result(C.w_ph(fn(cuCtxGetCurrent), (*C.uintptr_t)(unsafe.Pointer(c))))
}
func rCtxSynchronize() Result { return Result(C.w_void(fn(cuCtxSynchronize))) }
func rCtxEnablePeerAccess(peer Context) Result {
	return Result(C.w_hu(fn(cuCtxEnablePeerAccess), C.uintptr_t(peer), 0))
}
