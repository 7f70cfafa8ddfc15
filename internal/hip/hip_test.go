package hip

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding/bindingtest"
	"github.com/detcoll/detcoll/internal/binding/gpurt"
)

func TestSymbolTable(t *testing.T) {
	bindingtest.CheckSymbols(t, syms.Symbols, func(string) string { return "hip" }, "_spt")
	// Every candidate for the device properties has a known layout, the
	// ROCm 6 one first.
	c := syms.Symbols[hipGetDeviceProperties].Candidates
	if c[0] != "hipGetDevicePropertiesR0600" {
		t.Errorf("hipGetDeviceProperties candidates %v", c)
	}
	for _, n := range c {
		if _, ok := propLayouts[n]; !ok {
			t.Errorf("no layout for %s", n)
		}
	}
	// The calls a device backend cannot do without are not optional.
	for _, s := range []sym{hipMalloc, hipFree, hipModuleLoadData, hipModuleGetFunction, hipModuleLaunchKernel, hipStreamCreateWithFlags,
		hipEventCreateWithFlags, hipEventElapsedTime, hipMemcpyDtoDAsync, hipSetDevice, hipDeviceGetAttribute} {
		if syms.Symbols[s].Optional {
			t.Errorf("%s is optional", syms.API(s))
		}
	}
	if SymbolName("hipNoSuchThing") != "" {
		t.Error("unknown api has a symbol")
	}
	if Load() != nil && SymbolName("hipGetDeviceProperties") != "hipGetDevicePropertiesR0600" {
		t.Errorf("preferred properties symbol %q", SymbolName("hipGetDeviceProperties"))
	}
}

func TestLibraryNames(t *testing.T) {
	t.Setenv("ROCM_PATH", "/opt/rocm-6.4.1")
	t.Setenv("ROCM_HOME", "")
	n := LibraryNames()
	want := []string{"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"}
	for i, w := range want {
		if n[i] != w {
			t.Fatalf("names %v", n)
		}
	}
	joined := strings.Join(n, " ")
	for _, p := range []string{"/opt/rocm-6.4.1/lib/libamdhip64.so.6", "/opt/rocm/lib/libamdhip64.so.7"} {
		if !strings.Contains(joined, p) {
			t.Errorf("%s not among %v", p, n)
		}
	}
	if strings.Index(joined, "/opt/rocm-6.4.1/") > strings.Index(joined, "/opt/rocm/lib") {
		t.Error("$ROCM_PATH not searched before /opt/rocm")
	}
	t.Setenv("ROCM_PATH", "/opt/rocm")
	if r := RocmRoots(); len(r) != 1 || r[0] != "/opt/rocm" {
		t.Errorf("roots %v", r)
	}
	if LibraryEnv != "DETCOLL_HIP_LIB" {
		t.Error(LibraryEnv)
	}
	t.Setenv("ROCM_HOME", "/opt/rocm-7.0") // roots: $ROCM_PATH, $ROCM_HOME, /opt/rocm, once each
	if u := UnderRoots("a.so", "b.so"); strings.Join(u, " ") != "/opt/rocm/lib/a.so /opt/rocm/lib/b.so /opt/rocm-7.0/lib/a.so /opt/rocm-7.0/lib/b.so" {
		t.Errorf("UnderRoots = %v", u)
	}
}

