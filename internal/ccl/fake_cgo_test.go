//go:build cgo

package ccl

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/ccl/ccltest"
)

// TestFakeLibrary loads a stand-in NCCL-API library (ccltest) by override,
// as RCCL, and checks every argument the cgo shim hands it: the 128-byte
// unique id by value, pointers, counts, enums, streams, and the error path.
func TestFakeLibrary(t *testing.T) {
	dir := t.TempDir()
	path, log := ccltest.Build(t, dir, "librccl-fake.so.1")
	t.Setenv("DETCOLL_TEST_CCL", path)
	l, err := Load("rccl", "DETCOLL_TEST_CCL", "libdetcoll-never-loaded.so")
	if err != nil {
		t.Fatal(err)
	}
	if l.Path() != path || l.Vendor() != "rccl" || !l.IsRCCL() {
		t.Fatalf("path %q vendor %q", l.Path(), l.Vendor())
	}
	if !l.HasSymbol("ncclSend") || l.HasSymbol("ncclNoSuch") {
		t.Fatal("HasSymbol")
	}
	v, err := l.Version()
	if err != nil || v.String() != "2.28.3" {
		t.Fatalf("version %v %v", v, err)
	}
	id, err := l.GetUniqueID()
	if err != nil || id[0] != 1 || id[127] != 128 {
		t.Fatalf("unique id % x %v", id[:4], err)
	}
	c, err := l.CommInitRank(4, id, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rank() != 2 || c.Size() != 4 || c.Lib() != l {
		t.Fatal("comm fields")
	}
	if err := c.AsyncError(); err != nil {
		t.Fatal(err)
	}
	const s, r, st = uint64(0xdead0000), uint64(0xbeef0000), uintptr(0x5150)
	steps := []struct {
		run  func() error
		want string
	}{
		{func() error { return c.AllGather(s, r, 12, Uint8, st) }, "allgather dead0000 beef0000 12 1 1002 5150"},
		{func() error { return c.AllReduce(s, r, 7, BFloat16, Sum, st) }, "allreduce dead0000 beef0000 7 9 0 1002 5150"},
		{func() error { return c.ReduceScatter(s, r, 3, Float32, Max, 0) }, "reducescatter dead0000 beef0000 3 7 2 1002 0"},
		{func() error { return c.Broadcast(s, r, 5, Float64, 3, st) }, "broadcast dead0000 beef0000 5 8 3 1002 5150"},
		{l.GroupStart, "groupstart"},
		{func() error { return c.Send(s, 9, Uint8, 1, st) }, "send dead0000 9 1 1 1002 5150"},
		{func() error { return c.Recv(r, 9, Uint8, 3, st) }, "recv beef0000 9 1 3 1002 5150"},
		{l.GroupEnd, "groupend"},
		{c.Destroy, "destroy 1002"},
	}
	var want []string
	want = append(want, fmt.Sprintf("init 4 2 %d 1 -128", 128*129/2))
	for _, x := range steps {
		if err := x.run(); err != nil {
			t.Fatalf("%s: %v", x.want, err)
		}
		want = append(want, x.want)
	}
	got := ccltest.Calls(t, log)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Destroyed: no further call reaches the library.
	if err := c.AllGather(s, r, 1, Uint8, 0); !errors.Is(err, &Error{Code: InvalidUsage}) {
		t.Fatalf("call after destroy: %v", err)
	}

	// Failures carry the code, the library's strings and the vendor.
	if _, err := l.CommInitRank(13, id, 0); err == nil {
		t.Fatal("init that the library fails succeeded")
	} else {
		var e *Error
		if !errors.As(err, &e) || e.Code != InternalError || e.Message != "fake error 3" || e.Last != "fake last" ||
			e.Call != "ncclCommInitRank" || !strings.HasPrefix(err.Error(), "rccl: ncclCommInitRank: ncclInternalError") {
			t.Fatalf("init error %#v (%v)", e, err)
		}
	}
	c2, err := l.CommInitRank(2, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	err = c2.AllReduce(s, r, 999, Float32, Sum, 0)
	if !errors.Is(err, &Error{Code: InvalidUsage}) || !strings.Contains(err.Error(), "fake error 5") {
		t.Fatalf("failing collective: %v", err)
	}
	if err := c2.AllReduce(s, r, -1, Float32, Sum, 0); !errors.Is(err, &Error{Code: InvalidArgument}) {
		t.Fatalf("negative count: %v", err)
	}
	if err := c2.Send(s, 1, Uint8, 2, 0); !errors.Is(err, &Error{Code: InvalidArgument}) {
		t.Fatalf("peer out of range: %v", err)
	}
	if err := c2.Abort(); err != nil {
		t.Fatal(err)
	}
	if last := ccltest.Calls(t, log); last[len(last)-1] != "abort 1001" {
		t.Fatalf("abort not called: %v", last)
	}
}
