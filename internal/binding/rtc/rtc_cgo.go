//go:build cgo

package rtc

/*
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

// The compilers' shared ABI: results are int enums, programs are pointers.
typedef int rtcResult;
typedef void* rtcProgram;
#define F(T) ((T)(fn))

static int w_version(uintptr_t fn, int* a, int* b) { return F(rtcResult(*)(int*, int*))(a, b); }
static int w_pint(uintptr_t fn, int* a) { return F(rtcResult(*)(int*))(a); }
static const char* w_errstr(uintptr_t fn, int r) { return F(const char*(*)(rtcResult))(r); }
static int w_create(uintptr_t fn, uintptr_t* prog, const char* src, const char* name) {
	return F(rtcResult(*)(rtcProgram*, const char*, const char*, int, const char* const*, const char* const*))(
		(rtcProgram*)prog, src, name, 0, NULL, NULL);
}
static int w_compile(uintptr_t fn, uintptr_t prog, int n, char** opts) {
	return F(rtcResult(*)(rtcProgram, int, const char* const*))((rtcProgram)prog, n, (const char* const*)opts);
}
static int w_size(uintptr_t fn, uintptr_t prog, size_t* n) { return F(rtcResult(*)(rtcProgram, size_t*))((rtcProgram)prog, n); }
static int w_get(uintptr_t fn, uintptr_t prog, char* out) { return F(rtcResult(*)(rtcProgram, char*))((rtcProgram)prog, out); }
static int w_destroy(uintptr_t fn, uintptr_t* prog) { return F(rtcResult(*)(rtcProgram*))((rtcProgram*)prog); }

static char** mk_opts(int n) { return (char**)calloc((size_t)(n > 0 ? n : 1), sizeof(char*)); }
static void set_opt(char** a, int i, char* s) { a[i] = s; }
static void free_opts(char** a, int n) { for (int i = 0; i < n; i++) free(a[i]); free(a); }
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/detcoll/detcoll/internal/binding"
)

// ErrorString is the compiler's description of r (fn: its GetErrorString),
// false when fn is 0 or it has none.
func ErrorString(fn uintptr, r int32) (string, bool) {
	if fn == 0 {
		return "", false
	}
	s := C.w_errstr(C.uintptr_t(fn), C.int(r))
	if s == nil {
		return "", false
	}
	return C.GoString(s), true
}

// Version calls fn (the compiler's Version) and returns (major, minor) and
// the result code.
func Version(fn uintptr) (major, minor int, r int32) {
	var a, b C.int
	r = int32(C.w_version(C.uintptr_t(fn), &a, &b))
	return int(a), int(b), r
}

// Ints calls fn(int*) with p pointing at n ints (n ≥ 1): the list calls
// (NVRTC's GetNumSupportedArchs and GetSupportedArchs).
func Ints(fn uintptr, n int) ([]int, int32) {
	a := make([]C.int, n)
	r := int32(C.w_pint(C.uintptr_t(fn), &a[0]))
	out := make([]int, n)
	for i, v := range a {
		out[i] = int(v)
	}
	return out, r
}

// Compile creates a program of source named name, compiles it with
// options, reads its log and its image, and destroys it. errorOf is the
// binding's result → error mapping (nil for success); a failed compilation's
// error, when it is a *binding.LogError[R, V], carries the log and the
// program name and options. Source, name, options and the image live in C
// memory while the compiler holds them.
func Compile[R binding.Code, V binding.Vendor](p Program, errorOf func(call string, r R) error,
	source, name string, options []string) ([]byte, string, error) {
	csrc := C.CString(source)
	defer C.free(unsafe.Pointer(csrc))
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var prog C.uintptr_t
	if err := errorOf(p.Create.Name, R(C.w_create(C.uintptr_t(p.Create.Fn), &prog, csrc, cname))); err != nil {
		return nil, "", err
	}
	defer C.w_destroy(C.uintptr_t(p.Destroy.Fn), &prog)

	copts := C.mk_opts(C.int(len(options)))
	for i, o := range options {
		C.set_opt(copts, C.int(i), C.CString(o))
	}
	r := R(C.w_compile(C.uintptr_t(p.Compile.Fn), prog, C.int(len(options)), copts))
	C.free_opts(copts, C.int(len(options)))

	log := programLog(p, prog)
	if err := errorOf(p.Compile.Name, r); err != nil {
		if e, ok := err.(*binding.LogError[R, V]); ok {
			e.Log = log
			e.Message = fmt.Sprintf("program %s, options %v", name, options)
		}
		return nil, log, err
	}
	var n C.size_t
	if err := errorOf(p.Size.Name, R(C.w_size(C.uintptr_t(p.Size.Fn), prog, &n))); err != nil {
		return nil, log, err
	}
	if n == 0 {
		const invalidInput = 3 // NVRTC_ERROR_INVALID_INPUT, HIPRTC_ERROR_INVALID_INPUT
		err := errorOf(p.Get.Name, invalidInput)
		if e, ok := err.(*binding.LogError[R, V]); ok {
			e.Message = p.Empty
		}
		return nil, log, err
	}
	buf := C.malloc(n)
	defer C.free(buf)
	if err := errorOf(p.Get.Name, R(C.w_get(C.uintptr_t(p.Get.Fn), prog, (*C.char)(buf)))); err != nil {
		return nil, log, err
	}
	return C.GoBytes(buf, C.int(n)), log, nil // a PTX size includes the terminating NUL
}

// programLog reads the log ("" when there is none: NVRTC reports size 1,
// hiprtc 0, for an empty one). One byte more than reported, zeroed, so the
// string ends even if the compiler wrote no NUL.
func programLog(p Program, prog C.uintptr_t) string {
	var n C.size_t
	if C.w_size(C.uintptr_t(p.LogSize.Fn), prog, &n) != 0 || n <= 1 {
		return ""
	}
	buf := C.calloc(n+1, 1)
	defer C.free(buf)
	if C.w_get(C.uintptr_t(p.Log.Fn), prog, (*C.char)(buf)) != 0 {
		return ""
	}
	return C.GoString((*C.char)(buf))
}
