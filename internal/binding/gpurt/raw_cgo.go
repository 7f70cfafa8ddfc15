//go:build cgo

package gpurt

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>

// The CUDA driver's and the HIP runtime's shared ABI for these calls:
// results are int enums, handles are pointers.
typedef int R;
typedef void* H;
#define F(T) ((T)(fn))

static int w_h(uintptr_t fn, uintptr_t h) { return F(R(*)(H))((H)h); }
static int w_hh(uintptr_t fn, uintptr_t a, uintptr_t b) { return F(R(*)(H, H))((H)a, (H)b); }
static int w_hhu(uintptr_t fn, uintptr_t a, uintptr_t b, unsigned f) { return F(R(*)(H, H, unsigned))((H)a, (H)b, f); }
static int w_hi(uintptr_t fn, uintptr_t a, int m) { return F(R(*)(H, int))((H)a, m); }
static int w_hph(uintptr_t fn, uintptr_t a, uintptr_t* out) { return F(R(*)(H, H*))((H)a, (H*)out); }
static int w_hpint(uintptr_t fn, uintptr_t a, int* out) { return F(R(*)(H, int*))((H)a, out); }
static int w_create(uintptr_t fn, uintptr_t* h, unsigned flags) { return F(R(*)(H*, unsigned))((H*)h, flags); }
static int w_elapsed(uintptr_t fn, float* ms, uintptr_t a, uintptr_t b) { return F(R(*)(float*, H, H))(ms, (H)a, (H)b); }
static int w_modload(uintptr_t fn, uintptr_t* m, const void* img) { return F(R(*)(H*, const void*))((H*)m, img); }
static int w_getfn(uintptr_t fn, uintptr_t* f, uintptr_t m, const char* name) { return F(R(*)(H*, H, const char*))((H*)f, (H)m, name); }
static int w_funcattr(uintptr_t fn, int* v, int a, uintptr_t f) { return F(R(*)(int*, int, H))(v, a, (H)f); }
static int w_instantiate(uintptr_t fn, uintptr_t* e, uintptr_t g) { return F(R(*)(H*, H, unsigned long long))((H*)e, (H)g, 0ULL); }

// The memory calls. A device pointer travels as a uint64_t; ip says the
// entry point takes it as an integer (CUdeviceptr) rather than a void*
// (HIP), and each branch calls through that exact C type.
typedef unsigned long long DI;
typedef struct { char reserved[64]; } IPC;
#define DP(p) ((void*)(uintptr_t)(p))

static int w_meminfo(uintptr_t fn, size_t* fr, size_t* tot) { return F(R(*)(size_t*, size_t*))(fr, tot); }
static int w_alloc(uintptr_t fn, int ip, uint64_t* p, size_t n) {
	R r;
	if (ip) { DI d = 0; r = F(R(*)(DI*, size_t))(&d, n); *p = d; return r; }
	void* q = NULL;
	r = F(R(*)(void**, size_t))(&q, n);
	*p = (uint64_t)(uintptr_t)q;
	return r;
}
static int w_dptr(uintptr_t fn, int ip, uint64_t p) { return ip ? F(R(*)(DI))(p) : F(R(*)(void*))(DP(p)); }
static int w_addrrange(uintptr_t fn, int ip, uint64_t* base, size_t* size, uint64_t p) {
	R r;
	if (ip) { DI b = 0; r = F(R(*)(DI*, size_t*, DI))(&b, size, p); *base = b; return r; }
	void* b = NULL;
	r = F(R(*)(void**, size_t*, void*))(&b, size, DP(p));
	*base = (uint64_t)(uintptr_t)b;
	return r;
}
static int w_allochost(uintptr_t fn, int flags, void** p, size_t n) {
	return flags ? F(R(*)(void**, size_t, unsigned))(p, n, 0) : F(R(*)(void**, size_t))(p, n);
}
static int w_freehost(uintptr_t fn, void* p) { return F(R(*)(void*))(p); }
static int w_htod(uintptr_t fn, int ip, uint64_t d, void* s, size_t n, uintptr_t st, int async) {
	if (async) return ip ? F(R(*)(DI, const void*, size_t, H))(d, s, n, (H)st) : F(R(*)(void*, void*, size_t, H))(DP(d), s, n, (H)st);
	return ip ? F(R(*)(DI, const void*, size_t))(d, s, n) : F(R(*)(void*, void*, size_t))(DP(d), s, n);
}
static int w_dtoh(uintptr_t fn, int ip, void* d, uint64_t s, size_t n, uintptr_t st, int async) {
	if (async) return ip ? F(R(*)(void*, DI, size_t, H))(d, s, n, (H)st) : F(R(*)(void*, void*, size_t, H))(d, DP(s), n, (H)st);
	return ip ? F(R(*)(void*, DI, size_t))(d, s, n) : F(R(*)(void*, void*, size_t))(d, DP(s), n);
}
static int w_dtod(uintptr_t fn, int ip, uint64_t d, uint64_t s, size_t n, uintptr_t st, int async) {
	if (async) return ip ? F(R(*)(DI, DI, size_t, H))(d, s, n, (H)st) : F(R(*)(void*, void*, size_t, H))(DP(d), DP(s), n, (H)st);
	return ip ? F(R(*)(DI, DI, size_t))(d, s, n) : F(R(*)(void*, void*, size_t))(DP(d), DP(s), n);
}
static int w_memset(uintptr_t fn, int ip, uint64_t d, unsigned char v, size_t n, uintptr_t st, int async) {
	if (async) return ip ? F(R(*)(DI, unsigned char, size_t, H))(d, v, n, (H)st) : F(R(*)(void*, unsigned char, size_t, H))(DP(d), v, n, (H)st);
	return ip ? F(R(*)(DI, unsigned char, size_t))(d, v, n) : F(R(*)(void*, unsigned char, size_t))(DP(d), v, n);
}
static int w_ipcget(uintptr_t fn, int ip, unsigned char* out, uint64_t p) {
	IPC h;
	memset(&h, 0, sizeof h);
	R r = ip ? F(R(*)(IPC*, DI))(&h, p) : F(R(*)(IPC*, void*))(&h, DP(p));
	memcpy(out, &h, 64);
	return r;
}
static int w_ipcopen(uintptr_t fn, int ip, uint64_t* p, const unsigned char* in, unsigned flags) {
	IPC h;
	R r;
	memcpy(&h, in, 64);
	if (ip) { DI d = 0; r = F(R(*)(DI*, IPC, unsigned))(&d, h, flags); *p = d; return r; }
	void* q = NULL;
	r = F(R(*)(void**, IPC, unsigned))(&q, h, flags);
	*p = (uint64_t)(uintptr_t)q;
	return r;
}

