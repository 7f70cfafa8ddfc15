package kparams

import (
	"encoding/hex"
	"fmt"
	"math"
	"testing"
)

type testVendor struct{}

func (testVendor) Name() string { return "test" }

type ptr uint64

type testArgs = Args[testVendor, ptr]

// TestGolden checks the packed bytes and offsets of a mixed parameter list
// against the layout internal/cuda's and internal/hip's Args produced
// before they shared this package (captured from that code): the kernels
// read these bytes, so they must not change.
func TestGolden(t *testing.T) {
	var a testArgs
	a.Ptr(0x1122334455667788).I32(-2).I64(-7).U32(0xA1B2C3D4).F32(1.5).F64(math.Copysign(0, -1)).
		U64(0x0102030405060708).I32(3).Raw([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 16).
		F32(-2.25).Raw([]byte{0xEE}, 1).Raw([]byte{0xAA, 0xBB}, 2).F64(math.Pi)
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	const wantHex = "8877665544332211feffffff00000000f9ffffffffffffffd4c3b2a10000c03f" +
		"00000000000000800807060504030201030000000000000000000000000000000" +
		"102030405060708090a0b0c000010c0ee00aabb00000000182d4454fb210940"
	wantOffs := []int32{0, 8, 16, 24, 28, 32, 40, 48, 64, 76, 80, 82, 88}
	buf, offs := a.Layout()
	if got := hex.EncodeToString(buf); got != wantHex {
		t.Fatalf("bytes\n got %s\nwant %s", got, wantHex)
	}
	if fmt.Sprint(offs) != fmt.Sprint(wantOffs) || a.Len() != len(wantOffs) {
		t.Fatalf("offsets %v (len %d), want %v", offs, a.Len(), wantOffs)
	}
}

func TestAlignmentAndReset(t *testing.T) {
	var a testArgs
	a.I32(1).Raw(make([]byte, 24), 16)
	if buf, offs := a.Layout(); len(offs) != 2 || offs[1] != 16 || len(buf) != 40 {
		t.Fatalf("struct alignment: offs %v size %d", offs, len(buf))
	}
	a.Reset()
	if buf, offs := a.Layout(); len(buf) != 0 || len(offs) != 0 || a.Len() != 0 || a.Err() != nil {
		t.Fatal("Reset left parameters")
	}
	// An empty parameter list is valid (a kernel without parameters).
	a.Raw(nil, 1)
	if buf, offs := a.Layout(); len(buf) != 0 || len(offs) != 1 {
		t.Fatalf("empty parameter: % x %v", buf, offs)
	}
}

func TestErrors(t *testing.T) {
	var a testArgs
	for _, align := range []int{0, 3, 32, -1} {
		a.Reset()
		if err := a.Raw(nil, align).Err(); err == nil {
			t.Fatalf("alignment %d accepted", align)
		}
	}
	a.Reset()
	if err := a.Raw(make([]byte, 1), 3).Err(); err == nil ||
		err.Error() != "test: kernel parameter 0: alignment 3 is not a power of two ≤ 16" {
		t.Fatalf("bad alignment: %v", err)
	}
	// The first error sticks; later parameters are ignored.
	a.I32(1)
	if a.Len() != 0 {
		t.Fatal("parameter appended after an error")
	}
	a.Reset()
	a.Raw(make([]byte, MaxArgBytes), 1)
	if a.Err() != nil {
		t.Fatalf("exactly MaxArgBytes: %v", a.Err())
	}
	if err := a.Raw(make([]byte, 1), 1).Err(); err == nil ||
		err.Error() != "test: kernel parameters exceed 64 parameters or 4096 bytes" {
		t.Fatalf("oversized parameters: %v", err)
	}
	a.Reset()
	for i := 0; i < MaxArgs; i++ {
		a.I32(1)
	}
	if a.Err() != nil {
		t.Fatalf("exactly MaxArgs: %v", a.Err())
	}
	if a.I32(1).Err() == nil {
		t.Fatal("too many parameters accepted")
	}
}
