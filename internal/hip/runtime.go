package hip

import "github.com/detcoll/detcoll/internal/binding/gpurt"

// rt is this binding's side of internal/binding/gpurt's shared handle types
// (Stream, Event, Module, Function, Graph, GraphExec): roles (symbols.txt's
// role= entries) name the entry point of each call, call runs the prologue
// and maps the result to this package's *Error.
type rt struct{}

// Runtime is the type argument of this binding's handle types (Stream is
// gpurt.Stream[Runtime]): what gpu/devrt's shared implementation
// (gpu/devrt/rtshared) is instantiated with.
type Runtime = rt

func (rt) Call(op gpurt.Op, do func(fn uintptr) int32) error {
	s := roles[op]
	return call(s, func() Result { return Result(do(syms.Ptr(s))) })
}

// Invalid is the invalid-value error of a call refused before it is made,
// named by op's documented entry point.
func (rt) Invalid(op gpurt.Op, message string) error {
	return &Error{Code: ResultInvalidValue, Name: ResultName(ResultInvalidValue), Message: message, Call: syms.API(roles[op])}
}

// ABI is symbols.txt's abi line.
func (rt) ABI() gpurt.ABI { return abi }