func TestErrorMapping(t *testing.T) {
	for code, name := range map[Result]string{gpurt.ResultOutOfMemory: "hipErrorOutOfMemory", gpurt.ResultNoDevice: "hipErrorNoDevice",
		gpurt.ResultInvalidDevice: "hipErrorInvalidDevice", gpurt.ResultIllegalAddress: "hipErrorIllegalAddress",
		gpurt.ResultPeerAlreadyEnabled: "hipErrorPeerAccessAlreadyEnabled", gpurt.ResultLaunchFailed: "hipErrorLaunchFailure",
		gpurt.ResultNotReady: "hipErrorNotReady", gpurt.ResultNoBinaryForGPU: "hipErrorNoBinaryForGpu", ResultInvalidImage: "hipErrorInvalidImage"} {
		if ResultName(code) != name {
			t.Errorf("ResultName(%d) = %s, want %s", code, ResultName(code), name)
		}
	}
	e := errorOf(hipMalloc, gpurt.ResultOutOfMemory)
	var he *Error
	if !errors.As(e, &he) || he.Code != gpurt.ResultOutOfMemory || he.Name != "hipErrorOutOfMemory" || he.Call != "hipMalloc" {
		t.Fatalf("mapped %#v", e)
	}
	if !strings.HasPrefix(e.Error(), "hip: hipMalloc: hipErrorOutOfMemory") {
		t.Fatalf("message %q", e.Error())
	}
	if !errors.Is(e, &Error{Code: gpurt.ResultOutOfMemory}) || errors.Is(e, &Error{Code: gpurt.ResultInvalidValue}) {
		t.Fatal("errors.Is by code")
	}
	if errorOf(hipMalloc, gpurt.ResultSuccess) != nil {
		t.Fatal("success mapped to an error")
	}
	// A code neither HIP nor the table knows keeps its number.
	if e := errorOf(hipFree, 12345).(*Error); e.Name != "hipError(12345)" {
		t.Fatalf("unknown code named %q", e.Name)
	}
	if e := errorOf(hipIpcOpenMemHandle, gpurt.ResultSymbolNotFound).(*Error); !strings.Contains(e.Message, "hipIpcOpenMemHandle") {
		t.Fatalf("missing symbol message %q", e.Message)
	}
	if !errors.Is(&Error{Code: gpurt.ResultUnavailable}, ErrUnavailable) || errors.Is(&Error{Code: gpurt.ResultNoDevice}, ErrUnavailable) {
		t.Fatal("ErrUnavailable wrapping")
	}
}

func TestVersionString(t *testing.T) {
	if VersionString(50221153) != "5.2.21153" || VersionString(60443483) != "6.4.43483" || VersionMajor(70051831) != 7 {
		t.Fatal(VersionString(50221153), VersionString(60443483))
	}
}

// Args' errors name the vendor; an empty launch is refused with this
// binding's error, naming the documented entry point (internal/kparams
// tests the layout, gpurt the argument checks).
func TestVendorErrors(t *testing.T) {
	var a Args
	if err := a.I32(1).Raw(nil, 3).Err(); err == nil || !strings.HasPrefix(err.Error(), "hip: kernel parameter 1: alignment 3") {
		t.Fatalf("bad alignment: %v", err)
	}
	err := gpurt.LaunchKernel(Function(0), Dim3{X: 0, Y: 1, Z: 1}, Dim3{X: 64, Y: 1, Z: 1}, 0, 0, &Args{})
	if he, ok := err.(*Error); !ok || he.Code != gpurt.ResultInvalidValue || he.Call != "hipModuleLaunchKernel" || !strings.Contains(he.Message, "empty launch grid") {
		t.Fatalf("empty grid: %v", err)
	}
	if abi.IntegerDevicePtr || !abi.HostAllocFlags {
		t.Fatalf("ABI %+v: HIP device pointers are void*, hipHostMalloc takes flags", abi)
	}
}

// fakeProps lays out a hipDeviceProp_t of symbol's layout.
func fakeProps(symbol, name, arch string, warp int32) []byte {
	lay := propLayouts[symbol]
	b := make([]byte, propBufferSize)
	copy(b, name)
	copy(b[lay.gcnArchName:], arch)
	for i := 0; i < 4; i++ {
		b[lay.warpSize+i] = byte(uint32(warp) >> (8 * i))
	}
	return b
}

