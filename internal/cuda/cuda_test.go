package cuda

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding/bindingtest"
)

func TestSymbolTable(t *testing.T) {
	bindingtest.CheckSymbols(t, syms.Symbols, func(api string) string { return api }, "_ptsz", "_ptds")
	// The versioned exports cuda.h (12.x/13.x) selects for the plain names.
	want := map[string]string{
		"cuMemAlloc": "cuMemAlloc_v2", "cuMemFree": "cuMemFree_v2", "cuMemGetInfo": "cuMemGetInfo_v2",
		"cuMemcpyHtoD": "cuMemcpyHtoD_v2", "cuMemcpyDtoH": "cuMemcpyDtoH_v2", "cuMemcpyDtoD": "cuMemcpyDtoD_v2",
		"cuMemcpyHtoDAsync": "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync": "cuMemcpyDtoHAsync_v2",
		"cuMemsetD8": "cuMemsetD8_v2", "cuMemsetD8Async": "cuMemsetD8Async",
		"cuDeviceTotalMem": "cuDeviceTotalMem_v2", "cuStreamDestroy": "cuStreamDestroy_v2",
		"cuEventDestroy": "cuEventDestroy_v2", "cuStreamBeginCapture": "cuStreamBeginCapture_v2",
		"cuGraphInstantiate": "cuGraphInstantiateWithFlags", "cuIpcOpenMemHandle": "cuIpcOpenMemHandle_v2",
		"cuDevicePrimaryCtxRelease": "cuDevicePrimaryCtxRelease_v2", "cuEventElapsedTime": "cuEventElapsedTime_v2",
		"cuLaunchKernel": "cuLaunchKernel", "cuModuleLoadData": "cuModuleLoadData", "cuMemAllocHost": "cuMemAllocHost_v2",
	}
	for api, sym := range want {
		if Available() == nil {
			break // names then reflect what the driver exports; checked on the GPU machine
		}
		if got := SymbolName(api); got != sym {
			t.Errorf("SymbolName(%s) = %q, want %q", api, got, sym)
		}
	}
	if SymbolName("cuNoSuchThing") != "" {
		t.Error("unknown api has a symbol")
	}
	// cuEventElapsedTime falls back to v1 on drivers before CUDA 12.8.
	c := syms.Symbols[cuEventElapsedTime].Candidates
	if len(c) != 2 || c[1] != "cuEventElapsedTime" {
		t.Errorf("cuEventElapsedTime candidates %v", c)
	}
}

func TestErrorMapping(t *testing.T) {
	e := errorOf(cuMemAlloc, ResultOutOfMemory)
	var ce *Error
	if !errors.As(e, &ce) {
		t.Fatalf("errorOf returned %T", e)
	}
	if ce.Code != ResultOutOfMemory || ce.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("mapped %+v", ce)
	}
	if !strings.Contains(e.Error(), "cuMemAlloc") || !strings.Contains(e.Error(), "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Fatalf("message %q", e.Error())
	}
	if !errors.Is(e, &Error{Code: ResultOutOfMemory}) || errors.Is(e, &Error{Code: ResultInvalidValue}) {
		t.Fatal("errors.Is by code")
	}
	if errorOf(cuMemAlloc, ResultSuccess) != nil {
		t.Fatal("success mapped to an error")
	}
	if got := ResultName(12345); got != "CUDA_ERROR_12345" {
		t.Fatalf("unknown code name %q", got)
	}
	if got := ResultName(ResultIllegalAddress); got != "CUDA_ERROR_ILLEGAL_ADDRESS" {
		t.Fatalf("illegal address name %q", got)
	}
	u := &Error{Code: ResultUnavailable}
	if !errors.Is(u, ErrUnavailable) {
		t.Fatal("unavailable does not wrap ErrUnavailable")
	}
	if VersionString(13000) != "13.0" || VersionString(12080) != "12.8" {
		t.Fatal("VersionString")
	}
}

func TestArgsLayout(t *testing.T) {
	var a Args
	a.Ptr(0x1122334455667788).I32(-2).I64(7).U32(9).F32(1.5).F64(math.Copysign(0, -1))
	buf, offs := a.Layout()
	wantOffs := []int32{0, 8, 16, 24, 28, 32}
	if len(offs) != len(wantOffs) {
		t.Fatalf("offsets %v", offs)
	}
	for i := range offs {
		if offs[i] != wantOffs[i] {
			t.Fatalf("offsets %v, want %v", offs, wantOffs)
		}
	}
	if len(buf) != 40 || buf[0] != 0x88 || buf[7] != 0x11 || buf[8] != 0xFE || buf[11] != 0xFF || buf[16] != 7 {
		t.Fatalf("buffer % x", buf)
	}
	if math.Float32frombits(uint32(buf[28])|uint32(buf[29])<<8|uint32(buf[30])<<16|uint32(buf[31])<<24) != 1.5 {
		t.Fatal("f32 bytes")
	}
	if buf[39] != 0x80 {
		t.Fatal("-0.0 sign bit")
	}
	a.Reset()
	a.I32(1).Raw(make([]byte, 24), 16)
	buf, offs = a.Layout()
	if offs[1] != 16 || len(buf) != 40 {
		t.Fatalf("struct alignment: offs %v size %d", offs, len(buf))
	}
	a.Raw(nil, 3)
	if err := a.Err(); err == nil || !strings.HasPrefix(err.Error(), "cuda: kernel parameter 2: alignment 3") {
		t.Fatalf("bad alignment: %v", err)
	}
	a.Reset()
	a.Raw(make([]byte, MaxArgBytes+1), 8)
	if a.Err() == nil {
		t.Fatal("oversized parameters accepted")
	}
	a.Reset()
	for i := 0; i < MaxArgs+1; i++ {
		a.I32(1)
	}
	if a.Err() == nil {
		t.Fatal("too many parameters accepted")
	}
}

func TestAvailableHere(t *testing.T) {
	err := Available()
	if err == nil {
		t.Logf("CUDA driver available: %s", LibraryPath())
		return
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Available error %v does not wrap ErrUnavailable", err)
	}
	t.Logf("no CUDA driver (expected without a GPU): %v", err)
	// Every wrapper then fails cleanly instead of crashing.
	if _, err := MemAlloc(16); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("MemAlloc without driver: %v", err)
	}
	if err := LaunchKernel(0, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, 0, nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("LaunchKernel without driver: %v", err)
	}
	if _, err := DeviceCount(); err == nil {
		t.Fatal("DeviceCount without driver succeeded")
	}
	if LibraryPath() != "" {
		t.Fatal("library path without driver")
	}
	if os.Getenv(LibraryEnv) != "" && !strings.Contains(err.Error(), os.Getenv(LibraryEnv)) {
		t.Fatalf("error does not name the override: %v", err)
	}
}

func TestArgumentChecks(t *testing.T) {
	if _, err := MemAlloc(-1); err == nil {
		t.Fatal("negative alloc")
	}
	if p, err := MemAlloc(0); p != 0 || err != nil {
		t.Fatal("zero alloc")
	}
	if err := MemFree(0); err != nil {
		t.Fatal("free nil")
	}
	if err := MemcpyHtoDAsync(0, HostMem{}, 0, 8, 0); err == nil {
		t.Fatal("async copy outside host buffer")
	}
	if _, err := ModuleLoadData(nil); err == nil {
		t.Fatal("empty image")
	}
}
