package ccl

import (
	"errors"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding/bindingtest"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
)

func TestSymbolNames(t *testing.T) {
	// One list for NCCL and RCCL: plain names, the constants are those names.
	bindingtest.CheckPlainSymbols(t, apiNames.Symbols, "nccl")
	if apiNames.API(ncclCommInitRank) != "ncclCommInitRank" || apiNames.API(ncclGroupEnd) != "ncclGroupEnd" ||
		apiNames.API(ncclReduceScatter) != "ncclReduceScatter" || apiNames.API(ncclGetUniqueId) != "ncclGetUniqueId" {
		t.Fatal("symbol table out of order")
	}
	// Each load gets its own table, so NCCL and RCCL can both be loaded.
	if a, b := newSyms(), newSyms(); a == b || a == apiNames {
		t.Fatal("newSyms shares a table")
	}
	var nilLib *Lib
	if nilLib.HasSymbol("ncclAllReduce") || (&Lib{}).HasSymbol("ncclAllReduce") {
		t.Error("an unloaded library has symbols")
	}
	if err := (&Lib{vendor: "nccl"}).GroupStart(); err == nil || !strings.Contains(err.Error(), "ncclGroupStart") {
		t.Errorf("a call on a library without a table = %v", err)
	}
}

func TestDecodeVersion(t *testing.T) {
	if v := DecodeVersion(22803); v.String() != "2.28.3" {
		t.Fatalf("22803 → %v", v)
	}
	if v := DecodeVersion(2804); v.String() != "2.8.4" {
		t.Fatalf("2804 → %v", v)
	}
	if v := DecodeVersion(21903); v.String() != "2.19.3" {
		t.Fatalf("21903 → %v", v)
	}
}

func TestDataTypes(t *testing.T) {
	want := map[dtype.DType]DataType{dtype.BF16: BFloat16, dtype.FP16: Float16, dtype.FP32: Float32, dtype.FP64: Float64}
	for d, n := range want {
		got, err := DataTypeOf(d)
		if err != nil || got != n || got.Size() != d.Size() {
			t.Errorf("%v → %v %v", d, got, err)
		}
	}
	if _, err := DataTypeOf(dtype.Invalid); err == nil {
		t.Error("invalid dtype mapped")
	}
	if BFloat16 != 9 || Float16 != 6 || Float32 != 7 || Sum != 0 || Avg != 4 {
		t.Error("enum values differ from nccl.h")
	}
}

func TestErrors(t *testing.T) {
	e := &Error{Code: InvalidUsage, Name: ResultName(InvalidUsage), Call: "ncclAllReduce", Message: "invalid usage", Last: "comm destroyed"}
	if !strings.Contains(e.Error(), "ncclInvalidUsage") || !strings.Contains(e.Error(), "comm destroyed") {
		t.Fatal(e.Error())
	}
	if !errors.Is(e, &Error{Code: InvalidUsage}) || errors.Is(e, &Error{Code: SystemError}) {
		t.Fatal("Is")
	}
	if ResultName(42) != "ncclResult(42)" {
		t.Fatal("unknown result name")
	}
	var l *Lib
	if err := l.GroupStart(); err == nil {
		t.Fatal("nil lib")
	}
	var c *Comm
	if err := c.AllReduce(0, 0, 1, Float32, Sum, 0); err == nil {
		t.Fatal("nil comm")
	}
	if err := c.Destroy(); err != nil {
		t.Fatal("destroying nil comm")
	}
	r := &Error{Code: SystemError, Name: ResultName(SystemError), Call: "ncclAllGather", Vendor: "rccl"}
	if !strings.HasPrefix(r.Error(), "rccl: ncclAllGather: ncclSystemError") {
		t.Fatalf("rccl error text %q", r.Error())
	}
	u := &Error{Code: resultUnavailable, Name: ResultName(resultUnavailable)}
	if !errors.Is(u, ErrUnavailable) || ResultName(resultNoSymbol) != "DETCOLL_SYMBOL_NOT_FOUND" {
		t.Fatal("unavailable mapping")
	}
}

func TestLoadMissing(t *testing.T) {
	t.Setenv("DETCOLL_TEST_CCL", "")
	_, err := Load("rccl", "DETCOLL_TEST_CCL", "libdetcoll-no-rccl.so.1")
	var e *Error
	if err == nil || !errors.Is(err, ErrUnavailable) || !errors.As(err, &e) {
		t.Fatalf("missing library: %v", err)
	}
	if e.Vendor != "rccl" || !strings.HasPrefix(err.Error(), "rccl: ") {
		t.Fatalf("vendor not carried: %v", err)
	}
	if !strings.Contains(err.Error(), "libdetcoll-no-rccl.so.1") && !strings.Contains(err.Error(), "without cgo") {
		t.Fatalf("error does not name the candidate: %v", err)
	}
}

// typedRT stands for a runtime binding's type argument (cuda.Runtime,
// hip.Runtime); the typed face never calls it.
type typedRT struct{}

func (typedRT) Binding() *gpurt.Binding { return nil }

// A nil typed library or communicator (what a failed load leaves) fails its
// calls with an error, or is a no-op for Destroy and Abort; never a panic.
func TestTypedNil(t *testing.T) {
	var l *TypedLib[typedRT]
	if err := l.GroupStart(); err == nil {
		t.Error("GroupStart on a nil lib")
	}
	if _, err := l.CommInitRank(2, UniqueID{}, 0); err == nil {
		t.Error("CommInitRank on a nil lib")
	}
	if Typed[typedRT](nil) != nil || WrapComm[typedRT](nil) != nil || l.Core() != nil {
		t.Error("nil does not stay nil")
	}
	var c *TypedComm[typedRT]
	if err := c.AllReduce(0, 0, 1, Float32, Sum, 0); err == nil {
		t.Error("AllReduce on a nil comm")
	}
	if err := c.Send(0, 1, Uint8, 0, 0); err == nil {
		t.Error("Send on a nil comm")
	}
	if err := c.Destroy(); err != nil {
		t.Errorf("Destroy of a nil comm: %v", err)
	}
	if err := c.Abort(); err != nil {
		t.Errorf("Abort of a nil comm: %v", err)
	}
	if _, err := LoadTyped[typedRT]("nccl", "", "libdetcoll-no-nccl.so.2"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("LoadTyped of a missing library: %v", err)
	}
}
