package gpurt

import (
	"errors"
	"reflect"
	"testing"
	"unsafe"

	"github.com/detcoll/detcoll/internal/binding"
)

// fakeRT records the roles called and fails the ones in fail; it never
// calls do (no library), so the handles it "returns" are 0.
type fakeRT struct{}

var (
	calls []Op
	fail  = map[Op]error{}
)

type vendor struct{}

func (vendor) Name() string       { return "fake" }
func (vendor) Unavailable() error { return errors.New("fake: unavailable") }

type fakeErr = binding.Error[int32, vendor]

func (fakeRT) Binding() *Binding { return fakeBinding }

var fakeBinding = testBinding(func(op Op, do func(uintptr) int32) error {
	calls = append(calls, op)
	return fail[op]
}, fakeInvalid, ABI{})

// testBinding is a Binding from its parts, standing in for a vendor's.
func testBinding(call func(op Op, do func(fn uintptr) int32) error, invalid func(op Op, message string) error, abi ABI) *Binding {
	return &Binding{call: call, invalid: invalid, abi: abi}
}

// fakeInvalid names the op, as a binding names its documented entry point.
func fakeInvalid(op Op, message string) error {
	return &fakeErr{Code: 1, Name: "INVALID_VALUE", Message: message, Call: op.String()}
}

func reset() { calls, fail = nil, map[Op]error{} }

func TestRoles(t *testing.T) {
	reset()
	s, e := Stream[fakeRT](1), Event[fakeRT](2)
	_ = s.Synchronize()
	_, _ = s.Query()
	_ = s.WaitEvent(e)
	_ = s.BeginCapture(0)
	_, _ = s.EndCapture()
	_, _ = s.CaptureStatus()
	_ = s.Destroy()
	_ = e.Record(s)
	_ = e.Synchronize()
	_, _ = e.Query()
	_ = e.Destroy()
	_, _ = ElapsedTime(e, e)
	_, _ = StreamCreate[fakeRT](0)
	_, _ = EventCreate[fakeRT](0)
	_, _ = ModuleLoadData[fakeRT]([]byte{1})
	_ = Module[fakeRT](3).Unload()
	_, _ = Module[fakeRT](3).Function("k")
	_, _ = Function[fakeRT](4).Attribute(0)
	_, _ = Graph[fakeRT](5).Instantiate()
	_ = Graph[fakeRT](5).Destroy()
	_ = GraphExec[fakeRT](6).Launch(s)
	_ = GraphExec[fakeRT](6).Destroy()
	want := []Op{OpStreamSynchronize, OpStreamQuery, OpStreamWaitEvent, OpStreamBeginCapture, OpStreamEndCapture,
		OpStreamIsCapturing, OpStreamDestroy, OpEventRecord, OpEventSynchronize, OpEventQuery, OpEventDestroy,
		OpEventElapsedTime, OpStreamCreate, OpEventCreate, OpModuleLoadData, OpModuleUnload, OpModuleGetFunction,
		OpFuncGetAttribute, OpGraphInstantiate, OpGraphDestroy, OpGraphLaunch, OpGraphExecDestroy}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("roles called %v, want %v", calls, want)
	}
}

func TestZeroHandlesAreNoOps(t *testing.T) {
	reset()
	for _, err := range []error{Stream[fakeRT](0).Destroy(), Event[fakeRT](0).Destroy(), Module[fakeRT](0).Unload(),
		Graph[fakeRT](0).Destroy(), GraphExec[fakeRT](0).Destroy()} {
		if err != nil {
			t.Error(err)
		}
	}
	if len(calls) != 0 {
		t.Errorf("destroying zero handles called %v", calls)
	}
}

func TestQueryAndAnnotate(t *testing.T) {
	reset()
	fail[OpStreamQuery] = &fakeErr{Code: int32(ResultNotReady)}
	if done, err := Stream[fakeRT](1).Query(); done || err != nil {
		t.Errorf("not ready stream: Query = %v, %v", done, err)
	}
	boom := errors.New("boom")
	fail[OpEventQuery] = boom
	if done, err := Event[fakeRT](1).Query(); done || err != boom {
		t.Errorf("failing Query = %v, %v", done, err)
	}
	fail[OpEventSynchronize] = boom
	if err := Event[fakeRT](2).Synchronize(); err != boom {
		t.Errorf("failing Synchronize = %v", err)
	}
	fail[OpModuleGetFunction] = &fakeErr{Code: 500, Name: "NOT_FOUND", Call: "getFunction", Message: "named symbol not found"}
	if _, err := Module[fakeRT](1).Function("reduce_f32"); err == nil || err.Error() != "fake: getFunction: NOT_FOUND (named symbol not found (kernel reduce_f32))" {
		t.Errorf("Function error = %v", err)
	}
}

