package rtc

import (
	"fmt"

	"github.com/detcoll/detcoll/internal/binding"
)

// Result is an nvrtcResult or a hiprtcResult: hiprtc mirrors NVRTC's codes,
// so both bindings' Result is this type (their Error types stay distinct
// by vendor, their names per library).
type Result int32

// The results the bindings name (NVRTC_* and HIPRTC_*: the same values).
// ResultUnavailable is detcoll's own (negative, never returned).
const (
	ResultSuccess      Result = 0
	ResultInvalidInput Result = 3
	ResultInvalidOpt   Result = 5
	ResultCompilation  Result = 6
	ResultUnavailable  Result = -2
)

// Library is what the compiler bindings keep the same around their symbol
// table: the once-per-process load, the loaded path, the version and the
// result → error mapping (with the compiler's own description of a code).
// Each binding has one, built from its generated table.
type Library[S ~int, V binding.Vendor] struct {
	Table       *binding.Table[S]
	Load        func() error        // the binding's load (open the table, and what else it needs)
	Names       func(Result) string // the binding's code → name table
	VersionSym  S                   // nvrtcVersion, hiprtcVersion
	ErrorString S                   // nvrtcGetErrorString, hiprtcGetErrorString
}

// Init loads the library once per process; later calls return the first
// outcome.
func (l *Library[S, V]) Init() error { return l.Table.Load(l.Load) }

// Path is the library loaded ("" if none).
func (l *Library[S, V]) Path() string { return l.Table.LoadedPath(l.Init) }

// ErrorOf maps r from call to the binding's *LogError (nil on success).
func (l *Library[S, V]) ErrorOf(call string, r Result) error {
	return ErrorOf[Result, V](l.Table.Ptr(l.ErrorString), l.Names, call, r)
}

// Version is the compiler's (major, minor).
func (l *Library[S, V]) Version() (major, minor int, err error) {
	if err := l.Init(); err != nil {
		return 0, 0, err
	}
	major, minor, r := Version(l.Table.Ptr(l.VersionSym))
	if err := l.ErrorOf(l.Table.API(l.VersionSym), Result(r)); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// VersionString is "major.minor", "" when unavailable.
func (l *Library[S, V]) VersionString() string {
	ma, mi, err := l.Version()
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d.%d", ma, mi)
}

// NoCgo is a binding's load error when built without cgo: no compiler can
// be loaded, so the error wraps the binding's ErrUnavailable.
func NoCgo[V binding.Vendor](names func(Result) string) error {
	return &binding.LogError[Result, V]{Code: ResultUnavailable, Name: names(ResultUnavailable),
		Message: "unavailable: built without cgo", Call: "dlopen"}
}
