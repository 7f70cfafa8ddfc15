//go:build cgo

package hip

/*
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdlib.h>

// Our own declarations of the HIP runtime ABI (no HIP header at build time).
typedef int hipError_t;
typedef void* H; // hipStream_t, hipEvent_t, hipModule_t, hipFunction_t, hipGraph_t, hipGraphExec_t
typedef struct { char reserved[64]; } hipIpcMemHandle_t;
typedef struct { char reserved[64]; } hipIpcEventHandle_t;

#define F(T) ((T)(fn))
#define DP(p) ((void*)(uintptr_t)(p))

static int w_u(uintptr_t fn, unsigned a) { return F(hipError_t(*)(unsigned))(a); }
static int w_i(uintptr_t fn, int a) { return F(hipError_t(*)(int))(a); }
static int w_pint(uintptr_t fn, int* a) { return F(hipError_t(*)(int*))(a); }
static const char* w_errstr(uintptr_t fn, int r) { return F(const char*(*)(hipError_t))(r); }
static int w_devstr(uintptr_t fn, char* s, int n, int d) { return F(hipError_t(*)(char*, int, int))(s, n, d); }
static int w_devattr(uintptr_t fn, int* v, int a, int d) { return F(hipError_t(*)(int*, int, int))(v, a, d); }
static int w_devmem(uintptr_t fn, size_t* b, int d) { return F(hipError_t(*)(size_t*, int))(b, d); }
static int w_canpeer(uintptr_t fn, int* c, int d, int p) { return F(hipError_t(*)(int*, int, int))(c, d, p); }
static int w_iu(uintptr_t fn, int d, unsigned f) { return F(hipError_t(*)(int, unsigned))(d, f); }
static int w_props(uintptr_t fn, void* buf, int d) { return F(hipError_t(*)(void*, int))(buf, d); }
static int w_void(uintptr_t fn) { return F(hipError_t(*)(void))(); }
static int w_meminfo(uintptr_t fn, size_t* fr, size_t* tot) { return F(hipError_t(*)(size_t*, size_t*))(fr, tot); }
static int w_malloc(uintptr_t fn, uint64_t* p, size_t n) {
	void* q = NULL;
	hipError_t r = F(hipError_t(*)(void**, size_t))(&q, n);
	*p = (uint64_t)(uintptr_t)q;
	return r;
}
static int w_ptr(uintptr_t fn, uint64_t p) { return F(hipError_t(*)(void*))(DP(p)); }
static int w_addrrange(uintptr_t fn, uint64_t* base, size_t* size, uint64_t p) {
	void* b = NULL;
	hipError_t r = F(hipError_t(*)(void**, size_t*, void*))(&b, size, DP(p));
	*base = (uint64_t)(uintptr_t)b;
	return r;
}
static int w_hostmalloc(uintptr_t fn, void** p, size_t n) { return F(hipError_t(*)(void**, size_t, unsigned))(p, n, 0); }
static int w_hostfree(uintptr_t fn, void* p) { return F(hipError_t(*)(void*))(p); }
static int w_htod(uintptr_t fn, uint64_t d, void* s, size_t n) { return F(hipError_t(*)(void*, void*, size_t))(DP(d), s, n); }
static int w_dtoh(uintptr_t fn, void* d, uint64_t s, size_t n) { return F(hipError_t(*)(void*, void*, size_t))(d, DP(s), n); }
static int w_dtod(uintptr_t fn, uint64_t d, uint64_t s, size_t n) { return F(hipError_t(*)(void*, void*, size_t))(DP(d), DP(s), n); }
static int w_htoda(uintptr_t fn, uint64_t d, void* s, size_t n, uintptr_t st) { return F(hipError_t(*)(void*, void*, size_t, H))(DP(d), s, n, (H)st); }
static int w_dtoha(uintptr_t fn, void* d, uint64_t s, size_t n, uintptr_t st) { return F(hipError_t(*)(void*, void*, size_t, H))(d, DP(s), n, (H)st); }
static int w_dtoda(uintptr_t fn, uint64_t d, uint64_t s, size_t n, uintptr_t st) { return F(hipError_t(*)(void*, void*, size_t, H))(DP(d), DP(s), n, (H)st); }
static int w_memset(uintptr_t fn, uint64_t d, unsigned char v, size_t n) { return F(hipError_t(*)(void*, unsigned char, size_t))(DP(d), v, n); }
static int w_memseta(uintptr_t fn, uint64_t d, unsigned char v, size_t n, uintptr_t st) { return F(hipError_t(*)(void*, unsigned char, size_t, H))(DP(d), v, n, (H)st); }
static int w_ipcget(uintptr_t fn, unsigned char* out, uint64_t p) {
	hipIpcMemHandle_t h;
	memset(&h, 0, sizeof h);
	hipError_t r = F(hipError_t(*)(hipIpcMemHandle_t*, void*))(&h, DP(p));
	memcpy(out, &h, 64);
	return r;
}
static int w_ipcopen(uintptr_t fn, uint64_t* p, const unsigned char* in, unsigned flags) {
	hipIpcMemHandle_t h;
	void* q = NULL;
	memcpy(&h, in, 64);
	hipError_t r = F(hipError_t(*)(void**, hipIpcMemHandle_t, unsigned))(&q, h, flags);
	*p = (uint64_t)(uintptr_t)q;
	return r;
}
static int w_ipcgetev(uintptr_t fn, unsigned char* out, uintptr_t e) {
	hipIpcEventHandle_t h;
	memset(&h, 0, sizeof h);
	hipError_t r = F(hipError_t(*)(hipIpcEventHandle_t*, H))(&h, (H)e);
	memcpy(out, &h, 64);
	return r;
}
static int w_ipcopenev(uintptr_t fn, uintptr_t* e, const unsigned char* in) {
	hipIpcEventHandle_t h;
	memcpy(&h, in, 64);
	return F(hipError_t(*)(H*, hipIpcEventHandle_t))((H*)e, h);
}

// w_launch copies the laid-out parameters into C stack memory and builds
// the kernelParams array there, so the runtime never sees Go memory.
static int w_launch(uintptr_t fn, uintptr_t f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shmem, uintptr_t st,
		const unsigned char* buf, int size, const int* offs, int n) {
	unsigned char local[4096] __attribute__((aligned(16)));
	void* params[64];
	if (size < 0 || size > 4096 || n < 0 || n > 64) return 1; // hipErrorInvalidValue
	if (size > 0) memcpy(local, buf, (size_t)size);
	for (int i = 0; i < n; i++) params[i] = local + offs[i];
	return F(hipError_t(*)(H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			unsigned, H, void**, void**))((H)f, gx, gy, gz, bx, by, bz, shmem,
			(H)st, n > 0 ? params : NULL, NULL);
}
*/
import "C"

