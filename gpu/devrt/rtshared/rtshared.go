// Package rtshared is the part of gpu/devrt's two implementations
// (gpu/devrt/cudart, gpu/devrt/hiprt) that is the same code over
// internal/binding/gpurt's shared handle types: the stream, event, module,
// function and graph calls, the memory, copy, launch, pinned-host and IPC
// calls, and the devrt.Args adapter over kparams.Args. Each implementation
// embeds Ops instantiated with its binding's Runtime and Args (cuda.Runtime
// and cuda.Args, hip.Runtime and hip.Args), so every call still reaches
// exactly the entry point it reached before.
//
// Vendor-neutral: it imports neither binding.
package rtshared

import (
	"fmt"

	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
)

// The flag and attribute values the calls below pass (gpurt's: the same on
// CUDA and HIP).
const (
	streamNonBlocking  = gpurt.StreamNonBlocking
	eventDefault       = gpurt.EventDefault
	eventDisableTiming = gpurt.EventDisableTiming
	captureActive      = gpurt.CaptureActive
	funcLocalSizeBytes = gpurt.FuncLocalSizeBytes
	funcNumRegs        = gpurt.FuncNumRegs
)

// Ops implements the handle, memory and launch calls of devrt.Runtime for
// the binding whose runtime type is R and whose kernel-parameter packer is A.
// Name is the implementation's name, for the error about kernel arguments
// another runtime made.
type Ops[R gpurt.Runtime, A any, P argsOf[A]] struct{ Name string }

type (
	stream[R gpurt.Runtime] = gpurt.Stream[R]
	event[R gpurt.Runtime]  = gpurt.Event[R]
)

// SyncLegacy synchronizes the default stream.
func (Ops[R, A, P]) SyncLegacy() error { return stream[R](0).Synchronize() }

// StreamCreate creates a non-blocking stream.
func (Ops[R, A, P]) StreamCreate() (devrt.Stream, error) {
	s, err := gpurt.StreamCreate[R](streamNonBlocking)
	return devrt.Stream(s), err
}

// StreamDestroy destroys s.
func (Ops[R, A, P]) StreamDestroy(s devrt.Stream) error { return stream[R](s).Destroy() }

// StreamSynchronize waits for s.
func (Ops[R, A, P]) StreamSynchronize(s devrt.Stream) error { return stream[R](s).Synchronize() }

// StreamQuery reports whether all work on s has completed (devcomm polls it
// for bounded waits).
func (Ops[R, A, P]) StreamQuery(s devrt.Stream) (bool, error) { return stream[R](s).Query() }

// StreamWaitEvent makes s wait for e.
func (Ops[R, A, P]) StreamWaitEvent(s devrt.Stream, e devrt.Event) error {
	return stream[R](s).WaitEvent(event[R](e))
}

// StreamCapturing reports whether s is capturing a graph.
func (Ops[R, A, P]) StreamCapturing(s devrt.Stream) (bool, error) {
	st, err := stream[R](s).CaptureStatus()
	return st == captureActive, err
}

// EventCreate creates an event, with timing or without.
func (Ops[R, A, P]) EventCreate(timing bool) (devrt.Event, error) {
	flags := eventDisableTiming
	if timing {
		flags = eventDefault
	}
	e, err := gpurt.EventCreate[R](flags)
	return devrt.Event(e), err
}

// EventRecord records e on s.
func (Ops[R, A, P]) EventRecord(e devrt.Event, s devrt.Stream) error {
	return event[R](e).Record(stream[R](s))
}

// EventSynchronize waits for e.
func (Ops[R, A, P]) EventSynchronize(e devrt.Event) error { return event[R](e).Synchronize() }

// EventDestroy destroys e.
func (Ops[R, A, P]) EventDestroy(e devrt.Event) error { return event[R](e).Destroy() }

// EventElapsed is the time between two recorded events, in milliseconds.
func (Ops[R, A, P]) EventElapsed(a, b devrt.Event) (float32, error) {
	return gpurt.ElapsedTime(event[R](a), event[R](b))
}

// ModuleUnload unloads m.
func (Ops[R, A, P]) ModuleUnload(m devrt.Module) error { return gpurt.Module[R](m).Unload() }

// ModuleFunction looks up a kernel of m.
func (Ops[R, A, P]) ModuleFunction(m devrt.Module, name string) (devrt.Function, error) {
	f, err := gpurt.Module[R](m).Function(name)
	return devrt.Function(f), err
}

// FunctionResources is f's register count and local memory bytes.
func (Ops[R, A, P]) FunctionResources(f devrt.Function) (int, int, error) {
	regs, err := gpurt.Function[R](f).Attribute(funcNumRegs)
	local, err2 := gpurt.Function[R](f).Attribute(funcLocalSizeBytes)
	if err == nil {
		err = err2
	}
	return regs, local, err
}

