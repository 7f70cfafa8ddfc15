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
typedef unsigned long long CUdeviceptr;
typedef void* CUhandle; // CUcontext, CUstream, CUevent, CUmodule, CUfunction, CUgraph, CUgraphExec
typedef struct { char reserved[64]; } CUipcMemHandle;
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
static int w_meminfo(uintptr_t fn, size_t* fr, size_t* tot) { return F(CUresult(*)(size_t*, size_t*))(fr, tot); }
static int w_alloc(uintptr_t fn, CUdeviceptr* p, size_t n) { return F(CUresult(*)(CUdeviceptr*, size_t))(p, n); }
static int w_dptr(uintptr_t fn, CUdeviceptr p) { return F(CUresult(*)(CUdeviceptr))(p); }
static int w_allochost(uintptr_t fn, void** p, size_t n) { return F(CUresult(*)(void**, size_t))(p, n); }
static int w_freehost(uintptr_t fn, void* p) { return F(CUresult(*)(void*))(p); }
static int w_htod(uintptr_t fn, CUdeviceptr d, const void* s, size_t n) { return F(CUresult(*)(CUdeviceptr, const void*, size_t))(d, s, n); }
static int w_dtoh(uintptr_t fn, void* d, CUdeviceptr s, size_t n) { return F(CUresult(*)(void*, CUdeviceptr, size_t))(d, s, n); }
static int w_dtod(uintptr_t fn, CUdeviceptr d, CUdeviceptr s, size_t n) { return F(CUresult(*)(CUdeviceptr, CUdeviceptr, size_t))(d, s, n); }
static int w_htoda(uintptr_t fn, CUdeviceptr d, const void* s, size_t n, uintptr_t st) { return F(CUresult(*)(CUdeviceptr, const void*, size_t, CUhandle))(d, s, n, (CUhandle)st); }
static int w_dtoha(uintptr_t fn, void* d, CUdeviceptr s, size_t n, uintptr_t st) { return F(CUresult(*)(void*, CUdeviceptr, size_t, CUhandle))(d, s, n, (CUhandle)st); }
static int w_dtoda(uintptr_t fn, CUdeviceptr d, CUdeviceptr s, size_t n, uintptr_t st) { return F(CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUhandle))(d, s, n, (CUhandle)st); }
static int w_memset(uintptr_t fn, CUdeviceptr d, unsigned char v, size_t n) { return F(CUresult(*)(CUdeviceptr, unsigned char, size_t))(d, v, n); }
static int w_memseta(uintptr_t fn, CUdeviceptr d, unsigned char v, size_t n, uintptr_t st) { return F(CUresult(*)(CUdeviceptr, unsigned char, size_t, CUhandle))(d, v, n, (CUhandle)st); }
static int w_addrrange(uintptr_t fn, CUdeviceptr* base, size_t* size, CUdeviceptr p) { return F(CUresult(*)(CUdeviceptr*, size_t*, CUdeviceptr))(base, size, p); }
static int w_ipcget(uintptr_t fn, unsigned char* out, CUdeviceptr p) {
	CUipcMemHandle h;
	CUresult r = F(CUresult(*)(CUipcMemHandle*, CUdeviceptr))(&h, p);
	memcpy(out, &h, 64);
	return r;
}
static int w_ipcopen(uintptr_t fn, CUdeviceptr* p, const unsigned char* in, unsigned flags) {
	CUipcMemHandle h;
	memcpy(&h, in, 64);
	return F(CUresult(*)(CUdeviceptr*, CUipcMemHandle, unsigned))(p, h, flags);
}

// w_launch copies the laid-out parameters into C stack memory and builds
// the kernelParams array there, so the driver never sees Go memory.
static int w_launch(uintptr_t fn, uintptr_t f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shmem, uintptr_t st,
		const unsigned char* buf, int size, const int* offs, int n) {
	unsigned char local[4096] __attribute__((aligned(16)));
	void* params[64];
	if (size < 0 || size > 4096 || n < 0 || n > 64) return 1; // CUDA_ERROR_INVALID_VALUE
	if (size > 0) memcpy(local, buf, (size_t)size);
	for (int i = 0; i < n; i++) params[i] = local + offs[i];
	return F(CUresult(*)(CUhandle, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			unsigned, CUhandle, void**, void**))((CUhandle)f, gx, gy, gz, bx, by, bz, shmem,
			(CUhandle)st, n > 0 ? params : NULL, NULL);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/detcoll/detcoll/internal/binding"
)

func fn(s sym) C.uintptr_t { return C.uintptr_t(syms.Ptr(s)) }

