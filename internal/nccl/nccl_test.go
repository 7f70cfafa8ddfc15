package nccl

import (
	"errors"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/dtype"
)

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
	if BFloat16 != 9 || Float16 != 6 || Float32 != 7 || Uint8 != 1 || Sum != 0 || Avg != 4 {
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
	if err := c.Abort(); err != nil {
		t.Fatal("aborting nil comm")
	}
	if err := c.Send(0, 1, Uint8, 0, 0); err == nil {
		t.Fatal("send on nil comm")
	}
	if _, err := l.CommInitRank(2, UniqueID{}, 0); err == nil {
		t.Fatal("init on nil lib")
	}
}

func TestNames(t *testing.T) {
	if NCCLNames[0] != "libnccl.so.2" || NCCLEnv != "DETCOLL_NCCL_LIB" {
		t.Fatalf("names %v env %s", NCCLNames, NCCLEnv)
	}
	for _, n := range NCCLNames {
		if strings.Contains(n, "rccl") {
			t.Fatalf("an RCCL name in NCCL's list: %v (RCCL is internal/rccl's)", NCCLNames)
		}
	}
}

func TestLoadHere(t *testing.T) {
	t.Setenv("DETCOLL_TEST_NCCL", "")
	_, err := Load("DETCOLL_TEST_NCCL", "libdetcoll-no-nccl.so.2")
	if err == nil || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing library: %v", err)
	}
	if err := Available(); err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	l, _ := Default()
	v, err := l.Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NCCL %v at %s", v, l.Path())
}
