//go:build cgo

package hiprtc

/*
#include <stdint.h>
#include <stddef.h>

// comgr (amd_comgr_status_t is an int enum; 0 is success). hiprtc's own
// trampolines are internal/binding/rtc's: hiprtc shares NVRTC's C ABI.
#define F(T) ((T)(fn))
static int w_isa_count(uintptr_t fn, size_t* n) { return F(int(*)(size_t*))(n); }
static int w_isa_name(uintptr_t fn, size_t i, const char** s) { return F(int(*)(size_t, const char**))(i, s); }
*/
import "C"

import (
	"fmt"

	"github.com/detcoll/detcoll/internal/binding"
	"github.com/detcoll/detcoll/internal/binding/rtc"
	"github.com/detcoll/detcoll/internal/dl"
)

var comgr *dl.Library

func load() error {
	if err := syms.Open(LibraryEnv, LibraryNames()...); err != nil {
		e := binding.LoadFailure[Result, vendor](err, ResultName(rtc.ResultUnavailable))
		if e.Call == "dlsym" {
			e.Message += " (no hiprtc in it)"
		}
		return e
	}
	return nil
}

func comgrPath() string {
	if comgr == nil {
		return ""
	}
	return comgr.Path()
}

func entry(s sym) rtc.Entry { return rtc.Entry{Fn: syms.Ptr(s), Name: syms.API(s)} }

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
	p := rtc.Program{Create: entry(hiprtcCreateProgram), Compile: entry(hiprtcCompileProgram),
		LogSize: entry(hiprtcGetProgramLogSize), Log: entry(hiprtcGetProgramLog), Destroy: entry(hiprtcDestroyProgram),
		Size: entry(hiprtcGetCodeSize), Get: entry(hiprtcGetCode), Empty: "empty code object"}
	return rtc.Compile[Result, vendor](p, errorOf, source, name, options)
}
