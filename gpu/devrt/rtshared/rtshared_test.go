package rtshared

import (
	"bytes"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/internal/kparams"
)

type testVendor struct{}

func (testVendor) Name() string { return "test" }

type testArgs = kparams.Args[testVendor, devrt.Ptr]

type foreignArgs struct{ devrt.Args }

func TestArgs(t *testing.T) {
	var a devrt.Args = new(Args[testArgs, *testArgs])
	a.Ptr(0x1122334455667788).U32(7).F32(1).I64(-1).Raw([]byte{9, 9, 9}, 1).U64(1).I32(-2).F64(2)
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	inner, err := Unwrap[testArgs, *testArgs](a, "testrt")
	if err != nil || inner == nil {
		t.Fatalf("Unwrap = %v, %v", inner, err)
	}
	// The adapter writes straight into the binding's Args: same bytes as
	// the same calls on a bare one.
	var want testArgs
	want.Ptr(0x1122334455667788).U32(7).F32(1).I64(-1).Raw([]byte{9, 9, 9}, 1).U64(1).I32(-2).F64(2)
	gb, goffs := inner.Layout()
	wb, woffs := want.Layout()
	if !bytes.Equal(gb, wb) || len(goffs) != len(woffs) || inner.Len() != 8 {
		t.Errorf("layout %x %v, want %x %v", gb, goffs, wb, woffs)
	}
	a.Reset()
	if inner.Len() != 0 {
		t.Error("Reset did not reach the binding's Args")
	}
	a.Raw(nil, 3)
	if a.Err() == nil || !strings.HasPrefix(a.Err().Error(), "test: ") {
		t.Errorf("bad alignment: Err = %v", a.Err())
	}
	if p, err := Unwrap[testArgs, *testArgs](nil, "testrt"); p != nil || err != nil {
		t.Errorf("Unwrap(nil) = %v, %v", p, err)
	}
	if _, err := Unwrap[testArgs, *testArgs](foreignArgs{}, "testrt"); err == nil || !strings.Contains(err.Error(), "testrt: kernel arguments of type rtshared.foreignArgs were not made by this runtime") {
		t.Errorf("foreign args: %v", err)
	}
}