// load opens the driver, resolves the table and calls cuInit(0).
func load() error {
	if err := syms.Open(LibraryEnv, LibraryNames...); err != nil {
		return binding.LoadFailure[Result, vendor](err, ResultName(ResultUnavailable))
	}
	if r := Result(C.w_i(fn(cuInit), 0)); r != ResultSuccess {
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
func rMemGetInfo(free, total *uint64) Result {
	var f, t C.size_t
	r := Result(C.w_meminfo(fn(cuMemGetInfo), &f, &t))
	*free, *total = uint64(f), uint64(t)
	return r
}
func rMemAlloc(p *DevicePtr, n int) Result {
	return Result(C.w_alloc(fn(cuMemAlloc), (*C.CUdeviceptr)(unsafe.Pointer(p)), C.size_t(n)))
}
func rMemFree(p DevicePtr) Result { return Result(C.w_dptr(fn(cuMemFree), C.CUdeviceptr(p))) }
func rMemAllocHost(h *HostMem, n int) Result {
	var p unsafe.Pointer
	r := Result(C.w_allochost(fn(cuMemAllocHost), &p, C.size_t(n)))
	if r == ResultSuccess {
		*h = HostMem{p: p, n: n}
	}
	return r
}
func rMemFreeHost(h HostMem) Result { return Result(C.w_freehost(fn(cuMemFreeHost), h.p)) }
func rMemcpyHtoD(dst DevicePtr, src []byte) Result {
	return Result(C.w_htod(fn(cuMemcpyHtoD), C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}
func rMemcpyDtoH(dst []byte, src DevicePtr) Result {
	return Result(C.w_dtoh(fn(cuMemcpyDtoH), unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst))))
}
func rMemcpyDtoD(dst, src DevicePtr, n int) Result {
	return Result(C.w_dtod(fn(cuMemcpyDtoD), C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n)))
}
func rMemcpyHtoDAsync(dst DevicePtr, src HostMem, off, n int, s Stream) Result {
	return Result(C.w_htoda(fn(cuMemcpyHtoDAsync), C.CUdeviceptr(dst), unsafe.Add(src.p, off), C.size_t(n), C.uintptr_t(s)))
}
func rMemcpyDtoHAsync(dst HostMem, off int, src DevicePtr, n int, s Stream) Result {
	return Result(C.w_dtoha(fn(cuMemcpyDtoHAsync), unsafe.Add(dst.p, off), C.CUdeviceptr(src), C.size_t(n), C.uintptr_t(s)))
}
func rMemcpyDtoDAsync(dst, src DevicePtr, n int, s Stream) Result {
	return Result(C.w_dtoda(fn(cuMemcpyDtoDAsync), C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), C.uintptr_t(s)))
}
func rMemsetD8(dst DevicePtr, v byte, n int) Result {
	return Result(C.w_memset(fn(cuMemsetD8), C.CUdeviceptr(dst), C.uchar(v), C.size_t(n)))
}
func rMemsetD8Async(dst DevicePtr, v byte, n int, s Stream) Result {
	return Result(C.w_memseta(fn(cuMemsetD8Async), C.CUdeviceptr(dst), C.uchar(v), C.size_t(n), C.uintptr_t(s)))
}
func rLaunchKernel(f Function, grid, block Dim3, shmem uint32, s Stream, a *Args) Result {
	buf, offs := a.Layout()
	var pb *C.uchar
	var po *C.int
	if len(buf) > 0 {
		pb = (*C.uchar)(unsafe.Pointer(&buf[0]))
	}
	if len(offs) > 0 {
		po = (*C.int)(unsafe.Pointer(&offs[0]))
	}
	return Result(C.w_launch(fn(cuLaunchKernel), C.uintptr_t(f),
		C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z), C.uint(block.X), C.uint(block.Y), C.uint(block.Z),
		C.uint(shmem), C.uintptr_t(s), pb, C.int(len(buf)), po, C.int(len(offs))))
}
func rIpcGetMemHandle(h *IpcMemHandle, p DevicePtr) Result {
	return Result(C.w_ipcget(fn(cuIpcGetMemHandle), (*C.uchar)(unsafe.Pointer(&h[0])), C.CUdeviceptr(p)))
}
func rIpcOpenMemHandle(p *DevicePtr, h *IpcMemHandle) Result {
	const lazyEnablePeerAccess = 1 // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
	return Result(C.w_ipcopen(fn(cuIpcOpenMemHandle), (*C.CUdeviceptr)(unsafe.Pointer(p)), (*C.uchar)(unsafe.Pointer(&h[0])), lazyEnablePeerAccess))
}
func rIpcCloseMemHandle(p DevicePtr) Result {
	return Result(C.w_dptr(fn(cuIpcCloseMemHandle), C.CUdeviceptr(p)))
}
func rMemGetAddressRange(base *DevicePtr, size *uint64, p DevicePtr) Result {
	var b C.CUdeviceptr
	var n C.size_t
	r := Result(C.w_addrrange(fn(cuMemGetAddressRange), &b, &n, C.CUdeviceptr(p)))
	*base, *size = DevicePtr(b), uint64(n)
	return r
}
