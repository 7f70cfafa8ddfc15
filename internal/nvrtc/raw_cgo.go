//go:build cgo

package nvrtc

/*
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

typedef int nvrtcResult;
typedef void* nvrtcProgram;
#define F(T) ((T)(fn))

static int w_version(uintptr_t fn, int* a, int* b) { return F(nvrtcResult(*)(int*, int*))(a, b); }
static int w_pint(uintptr_t fn, int* a) { return F(nvrtcResult(*)(int*))(a); }
static const char* w_errstr(uintptr_t fn, int r) { return F(const char*(*)(nvrtcResult))(r); }
static int w_create(uintptr_t fn, uintptr_t* prog, const char* src, const char* name) {
	return F(nvrtcResult(*)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*))(
		(nvrtcProgram*)prog, src, name, 0, NULL, NULL);
}
static int w_compile(uintptr_t fn, uintptr_t prog, int n, char** opts) {
	return F(nvrtcResult(*)(nvrtcProgram, int, const char* const*))((nvrtcProgram)prog, n, (const char* const*)opts);
}
static int w_size(uintptr_t fn, uintptr_t prog, size_t* n) { return F(nvrtcResult(*)(nvrtcProgram, size_t*))((nvrtcProgram)prog, n); }
static int w_get(uintptr_t fn, uintptr_t prog, char* out) { return F(nvrtcResult(*)(nvrtcProgram, char*))((nvrtcProgram)prog, out); }
static int w_destroy(uintptr_t fn, uintptr_t* prog) { return F(nvrtcResult(*)(nvrtcProgram*))((nvrtcProgram*)prog); }

static char** mk_opts(int n) { return (char**)calloc((size_t)(n > 0 ? n : 1), sizeof(char*)); }
static void set_opt(char** a, int i, char* s) { a[i] = s; }
static void free_opts(char** a, int n) { for (int i = 0; i < n; i++) free(a[i]); free(a); }
*/
import "C"

import (
	"fmt"
	"path/filepath"
	"sort"
	"unsafe"

	"github.com/detcoll/detcoll/internal/dl"
)

var (
	fns [numSyms]C.uintptr_t
	lib *dl.Library
)

func load() error {
	l, err := dl.Open(LibraryEnv, LibraryNames()...)
	if err != nil {
		return &Error{Code: ResultUnavailable, Name: ResultName(ResultUnavailable), Message: err.Error(), Call: "dlopen"}
	}
	for i, s := range symbolNames {
		p, err := l.Sym(s.name)
		if err != nil {
			if s.optional {
				continue
			}
			return &Error{Code: ResultUnavailable, Name: ResultName(ResultUnavailable),
				Message: fmt.Sprintf("%s lacks %s", l.Path(), s.name), Call: "dlsym"}
		}
		fns[i] = C.uintptr_t(p)
	}
	lib = l
	preloadBuiltins(l.Path())
	return nil
}

// preloadBuiltins loads libnvrtc-builtins from the directory NVRTC came
// from. NVRTC opens it by soname when it compiles; when that directory is
// not on the loader path (NVRTC found by absolute path or override), the
// copy already loaded here is the one the loader returns. Best effort.
func preloadBuiltins(nvrtcPath string) {
	if !filepath.IsAbs(nvrtcPath) {
		return
	}
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(nvrtcPath), "libnvrtc-builtins.so.*"))
	sort.Slice(matches, func(i, j int) bool { return len(matches[i]) < len(matches[j]) })
	for _, m := range matches {
		if _, err := dl.Open("", m); err == nil {
			return
		}
	}
}

func libraryPath() string {
	if lib == nil {
		return ""
	}
	return lib.Path()
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
	if err := errorOf("nvrtcVersion", Result(C.w_version(fns[sVersion], &a, &b))); err != nil {
		return 0, 0, err
	}
	return int(a), int(b), nil
}

func rSupportedArchs() ([]int, error) {
	if fns[sGetNumSupportedArchs] == 0 || fns[sGetSupportedArchs] == 0 {
		return nil, nil
	}
	var n C.int
	if err := errorOf("nvrtcGetNumSupportedArchs", Result(C.w_pint(fns[sGetNumSupportedArchs], &n))); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	a := make([]C.int, int(n))
	if err := errorOf("nvrtcGetSupportedArchs", Result(C.w_pint(fns[sGetSupportedArchs], &a[0]))); err != nil {
		return nil, err
	}
	out := make([]int, len(a))
	for i, v := range a {
		out[i] = int(v)
	}
	return out, nil
}

func rCompile(source, name string, options []string, cubin bool) ([]byte, string, error) {
	csrc := C.CString(source)
	defer C.free(unsafe.Pointer(csrc))
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var prog C.uintptr_t
	if err := errorOf("nvrtcCreateProgram", Result(C.w_create(fns[sCreateProgram], &prog, csrc, cname))); err != nil {
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
		err := errorOf("nvrtcCompileProgram", r)
		if e, ok := err.(*Error); ok {
			e.Log = log
			e.Message = fmt.Sprintf("program %s, options %v", name, options)
		}
		return nil, log, err
	}
	sizeFn, getFn, call := fns[sGetPTXSize], fns[sGetPTX], "nvrtcGetPTX"
	if cubin {
		if fns[sGetCUBINSize] == 0 || fns[sGetCUBIN] == 0 {
			return nil, log, &Error{Code: ResultInvalidInput, Name: ResultName(ResultInvalidInput), Call: "nvrtcGetCUBIN", Message: "this NVRTC cannot emit CUBIN"}
		}
		sizeFn, getFn, call = fns[sGetCUBINSize], fns[sGetCUBIN], "nvrtcGetCUBIN"
	}
	var n C.size_t
	if err := errorOf(call+"Size", Result(C.w_size(sizeFn, prog, &n))); err != nil {
		return nil, log, err
	}
	if n == 0 {
		return nil, log, &Error{Code: ResultInvalidInput, Name: ResultName(ResultInvalidInput), Call: call, Message: "empty image"}
	}
	buf := C.malloc(n)
	defer C.free(buf)
	if err := errorOf(call, Result(C.w_get(getFn, prog, (*C.char)(buf)))); err != nil {
		return nil, log, err
	}
	img := C.GoBytes(buf, C.int(n)) // PTX size includes the terminating NUL
	return img, log, nil
}

func programLog(prog C.uintptr_t) string {
	var n C.size_t
	if C.w_size(fns[sGetProgramLogSize], prog, &n) != 0 || n <= 1 {
		return ""
	}
	buf := C.malloc(n)
	defer C.free(buf)
	if C.w_get(fns[sGetProgramLog], prog, (*C.char)(buf)) != 0 {
		return ""
	}
	return C.GoString((*C.char)(buf))
}
