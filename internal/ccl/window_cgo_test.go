//go:build cgo

package ccl

import (
	"errors"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/ccl/ccltest"
)

// The symmetric-memory calls reach the library with their arguments:
// ncclMemAlloc's size and the address it returns, the window registration's
// communicator, buffer, size and flags, and the window handle at
// deregistration.
func TestWindowsOnFakeLibrary(t *testing.T) {
	dir := t.TempDir()
	path, log := ccltest.Build(t, dir, "libnccl-fake.so.2")
	t.Setenv("DETCOLL_TEST_CCL", path)
	l, err := Load("nccl", "DETCOLL_TEST_CCL", "libdetcoll-never-loaded.so")
	if err != nil {
		t.Fatal(err)
	}
	if !l.HasWindows() || !l.HasSymbol("ncclCommWindowRegister") {
		t.Fatal("the fake exports the window API but HasWindows is false")
	}
	id, _ := l.GetUniqueID()
	c, err := l.CommInitRank(2, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.MemAlloc(4096)
	if err != nil || p != 0x70000000+4096 {
		t.Fatalf("MemAlloc: %#x %v", p, err)
	}
	w, err := c.WindowRegister(p, 4096, WinCollSymmetric)
	if err != nil || w.Buf != p || w.Size != 4096 {
		t.Fatalf("WindowRegister: %+v %v", w, err)
	}
	if err := w.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := w.Deregister(); err != nil { // idempotent: no second call
		t.Fatal(err)
	}
	if err := l.MemFree(p); err != nil {
		t.Fatal(err)
	}
	want := []string{"init 2 1 8256 1 -128", "memalloc 4096", "winreg 1001 70001000 4096 1", "windereg 1001 a000", "memfree 70001000"}
	if got := ccltest.Calls(t, log); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Failures: the library's, and bad arguments caught before the call.
	if _, err := l.MemAlloc(999); !errors.Is(err, &Error{Code: UnhandledCudaError}) {
		t.Fatalf("failing MemAlloc: %v", err)
	}
	if _, err := l.MemAlloc(0); !errors.Is(err, &Error{Code: InvalidArgument}) {
		t.Fatalf("MemAlloc(0): %v", err)
	}
	if _, err := c.WindowRegister(0, 16, WinCollSymmetric); !errors.Is(err, &Error{Code: InvalidArgument}) {
		t.Fatalf("WindowRegister(nil buffer): %v", err)
	}
	c.Destroy()
	if _, err := c.WindowRegister(p, 16, WinCollSymmetric); !errors.Is(err, &Error{Code: InvalidUsage}) {
		t.Fatalf("WindowRegister after destroy: %v", err)
	}
}

// A library without the window API (NCCL < 2.27, RCCL) loads; HasWindows
// is false and the calls fail with DETCOLL_SYMBOL_NOT_FOUND, reaching
// nothing.
func TestWindowsMissingFromOldLibrary(t *testing.T) {
	dir := t.TempDir()
	path, log := ccltest.BuildOld(t, dir, "libnccl-old.so.2")
	t.Setenv("DETCOLL_TEST_CCL", path)
	l, err := Load("nccl", "DETCOLL_TEST_CCL", "libdetcoll-never-loaded.so")
	if err != nil {
		t.Fatal(err)
	}
	if l.HasWindows() {
		t.Fatal("HasWindows true without the symbols")
	}
	id, _ := l.GetUniqueID()
	c, err := l.CommInitRank(2, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.MemAlloc(64); !errors.Is(err, &Error{Code: resultNoSymbol}) {
		t.Fatalf("MemAlloc: %v", err)
	}
	if _, err := c.WindowRegister(0x1000, 64, WinCollSymmetric); !errors.Is(err, &Error{Code: resultNoSymbol}) {
		t.Fatalf("WindowRegister: %v", err)
	}
	for _, call := range ccltest.Calls(t, log) {
		if strings.HasPrefix(call, "mem") || strings.HasPrefix(call, "win") {
			t.Fatalf("a call reached the library: %s", call)
		}
	}
}
