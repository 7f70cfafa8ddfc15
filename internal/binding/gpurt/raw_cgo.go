//go:build cgo

package gpurt

/*
#include <stdint.h>
#include <stdlib.h>

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