func TestCapture(t *testing.T) {
	reset()
	locked := false
	do := func(f func() error) error { locked = true; defer func() { locked = false }(); return f() }
	ran := false
	_, err := Capture(do, Stream[fakeRT](1), 0, func() error {
		if !locked {
			t.Error("fn ran outside do")
		}
		ran = true
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Capture = %v (ran %v)", err, ran)
	}
	// EndCapture's graph 0 is not destroyed; the instantiated one is kept.
	want := []Op{OpStreamBeginCapture, OpStreamEndCapture, OpGraphInstantiate}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("Capture called %v, want %v", calls, want)
	}

	reset()
	fnErr := errors.New("enqueue failed")
	if _, err := Capture(do, Stream[fakeRT](1), 0, func() error { return fnErr }); err != fnErr {
		t.Errorf("Capture with a failing fn = %v", err)
	}
	if !reflect.DeepEqual(calls, []Op{OpStreamBeginCapture, OpStreamEndCapture}) {
		t.Errorf("a failed capture called %v (ends the capture, instantiates nothing)", calls)
	}

	reset()
	fail[OpStreamBeginCapture] = fnErr
	if _, err := Capture(do, Stream[fakeRT](1), 0, func() error { t.Error("fn ran"); return nil }); err != fnErr {
		t.Errorf("Capture with a failing begin = %v", err)
	}
}

func TestOpNames(t *testing.T) {
	for o := Op(0); o < NumOps; o++ {
		if got, ok := OpNamed(o.String()); !ok || got != o {
			t.Errorf("OpNamed(%q) = %v, %v", o.String(), got, ok)
		}
	}
	if _, ok := OpNamed("Nothing"); ok || Op(-1).String() != "Op(?)" || NumOps.String() != "Op(?)" {
		t.Error("unknown roles are named")
	}
}

// noArgs is a packer with no parameters (kparams.Args' role in the tests).
type noArgs struct{ err error }

func (a *noArgs) Err() error                { return a.err }
func (a *noArgs) Layout() ([]byte, []int32) { return nil, nil }

func TestMemoryRoles(t *testing.T) {
	reset()
	s := Stream[fakeRT](1)
	h := HostMem[fakeRT]{p: unsafe.Pointer(new([16]byte)), n: 16}
	_, _, _ = MemGetInfo[fakeRT]()
	_, _ = MemAlloc[fakeRT](8)
	_ = MemFree[fakeRT](1)
	_, _, _ = MemGetAddressRange[fakeRT](1)
	_, _ = MemAllocHost[fakeRT](8)
	_ = MemFreeHost(h)
	_ = MemcpyHtoD[fakeRT](1, []byte{1})
	_ = MemcpyDtoH[fakeRT]([]byte{1}, 1)
	_ = MemcpyDtoD[fakeRT](1, 2, 8)
	_ = MemcpyHtoDAsync(1, h, 0, 8, s)
	_ = MemcpyDtoHAsync(h, 8, 1, 8, s)
	_ = MemcpyDtoDAsync(1, 2, 8, s)
	_ = MemsetD8[fakeRT](1, 0, 8)
	_ = MemsetD8Async(1, 0, 8, s)
	_ = LaunchKernel(Function[fakeRT](1), Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, s, (*noArgs)(nil))
	_, _ = IpcGetMemHandle[fakeRT](1)
	_, _ = IpcOpenMemHandle(IpcMemHandle[fakeRT]{})
	_ = IpcCloseMemHandle[fakeRT](1)
	_, _ = LoadModule[fakeRT]([]byte{1})
	want := []Op{OpMemGetInfo, OpMemAlloc, OpMemFree, OpMemGetAddressRange, OpMemAllocHost, OpMemFreeHost,
		OpMemcpyHtoD, OpMemcpyDtoH, OpMemcpyDtoD, OpMemcpyHtoDAsync, OpMemcpyDtoHAsync, OpMemcpyDtoDAsync,
		OpMemsetD8, OpMemsetD8Async, OpLaunchKernel, OpIpcGetMemHandle, OpIpcOpenMemHandle, OpIpcCloseMemHandle,
		OpModuleLoadData}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("roles called %v, want %v", calls, want)
	}
}

