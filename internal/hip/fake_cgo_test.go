//go:build cgo

package hip

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding/bindingtest"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
)

// A stand-in libamdhip64 built here with the host C compiler plays a ROCm 6
// runtime with two MI300X-like devices: "device memory" is host memory, the
// current device is thread-local, hipDeviceProp_tR0600 is filled at the
// offsets of the ROCm 6 header, and calls that matter are logged. The test
// binary re-runs itself with $DETCOLL_HIP_LIB pointing at it (the runtime is
// loaded once per process). This checks the cgo shim's prototypes, the
// struct layout handling, IPC handles by value and kernel parameters without
// an AMD GPU.

const fakeHIP = `
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <stdint.h>
typedef void* H;
typedef struct { char reserved[64]; } hipIpcMemHandle_t;
typedef struct { char reserved[64]; } hipIpcEventHandle_t;
static FILE* lg(void) {
	static FILE* f;
	if (!f) { f = fopen(getenv("DETCOLL_FAKE_HIP_LOG"), "a"); setvbuf(f, NULL, _IONBF, 0); }
	return f;
}
#define P(x) ((unsigned long long)(size_t)(x))
static __thread int cur;
int hipInit(unsigned f) { return f == 0 ? 0 : 1; }
int hipRuntimeGetVersion(int* v) { *v = 60443483; return 0; }
int hipDriverGetVersion(int* v) { *v = 60443483; return 0; }
const char* hipGetErrorName(int r) { return r == 2 ? "hipErrorOutOfMemory" : r == 600 ? "hipErrorNotReady" : "hipErrorUnknown"; }
const char* hipGetErrorString(int r) { return r == 2 ? "fake: out of memory" : "fake: unknown"; }
int hipGetDeviceCount(int* n) { *n = 2; return 0; }
int hipGetDevice(int* d) { *d = cur; return 0; }
int hipSetDevice(int d) { if (d < 0 || d > 1) return 101; cur = d; return 0; }
int hipDeviceGetName(char* s, int n, int d) { snprintf(s, n, "Fake Instinct %d", d); return 0; }
int hipDeviceGetAttribute(int* v, int a, int d) { *v = a == 87 ? 64 : a == 63 ? 304 : 0; return 0; }
int hipDeviceTotalMem(size_t* b, int d) { *b = (size_t)192 << 30; return 0; }
int hipDeviceGetPCIBusId(char* s, int n, int d) { snprintf(s, n, "0000:%02x:00.0", 0x0c + d); return 0; }
int hipDeviceCanAccessPeer(int* c, int d, int p) { *c = d != p; return 0; }
int hipDeviceEnablePeerAccess(int p, unsigned f) { return p == 1 ? 704 : 0; }
int hipGetDevicePropertiesR0600(void* p, int d) {
	char* b = (char*)p;
	memset(b, 0x5a, 1472);
	snprintf(b, 256, "Fake Instinct %d", d);
	int w = 64; memcpy(b + 308, &w, 4);
	snprintf(b + 1160, 256, "gfx942:sramecc+:xnack-");
	return 0;
}
int hipDeviceSynchronize(void) { return 0; }
int hipMemGetInfo(size_t* f, size_t* t) { *f = 1 << 20; *t = 2 << 20; return 0; }
int hipMalloc(void** p, size_t n) { if (n > ((size_t)1 << 40)) return 2; *p = malloc(n); fprintf(lg(), "malloc %d %zu\n", cur, n); return 0; }
int hipFree(void* p) { free(p); fprintf(lg(), "free\n"); return 0; }
int hipHostMalloc(void** p, size_t n, unsigned f) { *p = malloc(n); return f == 0 ? 0 : 1; }
int hipHostFree(void* p) { free(p); return 0; }
int hipMemcpyHtoD(void* d, void* s, size_t n) { memcpy(d, s, n); return 0; }
int hipMemcpyDtoH(void* d, void* s, size_t n) { memcpy(d, s, n); return 0; }
int hipMemcpyDtoD(void* d, void* s, size_t n) { memcpy(d, s, n); return 0; }
int hipMemcpyHtoDAsync(void* d, void* s, size_t n, H st) { memcpy(d, s, n); fprintf(lg(), "htoda %llx\n", P(st)); return 0; }
int hipMemcpyDtoHAsync(void* d, void* s, size_t n, H st) { memcpy(d, s, n); fprintf(lg(), "dtoha %llx\n", P(st)); return 0; }
int hipMemcpyDtoDAsync(void* d, void* s, size_t n, H st) { memcpy(d, s, n); fprintf(lg(), "dtoda %llx\n", P(st)); return 0; }
int hipMemsetD8(void* d, unsigned char v, size_t n) { memset(d, v, n); return 0; }
int hipMemsetD8Async(void* d, unsigned char v, size_t n, H st) { memset(d, v, n); return 0; }
int hipStreamCreateWithFlags(H* s, unsigned f) { *s = (H)(size_t)(0x5000 + f); fprintf(lg(), "stream %u\n", f); return 0; }
int hipStreamDestroy(H s) { fprintf(lg(), "streamdestroy %llx\n", P(s)); return 0; }
int hipStreamSynchronize(H s) { return 0; }
int hipStreamQuery(H s) { return 600; }
int hipStreamWaitEvent(H s, H e, unsigned f) { fprintf(lg(), "wait %llx %llx %u\n", P(s), P(e), f); return 0; }
int hipEventCreateWithFlags(H* e, unsigned f) { *e = (H)(size_t)(0xe000 + f); return 0; }
int hipEventRecord(H e, H s) { fprintf(lg(), "record %llx %llx\n", P(e), P(s)); return 0; }
int hipEventSynchronize(H e) { return 0; }
int hipEventQuery(H e) { return 0; }
int hipEventDestroy(H e) { return 0; }
int hipEventElapsedTime(float* ms, H a, H b) { *ms = 1.25f; return 0; }
int hipModuleLoadData(H* m, const void* img) { fprintf(lg(), "load %.4s\n", (const char*)img); *m = (H)0x4d; return 0; }
int hipModuleUnload(H m) { return 0; }
int hipModuleGetFunction(H* f, H m, const char* name) { if (strcmp(name, "k") != 0) return 500; *f = (H)0x46; return 0; }
int hipModuleLaunchKernel(H f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned sh, H st, void** params, void** extra) {
	fprintf(lg(), "launch %llx %u %u %u %u %u %u %u %llx %llx %d %lld\n", P(f), gx, gy, gz, bx, by, bz, sh, P(st),
		*(unsigned long long*)params[0], *(int*)params[1], *(long long*)params[2]);
	return extra == NULL ? 0 : 1;
}
int hipIpcGetMemHandle(hipIpcMemHandle_t* h, void* p) { memset(h, 0, 64); memcpy(h->reserved, &p, sizeof p); h->reserved[63] = 0x7f; return 0; }
int hipIpcOpenMemHandle(void** p, hipIpcMemHandle_t h, unsigned f) {
	if (h.reserved[63] != 0x7f) return 400;
	memcpy(p, h.reserved, sizeof *p);
	fprintf(lg(), "ipcopen %u\n", f);
	return 0;
}
int hipIpcCloseMemHandle(void* p) { fprintf(lg(), "ipcclose\n"); return 0; }
int hipIpcGetEventHandle(hipIpcEventHandle_t* h, H e) { memset(h, 0, 64); memcpy(h->reserved + 8, &e, sizeof e); return 0; }
int hipIpcOpenEventHandle(H* e, hipIpcEventHandle_t h) { memcpy(e, h.reserved + 8, sizeof *e); return 0; }
`

