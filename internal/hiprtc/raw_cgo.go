//go:build cgo

package hiprtc

/*
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

typedef int hiprtcResult;
typedef void* hiprtcProgram;
#define F(T) ((T)(fn))

static int w_version(uintptr_t fn, int* a, int* b) { return F(hiprtcResult(*)(int*, int*))(a, b); }
static const char* w_errstr(uintptr_t fn, int r) { return F(const char*(*)(hiprtcResult))(r); }
static int w_create(uintptr_t fn, uintptr_t* prog, const char* src, const char* name) {
	return F(hiprtcResult(*)(hiprtcProgram*, const char*, const char*, int, const char**, const char**))(
		(hiprtcProgram*)prog, src, name, 0, NULL, NULL);
}
static int w_compile(uintptr_t fn, uintptr_t prog, int n, char** opts) {
	return F(hiprtcResult(*)(hiprtcProgram, int, const char**))((hiprtcProgram)prog, n, (const char**)opts);
}
static int w_size(uintptr_t fn, uintptr_t prog, size_t* n) { return F(hiprtcResult(*)(hiprtcProgram, size_t*))((hiprtcProgram)prog, n); }
static int w_get(uintptr_t fn, uintptr_t prog, char* out) { return F(hiprtcResult(*)(hiprtcProgram, char*))((hiprtcProgram)prog, out); }
static int w_destroy(uintptr_t fn, uintptr_t* prog) { return F(hiprtcResult(*)(hiprtcProgram*))((hiprtcProgram*)prog); }

static char** mk_opts(int n) { return (char**)calloc((size_t)(n > 0 ? n : 1), sizeof(char*)); }
static void set_opt(char** a, int i, char* s) { a[i] = s; }
static void free_opts(char** a, int n) { for (int i = 0; i < n; i++) free(a[i]); free(a); }

// comgr (amd_comgr_status_t is an int enum; 0 is success)
static int w_isa_count(uintptr_t fn, size_t* n) { return F(int(*)(size_t*))(n); }
static int w_isa_name(uintptr_t fn, size_t i, const char** s) { return F(int(*)(size_t, const char**))(i, s); }
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/detcoll/detcoll/internal/dl"
)

var (
	fns   [numSyms]C.uintptr_t
	lib   *dl.Library
	comgr *dl.Library
)

func load() error {
	l, err := dl.Open(LibraryEnv, LibraryNames()...)
	if err != nil {
		return &Error{Code: ResultUnavailable, Name: ResultName(ResultUnavailable), Message: err.Error(), Call: "dlopen"}
	}
	for i, name := range symbolNames {
		p, err := l.Sym(name)
		if err != nil {
			return &Error{Code: ResultUnavailable, Name: ResultName(ResultUnavailable),
				Message: fmt.Sprintf("%s lacks %s (no hiprtc in it)", l.Path(), name), Call: "dlsym"}
		}
		fns[i] = C.uintptr_t(p)
	}
	lib = l
	return nil
}

func libraryPath() string {
	if lib == nil {
		return ""
	}
	return lib.Path()
}

func comgrPath() string {
	if comgr == nil {
		return ""
	}
	return comgr.Path()
}

func rErrorString(r Result) (string, bool) {
	if fns[sGetErrorString] == 0 {
		return "", false
	}
	s := C.w_errstr(fns[sGetErrorString], C.int(r))
	if s == nil {
		return "", false
	}
	return C.GoString(s), true
}

func rVersion() (int, int, error) {
	var a, b C.int
	if err := errorOf("hiprtcVersion", Result(C.w_version(fns[sVersion], &a, &b))); err != nil {
		return 0, 0, err
	}
	return int(a), int(b), nil
}

// rComgrISAs lists comgr's ISA names (amd_comgr_get_isa_name).
func rComgrISAs() ([]string, error) {
	l, err := dl.Open(ComgrEnv, ComgrNames()...)
	if err != nil {
		return nil, err
	}
	cnt, err := l.Sym(comgrGetISACount)
	if err != nil {
		return nil, err
	}
	nm, err := l.Sym(comgrGetISAName)
	if err != nil {
		return nil, err
	}
	var n C.size_t
	if r := C.w_isa_count(C.uintptr_t(cnt), &n); r != 0 {
		return nil, fmt.Errorf("hiprtc: %s in %s failed (%d)", comgrGetISACount, l.Path(), int(r))
	}
	out := make([]string, 0, int(n))
	for i := C.size_t(0); i < n; i++ {
		var s *C.char
		if r := C.w_isa_name(C.uintptr_t(nm), i, &s); r != 0 || s == nil {
			return nil, fmt.Errorf("hiprtc: %s(%d) in %s failed (%d)", comgrGetISAName, int(i), l.Path(), int(r))
		}
		out = append(out, C.GoString(s))
	}
	comgr = l
	return out, nil
}

func rCompile(source, name string, options []string) ([]byte, string, error) {
	csrc := C.CString(source)
	defer C.free(unsafe.Pointer(csrc))
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var prog C.uintptr_t
	if err := errorOf("hiprtcCreateProgram", Result(C.w_create(fns[sCreateProgram], &prog, csrc, cname))); err != nil {
		return nil, "", err
	}
	defer C.w_destroy(fns[sDestroyProgram], &prog)

	// The option array and its strings live in C memory.
	copts := C.mk_opts(C.int(len(options)))
	for i, o := range options {
		C.set_opt(copts, C.int(i), C.CString(o))
	}
	r := Result(C.w_compile(fns[sCompileProgram], prog, C.int(len(options)), copts))
	C.free_opts(copts, C.int(len(options)))

	log := programLog(prog)
	if r != ResultSuccess {
		err := errorOf("hiprtcCompileProgram", r)
		if e, ok := err.(*Error); ok {
			e.Log = log
			e.Message = fmt.Sprintf("program %s, options %v", name, options)
		}
		return nil, log, err
	}
	var n C.size_t
	if err := errorOf("hiprtcGetCodeSize", Result(C.w_size(fns[sGetCodeSize], prog, &n))); err != nil {
		return nil, log, err
	}
	if n == 0 {
		return nil, log, &Error{Code: ResultInvalidInput, Name: ResultName(ResultInvalidInput), Call: "hiprtcGetCode", Message: "empty code object"}
	}
	buf := C.malloc(n)
	defer C.free(buf)
	if err := errorOf("hiprtcGetCode", Result(C.w_get(fns[sGetCode], prog, (*C.char)(buf)))); err != nil {
		return nil, log, err
	}
	return C.GoBytes(buf, C.int(n)), log, nil
}

// programLog reads the log; hiprtc reports size 0 (not 1) for an empty one.
func programLog(prog C.uintptr_t) string {
	var n C.size_t
	if C.w_size(fns[sGetProgramLogSize], prog, &n) != 0 || n <= 1 {
		return ""
	}
	buf := C.calloc(n+1, 1)
	defer C.free(buf)
	if C.w_get(fns[sGetProgramLog], prog, (*C.char)(buf)) != 0 {
		return ""
	}
	return C.GoString((*C.char)(buf))
}