func TestParseProps(t *testing.T) {
	for sym := range propLayouts {
		b := fakeProps(sym, "AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 64)
		p, err := parseProps(b, sym, "AMD Instinct MI300X", 64)
		if err != nil || p.GCNArchName != "gfx942:sramecc+:xnack-" || p.WarpSize != 64 || p.Name != "AMD Instinct MI300X" || p.Layout != sym {
			t.Errorf("%s: %+v %v", sym, p, err)
		}
	}
	// Reading one layout as the other is caught, not returned as an arch.
	b := fakeProps("hipGetDevicePropertiesR0000", "AMD Instinct MI250X", "gfx90a:sramecc+:xnack-", 64)
	if _, err := parseProps(b, "hipGetDevicePropertiesR0600", "AMD Instinct MI250X", 64); err == nil {
		t.Error("R0000 struct read as R0600 accepted")
	}
	b = fakeProps("hipGetDevicePropertiesR0600", "AMD Instinct MI300X", "gfx942", 64)
	if _, err := parseProps(b, "hipGetDevicePropertiesR0600", "AMD Radeon", 64); err == nil {
		t.Error("name mismatch accepted")
	}
	if _, err := parseProps(b, "hipGetDevicePropertiesR0600", "AMD Instinct MI300X", 32); err == nil {
		t.Error("warp size mismatch accepted")
	}
	if _, err := parseProps(b, "hipGetDevicePropertiesR0600", "AMD Instinct MI300X", -1); err != nil {
		t.Errorf("unknown warp size: %v", err)
	}
	if _, err := parseProps(b, "hipGetDevicePropertiesR9999", "AMD Instinct MI300X", 64); err == nil {
		t.Error("unknown layout accepted")
	}
	if _, err := parseProps(b[:100], "hipGetDevicePropertiesR0600", "", -1); err == nil {
		t.Error("short buffer accepted")
	}
}

// TestAvailableHere loads the real runtime when it is installed (CI
// installs Debian's libamdhip64-5 and sets DETCOLL_REQUIRE_HIP=1, so there
// a missing runtime fails the test) and checks what works without a GPU.
func TestAvailableHere(t *testing.T) {
	if err := Load(); err != nil {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Load error %v does not wrap ErrUnavailable", err)
		}
		if os.Getenv("DETCOLL_REQUIRE_HIP") == "1" {
			t.Fatalf("DETCOLL_REQUIRE_HIP=1 but no HIP runtime: %v", err)
		}
		if _, err := DeviceCount(); err == nil {
			t.Fatal("DeviceCount without a runtime succeeded")
		}
		if LibraryPath() != "" {
			t.Fatal("library path without a runtime")
		}
		t.Skipf("no HIP runtime (libamdhip64): %v", err)
	}
	v, err := RuntimeVersion()
	if err != nil || VersionMajor(v) < 5 {
		t.Fatalf("runtime version %d %v", v, err)
	}
	t.Logf("HIP runtime %s at %s, properties via %s", VersionString(v), LibraryPath(), SymbolName("hipGetDeviceProperties"))
	if LibraryPath() == "" {
		t.Fatal("no library path")
	}
	if _, ok := propLayouts[SymbolName("hipGetDeviceProperties")]; !ok {
		t.Fatalf("bound %s, which has no layout", SymbolName("hipGetDeviceProperties"))
	}
	// Names and strings from the real runtime.
	e := errorOf(hipMalloc, gpurt.ResultOutOfMemory).(*Error)
	if e.Name != "hipErrorOutOfMemory" {
		t.Fatalf("runtime names code 2 %q", e.Name)
	}
	if e := errorOf(hipMalloc, 12345).(*Error); e.Name != "hipError(12345)" {
		t.Fatalf("runtime's unknown code named %q", e.Name)
	}
	if err := Init(); err != nil {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Init error %v does not wrap ErrUnavailable", err)
		}
		t.Logf("no usable AMD GPU (expected here): %v", err)
		if _, err := gpurt.MemAlloc[rt](16); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("MemAlloc without a GPU: %v", err)
		}
		if err := Device(0).Do(func() error { return nil }); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Do without a GPU: %v", err)
		}
		return
	}
	n, err := DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		p, err := Device(i).Properties()
		if err != nil {
			t.Fatalf("device %d: %v", i, err)
		}
		t.Logf("device %d: %+v", i, p)
	}
}