const fakeHIPChildEnv = "DETCOLL_FAKE_HIP_CHILD"

func TestFakeRuntime(t *testing.T) {
	if os.Getenv(fakeHIPChildEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	lib := bindingtest.Build(t, dir, "libamdhip64-fake.so.6", "HIP runtime", fakeHIP)
	log := filepath.Join(dir, "calls.log")
	bindingtest.RunChild(t, "TestFakeRuntimeChild", LibraryEnv+"="+lib, "DETCOLL_FAKE_HIP_LOG="+log, fakeHIPChildEnv+"=1")
	want := []string{
		"malloc 1 256", "stream 1",
		"htoda 5001", "dtoda 5001", "dtoha 5001",
		"record e002 5001", "wait 5001 e002 0",
		"load \x7fELF",
		"launch 46 3 1 1 64 1 1 0 5001 deadbeef00 -7 1099511627776",
		"ipcopen 1", "ipcclose",
		"streamdestroy 5001", "free",
	}
	bindingtest.WantCalls(t, log, want)
}

func TestFakeRuntimeChild(t *testing.T) {
	if os.Getenv(fakeHIPChildEnv) == "" {
		t.Skip("run by TestFakeRuntime with a stand-in runtime")
	}
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	if v, err := RuntimeVersion(); err != nil || VersionString(v) != "6.4.43483" {
		t.Fatalf("version %d %v", v, err)
	}
	if SymbolName("hipGetDeviceProperties") != "hipGetDevicePropertiesR0600" {
		t.Fatalf("bound %s", SymbolName("hipGetDeviceProperties"))
	}
	n, err := DeviceCount()
	if err != nil || n != 2 {
		t.Fatalf("count %d %v", n, err)
	}
	p, err := Device(1).Properties()
	if err != nil || p.GCNArchName != "gfx942:sramecc+:xnack-" || p.WarpSize != 64 || p.Name != "Fake Instinct 1" {
		t.Fatalf("props %+v %v", p, err)
	}
	if id, err := Device(1).PCIBusID(); err != nil || id != "0000:0d:00.0" {
		t.Fatalf("bus id %q %v", id, err)
	}
	if ok, err := Device(0).CanAccessPeer(1); !ok || err != nil {
		t.Fatal("peer access")
	}
	if err := Device(9).Do(func() error { return nil }); !errors.Is(err, &Error{Code: gpurt.ResultInvalidDevice}) {
		t.Fatalf("bad device: %v", err)
	}
	err = Device(1).Do(func() error {
		if d, err := CurrentDevice(); err != nil || d != 1 {
			t.Errorf("current device %d %v", d, err)
		}
		if err := EnablePeerAccess(1); err != nil { // already enabled is not an error
			return err
		}
		if _, err := gpurt.MemAlloc[rt](1 << 41); !errors.Is(err, &Error{Code: gpurt.ResultOutOfMemory}) ||
			!strings.Contains(err.Error(), "fake: out of memory") {
			t.Errorf("huge alloc: %v", err)
		}
		buf, err := gpurt.MemAlloc[rt](256)
		if err != nil {
			return err
		}
		src := []byte("deterministic collectives on ROCm")
		host, err := gpurt.MemAllocHost[rt](len(src))
		if err != nil {
			return err
		}
		defer gpurt.MemFreeHost[rt](host)
		copy(host.Bytes(), src)
		s, err := StreamCreate(gpurt.StreamNonBlocking)
		if err != nil {
			return err
		}
		if err := gpurt.MemcpyHtoDAsync(buf, host, 0, len(src), s); err != nil {
			return err
		}
		if err := gpurt.MemcpyDtoDAsync(buf.Add(64), buf, len(src), s); err != nil {
			return err
		}
		back, err := gpurt.MemAllocHost[rt](len(src))
		if err != nil {
			return err
		}
		defer gpurt.MemFreeHost[rt](back)
		if err := gpurt.MemcpyDtoHAsync(back, 0, buf.Add(64), len(src), s); err != nil {
			return err
		}
		if string(back.Bytes()) != string(src) {
			t.Errorf("round trip %q", back.Bytes())
		}
		if done, err := s.Query(); done || err != nil {
			t.Errorf("query of a busy stream: %v %v", done, err)
		}
		e, err := EventCreate(gpurt.EventDisableTiming)
		if err != nil {
			return err
		}
		if err := e.Record(s); err != nil {
			return err
		}
		if err := s.WaitEvent(e); err != nil {
			return err
		}
		m, err := ModuleLoadData([]byte("\x7fELF fake code object"))
		if err != nil {
			return err
		}
		if _, err := m.Function("nope"); !errors.Is(err, &Error{Code: gpurt.ResultNotFound}) || !strings.Contains(err.Error(), "kernel nope") {
			t.Errorf("missing kernel: %v", err)
		}
		f, err := m.Function("k")
		if err != nil {
			return err
		}
		var a Args
		a.Ptr(0xdeadbeef00).I32(-7).I64(1 << 40)
		if err := gpurt.LaunchKernel(f, Dim3{X: 3, Y: 1, Z: 1}, Dim3{X: 64, Y: 1, Z: 1}, 0, s, &a); err != nil {
			return err
		}
		h, err := gpurt.IpcGetMemHandle[rt](buf)
		if err != nil {
			return err
		}
		q, err := gpurt.IpcOpenMemHandle(h)
		if err != nil || q != buf {
			t.Errorf("ipc open %x (want %x) %v", q, buf, err)
		}
		if err := gpurt.IpcCloseMemHandle[rt](q); err != nil {
			return err
		}
		var bad gpurt.IpcMemHandle[rt]
		if _, err := gpurt.IpcOpenMemHandle(bad); !errors.Is(err, &Error{Code: gpurt.ResultInvalidHandle}) {
			t.Errorf("bad handle: %v", err)
		}
		eh, err := IpcGetEventHandle(e)
		if err != nil {
			return err
		}
		if e2, err := IpcOpenEventHandle(eh); err != nil || e2 != e {
			t.Errorf("event handle %x %v", e2, err)
		}
		if ms, err := ElapsedTime(e, e); err != nil || ms != 1.25 {
			t.Errorf("elapsed %v %v", ms, err)
		}
		if err := s.Destroy(); err != nil {
			return err
		}
		return gpurt.MemFree[rt](buf)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := IPCAvailable(); err != nil {
		t.Fatal(err)
	}
	// Optional entry points the stand-in lacks report themselves.
	if _, err := (Stream(0)).EndCapture(); !errors.Is(err, &Error{Code: gpurt.ResultSymbolNotFound}) {
		t.Fatalf("missing optional symbol: %v", err)
	}
}
