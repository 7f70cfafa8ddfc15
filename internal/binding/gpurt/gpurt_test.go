package gpurt

import (
	"errors"
	"reflect"
	"testing"

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

func (fakeRT) Call(op Op, do func(uintptr) int32) error {
	calls = append(calls, op)
	return fail[op]
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
	fail[OpStreamQuery] = &fakeErr{Code: notReady}
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
