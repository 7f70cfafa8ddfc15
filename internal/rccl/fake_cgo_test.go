//go:build cgo

package rccl

import (
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/ccl"
	"github.com/detcoll/detcoll/internal/ccl/ccltest"
	"github.com/detcoll/detcoll/internal/hip"
)

// TestFakeRCCL loads the stand-in NCCL-API library through $DETCOLL_RCCL_LIB
// and checks that the HIP-typed calls reach it with the same arguments.
func TestFakeRCCL(t *testing.T) {
	path, log := ccltest.Build(t, t.TempDir(), "librccl.so.1")
	t.Setenv(LibraryEnv, path)
	l, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if l.Path() != path {
		t.Fatalf("loaded %s", l.Path())
	}
	if v, err := l.Version(); err != nil || v.String() != "2.28.3" {
		t.Fatalf("version %v %v", v, err)
	}
	id, _ := l.GetUniqueID()
	c, err := l.CommInitRank(8, id, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AllGather(hip.DevicePtr(0xa0), hip.DevicePtr(0xb0), 64, ccl.Uint8, hip.Stream(0x77)); err != nil {
		t.Fatal(err)
	}
	if err := l.GroupStart(); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(hip.DevicePtr(0xa0), 8, ccl.BFloat16, 3, hip.Stream(0x77)); err != nil {
		t.Fatal(err)
	}
	if err := c.Recv(hip.DevicePtr(0xb0), 8, ccl.BFloat16, 3, hip.Stream(0x77)); err != nil {
		t.Fatal(err)
	}
	if err := l.GroupEnd(); err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduce(hip.DevicePtr(0xa0), hip.DevicePtr(0xb0), 999, ccl.Float32, ccl.Sum, 0); err == nil ||
		!strings.HasPrefix(err.Error(), "rccl: ncclAllReduce: ncclInvalidUsage") {
		t.Fatalf("failing call: %v", err)
	}
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(ccltest.Calls(t, log), "\n")
	want := strings.Join([]string{"init 8 7 8256 1 -128", "allgather a0 b0 64 1 1007 77", "groupstart",
		"send a0 8 9 3 1007 77", "recv b0 8 9 3 1007 77", "groupend", "allreduce a0 b0 999 7 0 1007 0", "destroy 1007"}, "\n")
	if got != want {
		t.Fatalf("calls:\n%s\nwant:\n%s", got, want)
	}
}
