// Package rtc is the shared half of the two run-time kernel compilers'
// bindings, internal/nvrtc and internal/hiprtc: hiprtc mirrors NVRTC's C
// ABI (program handle, create/compile/log/size/get/destroy, the version and
// error-string calls) and its result codes, so the trampolines, the compile
// flow, Result and Library (load, path, version, error mapping) are written
// once here and each binding passes its table, its resolved entry points
// and its names (for errors).
//
// Vendor-neutral: it names no library and no symbol; every name it prints
// comes from the caller's Entry values. Built without cgo every call fails
// with ErrNoCgo (the bindings never get that far: their load fails first).
package rtc

import (
	"errors"

	"github.com/detcoll/detcoll/internal/binding"
)

// Entry is one resolved entry point: its address and the documented name
// errors report.
type Entry struct {
	Fn   uintptr
	Name string
}

// Program names the entry points a compilation uses. Size and Get are the
// image's (PTX, CUBIN or code object).
type Program struct {
	Create, Compile, LogSize, Log, Destroy, Size, Get Entry
	Empty                                             string // the message when the compiler returns an empty image
}

// ErrNoCgo is returned by every call of a build without cgo.
var ErrNoCgo = errors.New("rtc: built without cgo")

// ErrorOf is a compiler's result r from call as the binding's
// *binding.LogError (nil for success, code 0): named by name, described by
// the compiler's GetErrorString (errorString, 0 when not loaded) when that
// says more than the name.
func ErrorOf[R binding.Code, V binding.Vendor](errorString uintptr, name func(R) string, call string, r R) error {
	if r == 0 {
		return nil
	}
	e := &binding.LogError[R, V]{Code: r, Name: name(r), Call: call}
	if m, ok := ErrorString(errorString, int32(r)); ok && m != e.Name {
		e.Message = m
	}
	return e
}
