package binding

import (
	"errors"
	"fmt"
	"strings"
)

// Codes every binding reserves for itself (negative: never returned by a
// vendor library).
const (
	CodeSymbolNotFound = -1 // an optional symbol the call needs is missing
	CodeUnavailable    = -2 // the library could not be loaded
)

// Code is a binding's result type (CUresult, hipError_t, …).
type Code interface{ ~int32 }

// Vendor names a binding: a zero-size type whose Name is the message
// prefix ("cuda") and whose Unavailable is the binding's ErrUnavailable,
// which load failures (CodeUnavailable) wrap.
type Vendor interface {
	Name() string
	Unavailable() error
}

// Error is a failed library call (or a call refused before it was made).
type Error[R Code, V Vendor] struct {
	Code    R
	Name    string // the vendor's name of the code
	Message string // the library's description, when known
	Call    string // the symbol called
}

func (e *Error[R, V]) Error() string {
	var v V
	return format(v.Name(), e.Call, e.Name, e.Message, "")
}

// Is reports whether target is an *Error with the same code.
func (e *Error[R, V]) Is(target error) bool {
	var t *Error[R, V]
	return errors.As(target, &t) && t.Code == e.Code
}

// Unwrap makes load failures match the vendor's ErrUnavailable.
func (e *Error[R, V]) Unwrap() error { return unwrap[V](int32(e.Code)) }

func (e *Error[R, V]) code() int32       { return int32(e.Code) }
func (e *Error[R, V]) annotate(s string) { e.Message += s }

// LogError is Error with a compiler's program log (NVRTC, hiprtc): for a
// failed compilation Log holds what the compiler said.
type LogError[R Code, V Vendor] struct {
	Code    R
	Name    string
	Message string
	Call    string
	Log     string
}

func (e *LogError[R, V]) Error() string {
	var v V
	return format(v.Name(), e.Call, e.Name, e.Message, e.Log)
}

// Is matches *LogError values by code.
func (e *LogError[R, V]) Is(target error) bool {
	var t *LogError[R, V]
	return errors.As(target, &t) && t.Code == e.Code
}

// Unwrap makes load failures match the vendor's ErrUnavailable.
func (e *LogError[R, V]) Unwrap() error { return unwrap[V](int32(e.Code)) }

func (e *LogError[R, V]) code() int32       { return int32(e.Code) }
func (e *LogError[R, V]) annotate(s string) { e.Message += s }

// coded is what Error and LogError of every binding have in common.
type coded interface {
	code() int32
	annotate(s string)
}

// CodeOf is the result code of err when it is an *Error or *LogError of any
// binding (not unwrapped: the error a call returned).
func CodeOf(err error) (int32, bool) {
	if c, ok := err.(coded); ok {
		return c.code(), true
	}
	return 0, false
}

// Annotate appends s to the message of err when it is an *Error or
// *LogError of any binding; other errors are left alone.
func Annotate(err error, s string) {
	if c, ok := err.(coded); ok {
		c.annotate(s)
	}
}

func format(vendor, call, name, msg, log string) string {
	s := vendor + ": " + call + ": " + name
	if msg != "" {
		s += " (" + msg + ")"
	}
	if log != "" {
		s += "\n" + strings.TrimSpace(log)
	}
	return s
}

func unwrap[V Vendor](code int32) error {
	if code == CodeUnavailable {
		var v V
		return v.Unavailable()
	}
	return nil
}

// Name is the name of code r in names, or fallback formatted with r (a
// format with one %d, e.g. "CUDA_ERROR_%d").
func Name[R Code](names map[R]string, fallback string, r R) string {
	if n, ok := names[r]; ok {
		return n
	}
	return fmt.Sprintf(fallback, int32(r))
}

// LoadFailure is err (a *LoadError from Table.Open) as a binding's *Error
// with code CodeUnavailable and that code's name.
func LoadFailure[R Code, V Vendor](err error, name string) *Error[R, V] {
	e := &Error[R, V]{Code: R(CodeUnavailable), Name: name, Message: err.Error(), Call: "load"}
	if le, ok := err.(*LoadError); ok {
		e.Message, e.Call = le.Message, le.Call
	}
	return e
}

// ErrorOf is the bindings' result → *Error mapping for a call of entry
// point s of t: nil for 0 (success on every library detcoll binds); Call is
// the exported symbol called; the not-found code says that the loaded lib
// (e.g. "driver") does not export the entry point; any other code is named by
// names, then by what describe says (the library's own name and message for
// the code, each "" to keep the table's name or no message: each binding's
// rules for trusting its library's answer).
func ErrorOf[S ~int, R Code, V Vendor](t *Table[S], s S, r, notFound R, lib string, names func(R) string,
	describe func(R) (name, message string)) error {
	if r == 0 {
		return nil
	}
	e := &Error[R, V]{Code: r, Name: names(r), Call: t.Resolved(s)}
	if r == notFound {
		e.Message = "the loaded " + lib + " does not export " + t.API(s)
		return e
	}
	if n, m := describe(r); n != "" || m != "" {
		if n != "" {
			e.Name = n
		}
		e.Message = m
	}
	return e
}
