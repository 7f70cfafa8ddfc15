// Package gpurt is the shared half of the CUDA driver and HIP runtime
// bindings (internal/cuda, internal/hip): the handle types whose calls have
// the same C ABI on both (streams, events, graphs, modules, functions:
// pointer-sized handles, int flags, int results), with their methods written
// once, and the memory, copy, launch and IPC calls, whose C signatures differ
// only in the device-pointer type (integer CUdeviceptr, void* on HIP) and
// the pinned allocator's flags: mem.go, with the flag and enum values both
// vendors share (consts.go). Each binding instantiates them with its Runtime, a zero-size type
// that maps an Op to its own entry point (the role table internal/bindgen
// writes from its symbols.txt) and runs its call prologue and error mapping;
// cuda.Stream is gpurt.Stream[cuda's runtime], hip.Stream
// gpurt.Stream[hip's runtime], two distinct types.
//
// Vendor-neutral: it names no library and no symbol. Built without cgo every
// trampoline returns CodeUnavailable (the bindings' load fails first, so no
// call gets that far).
package gpurt

import "github.com/detcoll/detcoll/internal/binding"

// Op is an entry point by its role, the same on both vendors.
type Op int

// The roles. Each binding's symbol table names the entry point of every one.
const (
	OpStreamCreate Op = iota
	OpStreamDestroy
	OpStreamSynchronize
	OpStreamQuery
	OpStreamWaitEvent
	OpStreamBeginCapture
	OpStreamEndCapture
	OpStreamIsCapturing
	OpEventCreate
	OpEventRecord
	OpEventSynchronize
	OpEventQuery
	OpEventDestroy
	OpEventElapsedTime
	OpModuleLoadData
	OpModuleUnload
	OpModuleGetFunction
	OpFuncGetAttribute
	OpGraphInstantiate
	OpGraphLaunch
	OpGraphDestroy
	OpGraphExecDestroy
	OpMemGetInfo
	OpMemAlloc
	OpMemFree
	OpMemGetAddressRange
	OpMemAllocHost
	OpMemFreeHost
	OpMemcpyHtoD
	OpMemcpyDtoH
	OpMemcpyDtoD
	OpMemcpyHtoDAsync
	OpMemcpyDtoHAsync
	OpMemcpyDtoDAsync
	OpMemsetD8
	OpMemsetD8Async
	OpLaunchKernel
	OpIpcGetMemHandle
	OpIpcOpenMemHandle
	OpIpcCloseMemHandle
	NumOps
)

// opNames are the roles' names, by which internal/bindgen's role= lines
// name them (OpStreamCreate is "StreamCreate").
var opNames = [NumOps]string{"StreamCreate", "StreamDestroy", "StreamSynchronize", "StreamQuery", "StreamWaitEvent",
	"StreamBeginCapture", "StreamEndCapture", "StreamIsCapturing", "EventCreate", "EventRecord", "EventSynchronize",
	"EventQuery", "EventDestroy", "EventElapsedTime", "ModuleLoadData", "ModuleUnload", "ModuleGetFunction",
	"FuncGetAttribute", "GraphInstantiate", "GraphLaunch", "GraphDestroy", "GraphExecDestroy",
	"MemGetInfo", "MemAlloc", "MemFree", "MemGetAddressRange", "MemAllocHost", "MemFreeHost", "MemcpyHtoD",
	"MemcpyDtoH", "MemcpyDtoD", "MemcpyHtoDAsync", "MemcpyDtoHAsync", "MemcpyDtoDAsync", "MemsetD8",
	"MemsetD8Async", "LaunchKernel", "IpcGetMemHandle", "IpcOpenMemHandle", "IpcCloseMemHandle"}

// String is the role's name.
func (o Op) String() string {
	if o >= 0 && o < NumOps {
		return opNames[o]
	}
	return "Op(?)"
}

// OpNamed is the role called name ("StreamCreate"), for the generator.
func OpNamed(name string) (Op, bool) {
	for i, n := range opNames {
		if n == name {
			return Op(i), true
		}
	}
	return 0, false
}

// Runtime is a binding's runtime type: a zero-size type per binding (so
// that cuda.Stream and hip.Stream are distinct types) whose one method is
// its Binding, built once by NewBinding from the binding's symbol table.
type Runtime interface {
	Binding() *Binding
}

// Binding is a binding's side of the shared calls: which entry point plays
// each Op (the Role of its table's symbols, from symbols.txt's role=
// entries), the binding's call prologue (load, optional-symbol check,
// result → its *Error: an internal/binding Error, so binding.CodeOf and
// binding.Annotate reach its code and message), its invalid-value error for
// calls refused before they are made (negative size, empty grid), and its
// ABI (mem.go).
type Binding struct {
	call    func(op Op, do func(fn uintptr) int32) error
	invalid func(op Op, message string) error
	abi     ABI
}

