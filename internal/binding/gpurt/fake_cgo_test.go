//go:build cgo

package gpurt

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/detcoll/detcoll/internal/binding/bindingtest"
	"github.com/detcoll/detcoll/internal/dl"
)

// The memory calls against a stand-in library built with the host C
// compiler that exports each call twice: i_<Op> with CUDA's C types (device
// pointers are unsigned long long, the pinned allocator takes no flags) and
// p_<Op> with HIP's (void* device pointers, hipHostMalloc's flags). Device
// memory is host memory, so a round trip through the copies checks that
// every trampoline passes its arguments through the right C type, for both
// ABIs. No GPU and no vendor library are involved.
const fakeMem = `
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
typedef unsigned long long DI;
typedef struct { char reserved[64]; } IPC;
static void* st_seen;
#define ST(s) (st_seen = (s), (s) == (void*)0x5001 ? 0 : 400)

int i_MemGetInfo(size_t* f, size_t* t) { *f = 1; *t = 2; return 0; }
int i_MemAlloc(DI* p, size_t n) { *p = (DI)(uintptr_t)calloc(1, n); return 0; }
int i_MemFree(DI p) { free((void*)(uintptr_t)p); return 0; }
int i_MemGetAddressRange(DI* b, size_t* n, DI p) { *b = p - 8; *n = 64; return 0; }
int i_MemAllocHost(void** p, size_t n) { *p = calloc(1, n); return 0; }
int i_MemFreeHost(void* p) { free(p); return 0; }
int i_MemcpyHtoD(DI d, const void* s, size_t n) { memcpy((void*)(uintptr_t)d, s, n); return 0; }
int i_MemcpyDtoH(void* d, DI s, size_t n) { memcpy(d, (void*)(uintptr_t)s, n); return 0; }
int i_MemcpyDtoD(DI d, DI s, size_t n) { memcpy((void*)(uintptr_t)d, (void*)(uintptr_t)s, n); return 0; }
int i_MemcpyHtoDAsync(DI d, const void* s, size_t n, void* st) { memcpy((void*)(uintptr_t)d, s, n); return ST(st); }
int i_MemcpyDtoHAsync(void* d, DI s, size_t n, void* st) { memcpy(d, (void*)(uintptr_t)s, n); return ST(st); }
int i_MemcpyDtoDAsync(DI d, DI s, size_t n, void* st) { memcpy((void*)(uintptr_t)d, (void*)(uintptr_t)s, n); return ST(st); }
int i_MemsetD8(DI d, unsigned char v, size_t n) { memset((void*)(uintptr_t)d, v, n); return 0; }
int i_MemsetD8Async(DI d, unsigned char v, size_t n, void* st) { memset((void*)(uintptr_t)d, v, n); return ST(st); }
int i_IpcGetMemHandle(IPC* h, DI p) { memcpy(h->reserved, &p, 8); h->reserved[63] = 0x7f; return 0; }
int i_IpcOpenMemHandle(DI* p, IPC h, unsigned f) { if (h.reserved[63] != 0x7f || f != 1) return 400; memcpy(p, h.reserved, 8); return 0; }
int i_IpcCloseMemHandle(DI p) { return p != 0 ? 0 : 400; }

int p_MemGetInfo(size_t* f, size_t* t) { *f = 3; *t = 4; return 0; }
int p_MemAlloc(void** p, size_t n) { *p = calloc(1, n); return 0; }
int p_MemFree(void* p) { free(p); return 0; }
int p_MemGetAddressRange(void** b, size_t* n, void* p) { *b = (char*)p - 8; *n = 64; return 0; }
int p_MemAllocHost(void** p, size_t n, unsigned flags) { *p = calloc(1, n); return flags == 0 ? 0 : 1; }
int p_MemFreeHost(void* p) { free(p); return 0; }
int p_MemcpyHtoD(void* d, void* s, size_t n) { memcpy(d, s, n); return 0; }
int p_MemcpyDtoH(void* d, void* s, size_t n) { memcpy(d, s, n); return 0; }
int p_MemcpyDtoD(void* d, void* s, size_t n) { memcpy(d, s, n); return 0; }
int p_MemcpyHtoDAsync(void* d, void* s, size_t n, void* st) { memcpy(d, s, n); return ST(st); }
int p_MemcpyDtoHAsync(void* d, void* s, size_t n, void* st) { memcpy(d, s, n); return ST(st); }
int p_MemcpyDtoDAsync(void* d, void* s, size_t n, void* st) { memcpy(d, s, n); return ST(st); }
int p_MemsetD8(void* d, unsigned char v, size_t n) { memset(d, v, n); return 0; }
int p_MemsetD8Async(void* d, unsigned char v, size_t n, void* st) { memset(d, v, n); return ST(st); }
int p_IpcGetMemHandle(IPC* h, void* p) { memcpy(h->reserved, &p, 8); h->reserved[63] = 0x7f; return 0; }
int p_IpcOpenMemHandle(void** p, IPC h, unsigned f) { if (h.reserved[63] != 0x7f || f != 1) return 400; memcpy(p, h.reserved, 8); return 0; }
int p_IpcCloseMemHandle(void* p) { return p != 0 ? 0 : 400; }

// One launch entry point for both (the signature is the same).
int i_LaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned sh, void* st, void** params, void** extra) {
	if (f != (void*)0x46 || gx != 3 || gy != 1 || bx != 64 || sh != 16 || extra != NULL || params == NULL) return 1;
	if (*(unsigned long long*)params[0] != 0xdeadbeef00ULL || *(int*)params[1] != -7) return 2;
	return ST(st);
}
int p_LaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned sh, void* st, void** params, void** extra) {
	return i_LaunchKernel(f, gx, gy, gz, bx, by, bz, sh, st, params, extra);
}
`

