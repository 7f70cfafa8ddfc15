//go:build cgo

package nvrtc

import (
	"path/filepath"
	"sort"

	"github.com/detcoll/detcoll/internal/binding"
	"github.com/detcoll/detcoll/internal/binding/rtc"
	"github.com/detcoll/detcoll/internal/dl"
)

// The trampolines and the compile flow are internal/binding/rtc's (hiprtc
// shares NVRTC's C ABI); this file binds them to NVRTC's table.

func load() error {
	if err := syms.Open(LibraryEnv, LibraryNames()...); err != nil {
		return binding.LoadFailure[Result, vendor](err, ResultName(rtc.ResultUnavailable))
	}
	preloadBuiltins(syms.Path())
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

func entry(s sym) rtc.Entry { return rtc.Entry{Fn: syms.Ptr(s), Name: syms.API(s)} }

func rSupportedArchs() ([]int, error) {
	if !syms.Have(nvrtcGetNumSupportedArchs) || !syms.Have(nvrtcGetSupportedArchs) {
		return nil, nil
	}
	n, r := rtc.Ints(syms.Ptr(nvrtcGetNumSupportedArchs), 1)
	if err := errorOf(syms.API(nvrtcGetNumSupportedArchs), Result(r)); err != nil {
		return nil, err
	}
	if n[0] <= 0 {
		return nil, nil
	}
	archs, r := rtc.Ints(syms.Ptr(nvrtcGetSupportedArchs), n[0])
	if err := errorOf(syms.API(nvrtcGetSupportedArchs), Result(r)); err != nil {
		return nil, err
	}
	return archs, nil
}

func rCompile(source, name string, options []string, cubin bool) ([]byte, string, error) {
	p := rtc.Program{Create: entry(nvrtcCreateProgram), Compile: entry(nvrtcCompileProgram),
		LogSize: entry(nvrtcGetProgramLogSize), Log: entry(nvrtcGetProgramLog), Destroy: entry(nvrtcDestroyProgram),
		Size: entry(nvrtcGetPTXSize), Get: entry(nvrtcGetPTX), Empty: "empty image"}
	if cubin {
		if !syms.Have(nvrtcGetCUBINSize) || !syms.Have(nvrtcGetCUBIN) {
			return nil, "", &Error{Code: rtc.ResultInvalidInput, Name: ResultName(rtc.ResultInvalidInput), Call: "nvrtcGetCUBIN", Message: "this NVRTC cannot emit CUBIN"}
		}
		p.Size, p.Get = entry(nvrtcGetCUBINSize), entry(nvrtcGetCUBIN)
	}
	return rtc.Compile[Result, vendor](p, errorOf, source, name, options)
}