// TestArgumentChecks: what is refused before a call is the binding's
// invalid-value error naming the entry point, and empty work is no call.
func TestArgumentChecks(t *testing.T) {
	reset()
	invalid := func(what string, err error, op Op, msg string) {
		t.Helper()
		var e *fakeErr
		if !errors.As(err, &e) || e.Code != 1 || e.Call != op.String() || e.Message != msg {
			t.Errorf("%s: %v, want the invalid-value error of %v: %s", what, err, op, msg)
		}
	}
	_, err := MemAlloc[fakeRT](-1)
	invalid("negative alloc", err, OpMemAlloc, "negative size -1")
	_, err = MemAllocHost[fakeRT](-2)
	invalid("negative host alloc", err, OpMemAllocHost, "negative size -2")
	invalid("negative copy", MemcpyDtoD[fakeRT](1, 2, -3), OpMemcpyDtoD, "negative size -3")
	invalid("negative fill", MemsetD8Async(1, 0, -4, Stream[fakeRT](0)), OpMemsetD8Async, "negative size -4")
	h := HostMem[fakeRT]{n: 8}
	invalid("copy past the host buffer", MemcpyHtoDAsync(0, h, 4, 8, 0), OpMemcpyHtoDAsync, "range [4, 12) outside host buffer of 8 bytes")
	invalid("copy before the host buffer", MemcpyDtoHAsync(h, -1, 0, 1, 0), OpMemcpyDtoHAsync, "range [-1, 0) outside host buffer of 8 bytes")
	_, err = LoadModule[fakeRT](nil)
	invalid("empty image", err, OpModuleLoadData, "empty module image")
	err = LaunchKernel(Function[fakeRT](1), Dim3{0, 1, 1}, Dim3{64, 1, 1}, 0, 0, &noArgs{})
	invalid("empty grid", err, OpLaunchKernel, "empty launch grid {0 1 1} block {64 1 1}")
	bad := errors.New("kernel parameter 0: too large")
	if err := LaunchKernel(Function[fakeRT](1), Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, 0, &noArgs{err: bad}); err != bad {
		t.Errorf("a packer's error: %v", err)
	}
	// Empty work and zero handles are no calls.
	if p, err := MemAlloc[fakeRT](0); p != 0 || err != nil {
		t.Errorf("zero alloc = %v, %v", p, err)
	}
	if h, err := MemAllocHost[fakeRT](0); h.Bytes() != nil || h.Len() != 0 || err != nil {
		t.Errorf("zero host alloc = %v, %v", h, err)
	}
	for what, err := range map[string]error{"free 0": MemFree[fakeRT](0), "free host nil": MemFreeHost(HostMem[fakeRT]{}),
		"empty HtoD": MemcpyHtoD[fakeRT](1, nil), "empty DtoH": MemcpyDtoH[fakeRT](nil, 1), "empty DtoD": MemcpyDtoD[fakeRT](1, 2, 0),
		"empty fill": MemsetD8[fakeRT](1, 0, 0), "empty async copy": MemcpyHtoDAsync(1, h, 8, 0, 0)} {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	if len(calls) != 0 {
		t.Errorf("refused or empty work called %v", calls)
	}
	if got := DevicePtr(0x1000).Add(0x20); got != 0x1020 {
		t.Errorf("Add = %#x", got)
	}
}

// NewBinding plays each role by the symbol of the table that names it, and
// refuses a role no symbol plays.
func TestNewBinding(t *testing.T) {
	tab := binding.NewTable[int]([]binding.Symbol{{API: "xInit"}, {API: "xMalloc", Role: "MemAlloc"}, {API: "xFree", Role: "MemFree"}})
	var got []int
	b := NewBinding[int, int32, vendor](tab, func(s int, f func() int32) error {
		got = append(got, s)
		if r := f(); r != 0 {
			return &fakeErr{Code: r}
		}
		return nil
	}, func(int32) string { return "INVALID" }, 1, ABI{IntegerDevicePtr: true})
	if err := b.call(OpMemFree, func(uintptr) int32 { return 0 }); err != nil {
		t.Fatal(err)
	}
	if err := b.call(OpMemAlloc, func(uintptr) int32 { return 2 }); !errors.Is(err, &fakeErr{Code: 2}) {
		t.Fatalf("result not mapped: %v", err)
	}
	if !reflect.DeepEqual(got, []int{2, 1}) {
		t.Fatalf("symbols called %v, want [2 1]", got)
	}
	var e *fakeErr
	if err := b.invalid(OpMemAlloc, "negative size -1"); !errors.As(err, &e) || e.Call != "xMalloc" || e.Code != 1 || e.Name != "INVALID" {
		t.Fatalf("invalid-value error %#v", err)
	}
	if err := b.call(OpStreamCreate, func(uintptr) int32 { t.Error("called"); return 0 }); !errors.As(err, &e) || e.Call != "role StreamCreate" {
		t.Fatalf("a role no symbol plays: %v", err)
	}
	if !b.abi.IntegerDevicePtr || len(got) != 2 {
		t.Fatal("abi or extra calls")
	}
}