// NewBinding is the Binding of a table whose symbols name their roles.
// call is the binding's prologue around one entry point's call; names and
// invalidCode give the invalid-value error its code and name (Call is the
// entry point's documented name). A role no symbol plays (internal/bindgen
// refuses such a list) fails its calls with the invalid-value error.
func NewBinding[S ~int, R ~int32, V binding.Vendor](t *binding.Table[S], call func(S, func() R) error,
	names func(R) string, invalidCode R, abi ABI) *Binding {
	var roles [NumOps]S
	var have [NumOps]bool
	for i, sym := range t.Symbols {
		if op, ok := OpNamed(sym.Role); ok {
			roles[op], have[op] = S(i), true
		}
	}
	invalid := func(op Op, message string) error {
		name := "role " + op.String()
		if op >= 0 && op < NumOps && have[op] {
			name = t.API(roles[op])
		}
		return &binding.Error[R, V]{Code: invalidCode, Name: names(invalidCode), Message: message, Call: name}
	}
	return &Binding{
		call: func(op Op, do func(fn uintptr) int32) error {
			if op < 0 || op >= NumOps || !have[op] {
				return invalid(op, "no entry point plays this role")
			}
			s := roles[op]
			return call(s, func() R { return R(do(t.Ptr(s))) })
		},
		invalid: invalid,
		abi:     abi,
	}
}

// CaptureMode is a stream capture mode (CUstreamCaptureMode,
// hipStreamCaptureMode: the same values).
type CaptureMode int32

// CaptureStatus is a stream capture status (CUstreamCaptureStatus,
// hipStreamCaptureStatus: the same values).
type CaptureStatus int32

// FunctionAttribute is a kernel attribute (CUfunction_attribute,
// hipFunction_attribute: the same values for the ones detcoll reads).
type FunctionAttribute int32

// Stream is a stream handle; the zero value is the default stream.
type Stream[R Runtime] uintptr

// Event is an event handle.
type Event[R Runtime] uintptr

// Module is a loaded module (CUBIN, PTX or code object).
type Module[R Runtime] uintptr

// Function is a kernel of a Module.
type Function[R Runtime] uintptr

// Graph is a captured graph.
type Graph[R Runtime] uintptr

// GraphExec is an instantiated, launchable graph.
type GraphExec[R Runtime] uintptr

func call[R Runtime](op Op, do func(fn uintptr) int32) error {
	var r R
	return r.Binding().call(op, do)
}

// query maps "not ready" to (false, nil).
func query[R Runtime](op Op, h uintptr) (bool, error) {
	err := call[R](op, func(fn uintptr) int32 { return cH(fn, h) })
	if c, ok := binding.CodeOf(err); ok && c == int32(ResultNotReady) {
		return false, nil
	}
	return err == nil, err
}

// StreamCreate creates a stream with flags (0: default; 1: non-blocking).
func StreamCreate[R Runtime](flags uint32) (Stream[R], error) {
	var h uintptr
	err := call[R](OpStreamCreate, func(fn uintptr) int32 { return cCreate(fn, &h, flags) })
	return Stream[R](h), err
}

// Destroy destroys the stream (the default stream is not destroyed).
func (s Stream[R]) Destroy() error {
	if s == 0 {
		return nil
	}
	return call[R](OpStreamDestroy, func(fn uintptr) int32 { return cH(fn, uintptr(s)) })
}

// Synchronize waits for all work queued on s.
func (s Stream[R]) Synchronize() error {
	return call[R](OpStreamSynchronize, func(fn uintptr) int32 { return cH(fn, uintptr(s)) })
}

// Query reports whether all work on s has completed.
func (s Stream[R]) Query() (bool, error) { return query[R](OpStreamQuery, uintptr(s)) }

// WaitEvent makes future work on s wait for e.
func (s Stream[R]) WaitEvent(e Event[R]) error {
	return call[R](OpStreamWaitEvent, func(fn uintptr) int32 { return cHHU(fn, uintptr(s), uintptr(e), 0) })
}

// BeginCapture starts capturing s into a graph. With the global or
// thread-local mode EndCapture must run on the same OS thread: capture
// inside the binding's Do (or use its Capture).
func (s Stream[R]) BeginCapture(mode CaptureMode) error {
	return call[R](OpStreamBeginCapture, func(fn uintptr) int32 { return cHI(fn, uintptr(s), int32(mode)) })
}

// EndCapture ends the capture and returns the graph (the caller destroys it).
func (s Stream[R]) EndCapture() (Graph[R], error) {
	var g uintptr
	err := call[R](OpStreamEndCapture, func(fn uintptr) int32 { return cHPH(fn, uintptr(s), &g) })
	return Graph[R](g), err
}