// w_launch copies the laid-out parameters into C stack memory and builds
// the kernelParams array there, so the library never sees Go memory.
// cuLaunchKernel and hipModuleLaunchKernel have one signature.
static int w_launch(uintptr_t fn, uintptr_t f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shmem, uintptr_t st,
		const unsigned char* buf, int size, const int* offs, int n) {
	unsigned char local[4096] __attribute__((aligned(16)));
	void* params[64];
	if (size < 0 || size > 4096 || n < 0 || n > 64) return 1; // invalid value on both
	if (size > 0) memcpy(local, buf, (size_t)size);
	for (int i = 0; i < n; i++) params[i] = local + offs[i];
	return F(R(*)(H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			unsigned, H, void**, void**))((H)f, gx, gy, gz, bx, by, bz, shmem,
			(H)st, n > 0 ? params : NULL, NULL);
}
*/
import "C"

import "unsafe"

func cH(fn, h uintptr) int32 { return int32(C.w_h(C.uintptr_t(fn), C.uintptr_t(h))) }
func cHH(fn, a, b uintptr) int32 {
	return int32(C.w_hh(C.uintptr_t(fn), C.uintptr_t(a), C.uintptr_t(b)))
}
func cHHU(fn, a, b uintptr, f uint32) int32 {
	return int32(C.w_hhu(C.uintptr_t(fn), C.uintptr_t(a), C.uintptr_t(b), C.uint(f)))
}
func cHI(fn, a uintptr, v int32) int32 {
	return int32(C.w_hi(C.uintptr_t(fn), C.uintptr_t(a), C.int(v)))
}
func cHPH(fn, a uintptr, out *uintptr) int32 {
	return int32(C.w_hph(C.uintptr_t(fn), C.uintptr_t(a), (*C.uintptr_t)(unsafe.Pointer(out))))
}
func cHPI(fn, a uintptr, out *int32) int32 {
	return int32(C.w_hpint(C.uintptr_t(fn), C.uintptr_t(a), (*C.int)(unsafe.Pointer(out))))
}
func cCreate(fn uintptr, h *uintptr, flags uint32) int32 {
	return int32(C.w_create(C.uintptr_t(fn), (*C.uintptr_t)(unsafe.Pointer(h)), C.uint(flags)))
}
func cElapsed(fn uintptr, ms *float32, a, b uintptr) int32 {
	return int32(C.w_elapsed(C.uintptr_t(fn), (*C.float)(unsafe.Pointer(ms)), C.uintptr_t(a), C.uintptr_t(b)))
}

// cModLoad copies the image to C memory: the library parses it during the
// call, and nothing should depend on Go memory semantics there.
func cModLoad(fn uintptr, m *uintptr, image []byte) int32 {
	p := C.CBytes(image)
	defer C.free(p)
	return int32(C.w_modload(C.uintptr_t(fn), (*C.uintptr_t)(unsafe.Pointer(m)), p))
}
func cGetFn(fn uintptr, f *uintptr, m uintptr, name string) int32 {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return int32(C.w_getfn(C.uintptr_t(fn), (*C.uintptr_t)(unsafe.Pointer(f)), C.uintptr_t(m), cs))
}
func cFuncAttr(fn uintptr, v *int32, a int32, f uintptr) int32 {
	return int32(C.w_funcattr(C.uintptr_t(fn), (*C.int)(unsafe.Pointer(v)), C.int(a), C.uintptr_t(f)))
}
func cInstantiate(fn uintptr, e *uintptr, g uintptr) int32 {
	return int32(C.w_instantiate(C.uintptr_t(fn), (*C.uintptr_t)(unsafe.Pointer(e)), C.uintptr_t(g)))
}

