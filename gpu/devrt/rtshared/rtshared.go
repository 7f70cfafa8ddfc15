// Package rtshared is the part of gpu/devrt's two implementations
// (gpu/devrt/cudart, gpu/devrt/hiprt) that is the same code over
// internal/binding/gpurt's shared handle types: the stream, event, module,
// function and graph calls, and the devrt.Args adapter over kparams.Args.
// Each implementation embeds Ops instantiated with its binding's Runtime
// (cuda.Runtime, hip.Runtime), so every call still forwards to exactly the
// binding call it made before.
//
// Vendor-neutral: it imports neither binding.
package rtshared

import (
	"fmt"

	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
)

// The flag and attribute values the calls below pass; CUDA and HIP use the
// same ones (internal/cuda and internal/hip name them per vendor).
const (
	streamNonBlocking  = 1
	eventDefault       = 0
	eventDisableTiming = 2
	captureActive      = 1
	funcLocalSizeBytes = 3
	funcNumRegs        = 4
)

// Ops implements the handle calls of devrt.Runtime for the binding whose
// runtime type is R.
type Ops[R gpurt.Runtime] struct{}

type (
	stream[R gpurt.Runtime] = gpurt.Stream[R]
	event[R gpurt.Runtime]  = gpurt.Event[R]
)

// SyncLegacy synchronizes the default stream.
func (Ops[R]) SyncLegacy() error { return stream[R](0).Synchronize() }

// StreamCreate creates a non-blocking stream.
func (Ops[R]) StreamCreate() (devrt.Stream, error) {
	s, err := gpurt.StreamCreate[R](streamNonBlocking)
	return devrt.Stream(s), err
}

// StreamDestroy destroys s.
func (Ops[R]) StreamDestroy(s devrt.Stream) error { return stream[R](s).Destroy() }

// StreamSynchronize waits for s.
func (Ops[R]) StreamSynchronize(s devrt.Stream) error { return stream[R](s).Synchronize() }

// StreamQuery reports whether all work on s has completed (devcomm polls it
// for bounded waits).
func (Ops[R]) StreamQuery(s devrt.Stream) (bool, error) { return stream[R](s).Query() }

// StreamWaitEvent makes s wait for e.
func (Ops[R]) StreamWaitEvent(s devrt.Stream, e devrt.Event) error {
	return stream[R](s).WaitEvent(event[R](e))
}

// StreamCapturing reports whether s is capturing a graph.
func (Ops[R]) StreamCapturing(s devrt.Stream) (bool, error) {
	st, err := stream[R](s).CaptureStatus()
	return st == captureActive, err
}

// EventCreate creates an event, with timing or without.
func (Ops[R]) EventCreate(timing bool) (devrt.Event, error) {
	flags := uint32(eventDisableTiming)
	if timing {
		flags = eventDefault
	}
	e, err := gpurt.EventCreate[R](flags)
	return devrt.Event(e), err
}

// EventRecord records e on s.
func (Ops[R]) EventRecord(e devrt.Event, s devrt.Stream) error {
	return event[R](e).Record(stream[R](s))
}

// EventSynchronize waits for e.
func (Ops[R]) EventSynchronize(e devrt.Event) error { return event[R](e).Synchronize() }

// EventDestroy destroys e.
func (Ops[R]) EventDestroy(e devrt.Event) error { return event[R](e).Destroy() }

// EventElapsed is the time between two recorded events, in milliseconds.
func (Ops[R]) EventElapsed(a, b devrt.Event) (float32, error) {
	return gpurt.ElapsedTime(event[R](a), event[R](b))
}

// ModuleUnload unloads m.
func (Ops[R]) ModuleUnload(m devrt.Module) error { return gpurt.Module[R](m).Unload() }

// ModuleFunction looks up a kernel of m.
func (Ops[R]) ModuleFunction(m devrt.Module, name string) (devrt.Function, error) {
	f, err := gpurt.Module[R](m).Function(name)
	return devrt.Function(f), err
}

// FunctionResources is f's register count and local memory bytes.
func (Ops[R]) FunctionResources(f devrt.Function) (int, int, error) {
	regs, err := gpurt.Function[R](f).Attribute(funcNumRegs)
	local, err2 := gpurt.Function[R](f).Attribute(funcLocalSizeBytes)
	if err == nil {
		err = err2
	}
	return regs, local, err
}

// GraphLaunch launches g on s.
func (Ops[R]) GraphLaunch(g devrt.GraphExec, s devrt.Stream) error {
	return gpurt.GraphExec[R](g).Launch(stream[R](s))
}

// GraphDestroy destroys g.
func (Ops[R]) GraphDestroy(g devrt.GraphExec) error { return gpurt.GraphExec[R](g).Destroy() }

// argsOf is what devrt.Args needs of a binding's Args (a kparams.Args).
type argsOf[A any] interface {
	*A
	Reset()
	Err() error
	Raw(b []byte, align int) *A
	Ptr(p devrt.Ptr) *A
	U64(v uint64) *A
	I64(v int64) *A
	U32(v uint32) *A
	I32(v int32) *A
	F32(v float32) *A
	F64(v float64) *A
}

// Args is a binding's Args (A, e.g. cuda.Args) behind devrt.Args.
type Args[A any, P argsOf[A]] struct{ a A }

func (x *Args[A, P]) p() P                           { return P(&x.a) }
func (x *Args[A, P]) Reset()                         { x.p().Reset() }
func (x *Args[A, P]) Err() error                     { return x.p().Err() }
func (x *Args[A, P]) Raw(b []byte, n int) devrt.Args { x.p().Raw(b, n); return x }
func (x *Args[A, P]) Ptr(v devrt.Ptr) devrt.Args     { x.p().Ptr(v); return x }
func (x *Args[A, P]) U64(v uint64) devrt.Args        { x.p().U64(v); return x }
func (x *Args[A, P]) I64(v int64) devrt.Args         { x.p().I64(v); return x }
func (x *Args[A, P]) U32(v uint32) devrt.Args        { x.p().U32(v); return x }
func (x *Args[A, P]) I32(v int32) devrt.Args         { x.p().I32(v); return x }
func (x *Args[A, P]) F32(v float32) devrt.Args       { x.p().F32(v); return x }
func (x *Args[A, P]) F64(v float64) devrt.Args       { x.p().F64(v); return x }

// Unwrap is the binding's Args inside a (nil for a nil a); an Args another
// runtime made is an error naming who.
func Unwrap[A any, P argsOf[A]](a devrt.Args, who string) (*A, error) {
	if a == nil {
		return nil, nil
	}
	x, ok := a.(*Args[A, P])
	if !ok {
		return nil, fmt.Errorf("%s: kernel arguments of type %T were not made by this runtime", who, a)
	}
	return &x.a, nil
}
