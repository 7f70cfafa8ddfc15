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
typedef struct { char reserved[64]; } hipIpcEventHandle_t;

#define F(T) ((T)(fn))

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

*/
import "C"

import (
	"github.com/detcoll/detcoll/internal/binding/gpurt"
	"unsafe"

	"github.com/detcoll/detcoll/internal/binding"
)

func fn(s sym) C.uintptr_t { return C.uintptr_t(syms.Ptr(s)) }

// load opens the runtime and resolves the table (no hipInit: see Init).
func load() error {
	if err := syms.Open(LibraryEnv, LibraryNames()...); err != nil {
		return binding.LoadFailure[Result, vendor](err, ResultName(gpurt.ResultUnavailable))
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
func rIpcGetEventHandle(h *IpcEventHandle, e Event) Result {
	return Result(C.w_ipcgetev(fn(hipIpcGetEventHandle), (*C.uchar)(unsafe.Pointer(&h[0])), C.uintptr_t(e)))
}
func rIpcOpenEventHandle(e *uintptr, h *IpcEventHandle) Result {
	return Result(C.w_ipcopenev(fn(hipIpcOpenEventHandle), (*C.uintptr_t)(unsafe.Pointer(e)), (*C.uchar)(unsafe.Pointer(&h[0]))))
}