// CaptureStatus reports whether s is capturing.
func (s Stream[R]) CaptureStatus() (CaptureStatus, error) {
	var st int32
	err := call[R](OpStreamIsCapturing, func(fn uintptr) int32 { return cHPI(fn, uintptr(s), &st) })
	return CaptureStatus(st), err
}

// EventCreate creates an event with flags (0 records timing).
func EventCreate[R Runtime](flags uint32) (Event[R], error) {
	var h uintptr
	err := call[R](OpEventCreate, func(fn uintptr) int32 { return cCreate(fn, &h, flags) })
	return Event[R](h), err
}

// Record enqueues e on s.
func (e Event[R]) Record(s Stream[R]) error {
	return call[R](OpEventRecord, func(fn uintptr) int32 { return cHH(fn, uintptr(e), uintptr(s)) })
}

// Synchronize waits for e.
func (e Event[R]) Synchronize() error {
	return call[R](OpEventSynchronize, func(fn uintptr) int32 { return cH(fn, uintptr(e)) })
}

// Query reports whether e has completed.
func (e Event[R]) Query() (bool, error) { return query[R](OpEventQuery, uintptr(e)) }

// Destroy destroys the event.
func (e Event[R]) Destroy() error {
	if e == 0 {
		return nil
	}
	return call[R](OpEventDestroy, func(fn uintptr) int32 { return cH(fn, uintptr(e)) })
}

// ElapsedTime is the time in milliseconds between two recorded events.
func ElapsedTime[R Runtime](start, end Event[R]) (float32, error) {
	var ms float32
	err := call[R](OpEventElapsedTime, func(fn uintptr) int32 { return cElapsed(fn, &ms, uintptr(start), uintptr(end)) })
	return ms, err
}

// ModuleLoadData loads image (non-empty: the binding checks) on the current
// context or device. The image is copied to C memory for the call.
func ModuleLoadData[R Runtime](image []byte) (Module[R], error) {
	var m uintptr
	err := call[R](OpModuleLoadData, func(fn uintptr) int32 { return cModLoad(fn, &m, image) })
	return Module[R](m), err
}

// Unload unloads the module.
func (m Module[R]) Unload() error {
	if m == 0 {
		return nil
	}
	return call[R](OpModuleUnload, func(fn uintptr) int32 { return cH(fn, uintptr(m)) })
}

// Function looks up a kernel by its (extern "C") name; an error names it.
func (m Module[R]) Function(name string) (Function[R], error) {
	var f uintptr
	err := call[R](OpModuleGetFunction, func(fn uintptr) int32 { return cGetFn(fn, &f, uintptr(m), name) })
	binding.Annotate(err, " (kernel "+name+")")
	return Function[R](f), err
}

// Attribute reads a function attribute (registers, local memory …).
func (f Function[R]) Attribute(a FunctionAttribute) (int, error) {
	var v int32
	err := call[R](OpFuncGetAttribute, func(fn uintptr) int32 { return cFuncAttr(fn, &v, int32(a), uintptr(f)) })
	return int(v), err
}

// Instantiate makes an executable graph (flags 0).
func (g Graph[R]) Instantiate() (GraphExec[R], error) {
	var e uintptr
	err := call[R](OpGraphInstantiate, func(fn uintptr) int32 { return cInstantiate(fn, &e, uintptr(g)) })
	return GraphExec[R](e), err
}

// Destroy destroys the graph.
func (g Graph[R]) Destroy() error {
	if g == 0 {
		return nil
	}
	return call[R](OpGraphDestroy, func(fn uintptr) int32 { return cH(fn, uintptr(g)) })
}

// Launch enqueues the graph on s.
func (e GraphExec[R]) Launch(s Stream[R]) error {
	return call[R](OpGraphLaunch, func(fn uintptr) int32 { return cHH(fn, uintptr(e), uintptr(s)) })
}

// Destroy destroys the executable graph.
func (e GraphExec[R]) Destroy() error {
	if e == 0 {
		return nil
	}
	return call[R](OpGraphExecDestroy, func(fn uintptr) int32 { return cH(fn, uintptr(e)) })
}

// Capture records what fn enqueues on s into an executable graph. do runs
// its argument on one locked OS thread with the device current (the
// binding's Context.Do or Device.Do); the graph itself is destroyed after
// instantiation. The caller destroys the returned GraphExec.
func Capture[R Runtime](do func(func() error) error, s Stream[R], mode CaptureMode, fn func() error) (GraphExec[R], error) {
	var exec GraphExec[R]
	err := do(func() error {
		if err := s.BeginCapture(mode); err != nil {
			return err
		}
		ferr := fn()
		g, err := s.EndCapture()
		if ferr != nil {
			_ = g.Destroy()
			return ferr
		}
		if err != nil {
			return err
		}
		defer g.Destroy()
		exec, err = g.Instantiate()
		return err
	})
	return exec, err
}