func flag(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func cMemInfo(fn uintptr, free, total *uint64) int32 {
	var f, t C.size_t
	r := int32(C.w_meminfo(C.uintptr_t(fn), &f, &t))
	*free, *total = uint64(f), uint64(t)
	return r
}
func cAlloc(fn uintptr, a ABI, p *DevicePtr, n int) int32 {
	var q C.uint64_t
	r := int32(C.w_alloc(C.uintptr_t(fn), flag(a.IntegerDevicePtr), &q, C.size_t(n)))
	*p = DevicePtr(q)
	return r
}
func cDptr(fn uintptr, a ABI, p DevicePtr) int32 {
	return int32(C.w_dptr(C.uintptr_t(fn), flag(a.IntegerDevicePtr), C.uint64_t(p)))
}
func cAddrRange(fn uintptr, a ABI, base *DevicePtr, size *uint64, p DevicePtr) int32 {
	var b C.uint64_t
	var n C.size_t
	r := int32(C.w_addrrange(C.uintptr_t(fn), flag(a.IntegerDevicePtr), &b, &n, C.uint64_t(p)))
	*base, *size = DevicePtr(b), uint64(n)
	return r
}
func cAllocHost(fn uintptr, a ABI, p *unsafe.Pointer, n int) int32 {
	return int32(C.w_allochost(C.uintptr_t(fn), flag(a.HostAllocFlags), p, C.size_t(n)))
}
func cFreeHost(fn uintptr, p unsafe.Pointer) int32 { return int32(C.w_freehost(C.uintptr_t(fn), p)) }
func cHtoD(fn uintptr, a ABI, d DevicePtr, s unsafe.Pointer, n int) int32 {
	return int32(C.w_htod(C.uintptr_t(fn), flag(a.IntegerDevicePtr), C.uint64_t(d), s, C.size_t(n), 0, 0))
}
func cHtoDAsync(fn uintptr, a ABI, d DevicePtr, s unsafe.Pointer, n int, st uintptr) int32 {
	return int32(C.w_htod(C.uintptr_t(fn), flag(a.IntegerDevicePtr), C.uint64_t(d), s, C.size_t(n), C.uintptr_t(st), 1))
}
func cDtoH(fn uintptr, a ABI, d unsafe.Pointer, s DevicePtr, n int) int32 {
	return int32(C.w_dtoh(C.uintptr_t(fn), flag(a.IntegerDevicePtr), d, C.uint64_t(s), C.size_t(n), 0, 0))
}
func cDtoHAsync(fn uintptr, a ABI, d unsafe.Pointer, s DevicePtr, n int, st uintptr) int32 {
	return int32(C.w_dtoh(C.uintptr_t(fn), flag(a.IntegerDevicePtr), d, C.uint64_t(s), C.size_t(n), C.uintptr_t(st), 1))
}
func cDtoD(fn uintptr, a ABI, d, s DevicePtr, n int, st uintptr, async bool) int32 {
	return int32(C.w_dtod(C.uintptr_t(fn), flag(a.IntegerDevicePtr), C.uint64_t(d), C.uint64_t(s), C.size_t(n), C.uintptr_t(st), flag(async)))
}
func cMemset(fn uintptr, a ABI, d DevicePtr, v byte, n int, st uintptr, async bool) int32 {
	return int32(C.w_memset(C.uintptr_t(fn), flag(a.IntegerDevicePtr), C.uint64_t(d), C.uchar(v), C.size_t(n), C.uintptr_t(st), flag(async)))
}
func cIpcGet(fn uintptr, a ABI, h *[64]byte, p DevicePtr) int32 {
	return int32(C.w_ipcget(C.uintptr_t(fn), flag(a.IntegerDevicePtr), (*C.uchar)(unsafe.Pointer(&h[0])), C.uint64_t(p)))
}
func cIpcOpen(fn uintptr, a ABI, p *DevicePtr, h *[64]byte, flags uint32) int32 {
	var q C.uint64_t
	r := int32(C.w_ipcopen(C.uintptr_t(fn), flag(a.IntegerDevicePtr), &q, (*C.uchar)(unsafe.Pointer(&h[0])), C.uint(flags)))
	*p = DevicePtr(q)
	return r
}
func cLaunch(fn, f uintptr, grid, block Dim3, shmem uint32, st uintptr, buf []byte, offs []int32) int32 {
	var pb *C.uchar
	var po *C.int
	if len(buf) > 0 {
		pb = (*C.uchar)(unsafe.Pointer(&buf[0]))
	}
	if len(offs) > 0 {
		po = (*C.int)(unsafe.Pointer(&offs[0]))
	}
	return int32(C.w_launch(C.uintptr_t(fn), C.uintptr_t(f),
		C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z), C.uint(block.X), C.uint(block.Y), C.uint(block.Z),
		C.uint(shmem), C.uintptr_t(st), pb, C.int(len(buf)), po, C.int(len(offs))))
}
