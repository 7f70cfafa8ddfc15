package cuda

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding/bindingtest"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
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
	e := errorOf(cuMemAlloc, gpurt.ResultOutOfMemory)
	var ce *Error
	if !errors.As(e, &ce) {
		t.Fatalf("errorOf returned %T", e)
	}
	if ce.Code != gpurt.ResultOutOfMemory || ce.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("mapped %+v", ce)
	}
	if !strings.Contains(e.Error(), "cuMemAlloc") || !strings.Contains(e.Error(), "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Fatalf("message %q", e.Error())
	}
	if !errors.Is(e, &Error{Code: gpurt.ResultOutOfMemory}) || errors.Is(e, &Error{Code: gpurt.ResultInvalidValue}) {
		t.Fatal("errors.Is by code")
	}
	if errorOf(cuMemAlloc, gpurt.ResultSuccess) != nil {
		t.Fatal("success mapped to an error")
	}
	if got := ResultName(12345); got != "CUDA_ERROR_12345" {
		t.Fatalf("unknown code name %q", got)
	}
	if got := ResultName(gpurt.ResultIllegalAddress); got != "CUDA_ERROR_ILLEGAL_ADDRESS" {
		t.Fatalf("illegal address name %q", got)
	}
	u := &Error{Code: gpurt.ResultUnavailable}
	if !errors.Is(u, ErrUnavailable) {
		t.Fatal("unavailable does not wrap ErrUnavailable")
	}
	if VersionString(13000) != "13.0" || VersionString(12080) != "12.8" {
		t.Fatal("VersionString")
	}
}

// The binding's errors for what gpurt refuses before a call, and Args'
// (internal/kparams tests the layout itself; gpurt the argument checks).
func TestVendorErrors(t *testing.T) {
	var a Args
	if err := a.Raw(nil, 3).Err(); err == nil || !strings.HasPrefix(err.Error(), "cuda: kernel parameter 0: alignment 3") {
		t.Fatalf("bad alignment: %v", err)
	}
	_, err := gpurt.MemAlloc[Runtime](-1)
	var e *Error
	if !errors.As(err, &e) || e.Code != gpurt.ResultInvalidValue || e.Call != "cuMemAlloc" || e.Name != "CUDA_ERROR_INVALID_VALUE" {
		t.Fatalf("negative alloc: %#v", err)
	}
	if !abi.IntegerDevicePtr || abi.HostAllocFlags {
		t.Fatalf("ABI %+v: CUdeviceptr is an integer, cuMemAllocHost takes no flags", abi)
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
	if _, err := gpurt.MemAlloc[Runtime](16); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("MemAlloc without driver: %v", err)
	}
	if err := gpurt.LaunchKernel(Function(0), Dim3{X: 1, Y: 1, Z: 1}, Dim3{X: 1, Y: 1, Z: 1}, 0, 0, (*Args)(nil)); !errors.Is(err, ErrUnavailable) {
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
