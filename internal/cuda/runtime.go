package cuda

import "github.com/detcoll/detcoll/internal/binding/gpurt"

// rt is this binding's side of internal/binding/gpurt's shared handle types
// (Stream, Event, Module, Function, Graph, GraphExec): roles (symbols.txt's
// role= entries) name the entry point of each call, call runs the prologue.
type rt struct{}

func (rt) Call(op gpurt.Op, do func(fn uintptr) int32) error {
	s := roles[op]
	return call(s, func() Result { return Result(do(syms.Ptr(s))) })
}

func (rt) NotReady(err error) bool {
	e, ok := err.(*Error)
	return ok && e.Code == ResultNotReady
}

func (rt) Annotate(err error, s string) {
	if e, ok := err.(*Error); ok {
		e.Message += s
	}
}