// GraphLaunch launches g on s.
func (Ops[R, A, P]) GraphLaunch(g devrt.GraphExec, s devrt.Stream) error {
	return gpurt.GraphExec[R](g).Launch(stream[R](s))
}

// GraphDestroy destroys g.
func (Ops[R, A, P]) GraphDestroy(g devrt.GraphExec) error { return gpurt.GraphExec[R](g).Destroy() }

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
	Layout() ([]byte, []int32)
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

// MemAlloc allocates n bytes on the current device.
func (Ops[R, A, P]) MemAlloc(n int) (devrt.Ptr, error) { return gpurt.MemAlloc[R](n) }

// MemFree frees p (0 is a no-op).
func (Ops[R, A, P]) MemFree(p devrt.Ptr) error { return gpurt.MemFree[R](p) }

// MemGetAddressRange is the allocation that contains p.
func (Ops[R, A, P]) MemGetAddressRange(p devrt.Ptr) (devrt.Ptr, uint64, error) {
	return gpurt.MemGetAddressRange[R](p)
}

// MemGetInfo is the current device's free and total memory.
func (Ops[R, A, P]) MemGetInfo() (free, total uint64, err error) { return gpurt.MemGetInfo[R]() }

// MemcpyHtoD copies src to dst, synchronously.
func (Ops[R, A, P]) MemcpyHtoD(dst devrt.Ptr, src []byte) error { return gpurt.MemcpyHtoD[R](dst, src) }

// MemcpyDtoH copies src into dst, synchronously.
func (Ops[R, A, P]) MemcpyDtoH(dst []byte, src devrt.Ptr) error { return gpurt.MemcpyDtoH[R](dst, src) }

// MemcpyDtoD copies n bytes between device buffers.
func (Ops[R, A, P]) MemcpyDtoD(dst, src devrt.Ptr, n int) error {
	return gpurt.MemcpyDtoD[R](dst, src, n)
}

// MemsetD8 sets n bytes at p to v.
func (Ops[R, A, P]) MemsetD8(p devrt.Ptr, v byte, n int) error { return gpurt.MemsetD8[R](p, v, n) }

// MemcpyDtoDAsync enqueues a device-to-device copy on s.
func (Ops[R, A, P]) MemcpyDtoDAsync(dst, src devrt.Ptr, n int, s devrt.Stream) error {
	return gpurt.MemcpyDtoDAsync(dst, src, n, stream[R](s))
}

// ModuleLoad loads a compiled image on the current device.
func (Ops[R, A, P]) ModuleLoad(image []byte) (devrt.Module, error) {
	m, err := gpurt.LoadModule[R](image)
	return devrt.Module(m), err
}

// NewArgs is an empty kernel-parameter packer of this binding.
func (Ops[R, A, P]) NewArgs() devrt.Args { return new(Args[A, P]) }

// Launch enqueues f on s with a's parameters (a from NewArgs, or nil).
func (o Ops[R, A, P]) Launch(f devrt.Function, grid, block devrt.Dim3, shared uint32, s devrt.Stream, a devrt.Args) error {
	pa, err := Unwrap[A, P](a, o.Name)
	if err != nil {
		return err
	}
	return gpurt.LaunchKernel(gpurt.Function[R](f), gpurt.Dim3(grid), gpurt.Dim3(block), shared, stream[R](s), P(pa))
}

// HostAlloc allocates n bytes of pinned host memory.
func (Ops[R, A, P]) HostAlloc(n int) (devrt.HostMem, error) {
	h, err := gpurt.MemAllocHost[R](n)
	return devrt.HostMem{Bytes: h.Bytes(), Handle: h}, err
}

// HostFree frees memory from HostAlloc (a HostMem another runtime made is
// a no-op, as a zero one).
func (Ops[R, A, P]) HostFree(h devrt.HostMem) error {
	hm, _ := h.Handle.(gpurt.HostMem[R])
	return gpurt.MemFreeHost(hm)
}

// IpcGetMemHandle exports the allocation that contains p.
func (Ops[R, A, P]) IpcGetMemHandle(p devrt.Ptr) (devrt.IpcHandle, error) {
	h, err := gpurt.IpcGetMemHandle[R](p)
	return devrt.IpcHandle(h), err
}

// IpcOpenMemHandle maps a peer's exported allocation.
func (Ops[R, A, P]) IpcOpenMemHandle(h devrt.IpcHandle) (devrt.Ptr, error) {
	return gpurt.IpcOpenMemHandle(gpurt.IpcMemHandle[R](h))
}

// IpcCloseMemHandle unmaps memory from IpcOpenMemHandle.
func (Ops[R, A, P]) IpcCloseMemHandle(p devrt.Ptr) error { return gpurt.IpcCloseMemHandle[R](p) }