import (
	"unsafe"

	"github.com/detcoll/detcoll/internal/binding"
)

func fn(s sym) C.uintptr_t { return C.uintptr_t(syms.Ptr(s)) }

// load opens the runtime and resolves the table (no hipInit: see Init).
func load() error {
	if err := syms.Open(LibraryEnv, LibraryNames()...); err != nil {
		return binding.LoadFailure[Result, vendor](err, ResultName(ResultUnavailable))
	}
	return nil
}

func rErrorName(r Result) (string, bool) {
	if !syms.Have(hipGetErrorName) {
		return "", false
	}
	s := C.w_errstr(fn(hipGetErrorName), C.int(r))
	if s == nil {
		return "", false
	}
	return C.GoString(s), true
}

func rErrorString(r Result) (string, bool) {
	if !syms.Have(hipGetErrorString) {
		return "", false
	}
	s := C.w_errstr(fn(hipGetErrorString), C.int(r))
	if s == nil {
		return "", false
	}
	return C.GoString(s), true
}

func rInit() Result                { return Result(C.w_u(fn(hipInit), 0)) }
func rInt(s sym, v int32) Result   { return Result(C.w_i(fn(s), C.int(v))) }
func rVoid(s sym) Result           { return Result(C.w_void(fn(s))) }
func rPint(s sym, v *int32) Result { return Result(C.w_pint(fn(s), (*C.int)(unsafe.Pointer(v)))) }
func rDeviceGetString(s sym, buf []byte, d Device) Result {
	return Result(C.w_devstr(fn(s), (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)), C.int(d)))
}
func rDeviceGetAttribute(v *int32, a DeviceAttribute, d Device) Result {
	return Result(C.w_devattr(fn(hipDeviceGetAttribute), (*C.int)(unsafe.Pointer(v)), C.int(a), C.int(d)))
}
func rDeviceTotalMem(b *uint64, d Device) Result {
	var n C.size_t
	r := Result(C.w_devmem(fn(hipDeviceTotalMem), &n, C.int(d)))
	*b = uint64(n)
	return r
}
func rDeviceCanAccessPeer(c *int32, d, p Device) Result {
	return Result(C.w_canpeer(fn(hipDeviceCanAccessPeer), (*C.int)(unsafe.Pointer(c)), C.int(d), C.int(p)))
}
func rDeviceEnablePeerAccess(peer Device) Result {
	return Result(C.w_iu(fn(hipDeviceEnablePeerAccess), C.int(peer), 0))
}
func rGetDeviceProperties(buf []byte, d Device) Result {
	// C memory: the runtime writes a struct whose size depends on its version.
	p := C.calloc(C.size_t(len(buf)), 1)
	defer C.free(p)
	r := Result(C.w_props(fn(hipGetDeviceProperties), p, C.int(d)))
	copy(buf, unsafe.Slice((*byte)(p), len(buf)))
	return r
}
func rMemGetInfo(free, total *uint64) Result {
	var f, t C.size_t
	r := Result(C.w_meminfo(fn(hipMemGetInfo), &f, &t))
	*free, *total = uint64(f), uint64(t)
	return r
}
func rMalloc(p *DevicePtr, n int) Result {
	var q C.uint64_t
	r := Result(C.w_malloc(fn(hipMalloc), &q, C.size_t(n)))
	*p = DevicePtr(q)
	return r
}
func rPtr(s sym, p DevicePtr) Result { return Result(C.w_ptr(fn(s), C.uint64_t(p))) }
func rMemGetAddressRange(base *DevicePtr, size *uint64, p DevicePtr) Result {
	var b C.uint64_t
	var n C.size_t
	r := Result(C.w_addrrange(fn(hipMemGetAddressRange), &b, &n, C.uint64_t(p)))
	*base, *size = DevicePtr(b), uint64(n)
	return r
}
func rHostMalloc(h *HostMem, n int) Result {
	var p unsafe.Pointer
	r := Result(C.w_hostmalloc(fn(hipHostMalloc), &p, C.size_t(n)))
	if r == ResultSuccess {
		*h = HostMem{p: p, n: n}
	}
	return r
}
func rHostFree(h HostMem) Result { return Result(C.w_hostfree(fn(hipHostFree), h.p)) }
func rMemcpyHtoD(dst DevicePtr, src []byte) Result {
	return Result(C.w_htod(fn(hipMemcpyHtoD), C.uint64_t(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}
func rMemcpyDtoH(dst []byte, src DevicePtr) Result {
	return Result(C.w_dtoh(fn(hipMemcpyDtoH), unsafe.Pointer(&dst[0]), C.uint64_t(src), C.size_t(len(dst))))
}
func rMemcpyDtoD(dst, src DevicePtr, n int) Result {
	return Result(C.w_dtod(fn(hipMemcpyDtoD), C.uint64_t(dst), C.uint64_t(src), C.size_t(n)))
}
func rMemcpyHtoDAsync(dst DevicePtr, src HostMem, off, n int, s Stream) Result {
	return Result(C.w_htoda(fn(hipMemcpyHtoDAsync), C.uint64_t(dst), unsafe.Add(src.p, off), C.size_t(n), C.uintptr_t(s)))
}
func rMemcpyDtoHAsync(dst HostMem, off int, src DevicePtr, n int, s Stream) Result {
	return Result(C.w_dtoha(fn(hipMemcpyDtoHAsync), unsafe.Add(dst.p, off), C.uint64_t(src), C.size_t(n), C.uintptr_t(s)))
}
func rMemcpyDtoDAsync(dst, src DevicePtr, n int, s Stream) Result {
	return Result(C.w_dtoda(fn(hipMemcpyDtoDAsync), C.uint64_t(dst), C.uint64_t(src), C.size_t(n), C.uintptr_t(s)))
}
func rMemsetD8(dst DevicePtr, v byte, n int) Result {
	return Result(C.w_memset(fn(hipMemsetD8), C.uint64_t(dst), C.uchar(v), C.size_t(n)))
}
func rMemsetD8Async(dst DevicePtr, v byte, n int, s Stream) Result {
	return Result(C.w_memseta(fn(hipMemsetD8Async), C.uint64_t(dst), C.uchar(v), C.size_t(n), C.uintptr_t(s)))
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
	return Result(C.w_launch(fn(hipModuleLaunchKernel), C.uintptr_t(f),
		C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z), C.uint(block.X), C.uint(block.Y), C.uint(block.Z),
		C.uint(shmem), C.uintptr_t(s), pb, C.int(len(buf)), po, C.int(len(offs))))
}
func rIpcGetMemHandle(h *IpcMemHandle, p DevicePtr) Result {
	return Result(C.w_ipcget(fn(hipIpcGetMemHandle), (*C.uchar)(unsafe.Pointer(&h[0])), C.uint64_t(p)))
}
func rIpcOpenMemHandle(p *DevicePtr, h *IpcMemHandle, flags uint32) Result {
	var q C.uint64_t
	r := Result(C.w_ipcopen(fn(hipIpcOpenMemHandle), &q, (*C.uchar)(unsafe.Pointer(&h[0])), C.uint(flags)))
	*p = DevicePtr(q)
	return r
}
func rIpcGetEventHandle(h *IpcEventHandle, e Event) Result {
	return Result(C.w_ipcgetev(fn(hipIpcGetEventHandle), (*C.uchar)(unsafe.Pointer(&h[0])), C.uintptr_t(e)))
}
func rIpcOpenEventHandle(e *uintptr, h *IpcEventHandle) Result {
	return Result(C.w_ipcopenev(fn(hipIpcOpenEventHandle), (*C.uintptr_t)(unsafe.Pointer(e)), (*C.uchar)(unsafe.Pointer(&h[0]))))
}