var memLib *dl.Library

// callLib calls prefix+op from the stand-in; a non-zero result is an error.
func callLib(prefix string, op Op, do func(uintptr) int32) error {
	s, err := memLib.Sym(prefix + op.String())
	if err != nil {
		return err
	}
	if r := do(uintptr(s)); r != 0 {
		return &fakeErr{Code: r, Call: prefix + op.String()}
	}
	return nil
}

type (
	intRT struct{}
	ptrRT struct{}
)

var (
	intBinding = testBinding(func(op Op, do func(uintptr) int32) error { return callLib("i_", op, do) }, fakeInvalid, ABI{IntegerDevicePtr: true})
	ptrBinding = testBinding(func(op Op, do func(uintptr) int32) error { return callLib("p_", op, do) }, fakeInvalid, ABI{HostAllocFlags: true})
)

func (intRT) Binding() *Binding { return intBinding }
func (ptrRT) Binding() *Binding { return ptrBinding }

// packed is a packer holding (u64 0xdeadbeef00, i32 -7).
type packed struct{}

func (*packed) Err() error { return nil }
func (*packed) Layout() ([]byte, []int32) {
	return []byte{0x00, 0xef, 0xbe, 0xad, 0xde, 0, 0, 0, 0xf9, 0xff, 0xff, 0xff}, []int32{0, 8}
}

func TestStandInMemory(t *testing.T) {
	lib := bindingtest.Build(t, t.TempDir(), "libfakemem.so", "memory library", fakeMem)
	var err error
	if memLib, err = dl.Open("", filepath.Clean(lib)); err != nil {
		t.Fatal(err)
	}
	t.Run("integer device pointers", func(t *testing.T) { roundTrip[intRT](t, 1, 2) })
	t.Run("void* device pointers", func(t *testing.T) { roundTrip[ptrRT](t, 3, 4) })
}

func roundTrip[R Runtime](t *testing.T, wantFree, wantTotal uint64) {
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	free, total, err := MemGetInfo[R]()
	check("MemGetInfo", err)
	if free != wantFree || total != wantTotal {
		t.Fatalf("MemGetInfo = %d, %d (the other ABI's stand-in?)", free, total)
	}
	a, err := MemAlloc[R](64)
	check("MemAlloc", err)
	defer MemFree[R](a)
	b, err := MemAlloc[R](64)
	check("MemAlloc", err)
	defer MemFree[R](b)
	if base, size, err := MemGetAddressRange[R](a.Add(8)); err != nil || base != a || size != 64 {
		t.Fatalf("MemGetAddressRange = %#x, %d, %v (want %#x, 64)", base, size, err, a)
	}
	src := []byte("deterministic collectives")
	n := len(src)
	check("MemcpyHtoD", MemcpyHtoD[R](a, src))
	check("MemcpyDtoD", MemcpyDtoD[R](b, a, n))
	got := make([]byte, n)
	check("MemcpyDtoH", MemcpyDtoH[R](got, b))
	if !bytes.Equal(got, src) {
		t.Fatalf("sync round trip %q", got)
	}
	h, err := MemAllocHost[R](2 * n)
	check("MemAllocHost", err)
	defer MemFreeHost(h)
	s := Stream[R](0x5001)
	copy(h.Bytes()[n:], src)
	check("MemsetD8", MemsetD8[R](a, 'x', n))
	check("MemcpyHtoDAsync", MemcpyHtoDAsync(a.Add(8), h, n, n, s))
	check("MemcpyDtoDAsync", MemcpyDtoDAsync(b, a, n+8, s))
	check("MemsetD8Async", MemsetD8Async(b.Add(n+8), '!', 1, s))
	check("MemcpyDtoHAsync", MemcpyDtoHAsync(h, 0, b, n, s))
	if want := "xxxxxxxxdeterministic col"; string(h.Bytes()[:n]) != want {
		t.Fatalf("async round trip %q, want %q", h.Bytes()[:n], want)
	}
	check("MemcpyDtoH", MemcpyDtoH[R](got[:1], b.Add(n+8)))
	if got[0] != '!' {
		t.Fatalf("MemsetD8Async wrote %q", got[0])
	}
	if err := MemcpyDtoDAsync(b, a, 1, Stream[R](7)); err == nil {
		t.Fatal("the stream handle did not reach the library")
	}
	ih, err := IpcGetMemHandle[R](a)
	check("IpcGetMemHandle", err)
	if p, err := IpcOpenMemHandle(ih); err != nil || p != a {
		t.Fatalf("IpcOpenMemHandle = %#x, %v (want %#x)", p, err, a)
	}
	if _, err := IpcOpenMemHandle(IpcMemHandle[R]{}); err == nil {
		t.Fatal("a bad IPC handle opened")
	}
	check("IpcCloseMemHandle", IpcCloseMemHandle[R](a))
	err = LaunchKernel(Function[R](0x46), Dim3{X: 3, Y: 1, Z: 1}, Dim3{X: 64, Y: 1, Z: 1}, 16, s, &packed{})
	check(fmt.Sprintf("LaunchKernel %T", *new(R)), err)
}
