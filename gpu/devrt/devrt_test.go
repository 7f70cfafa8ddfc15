package devrt

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// fakeRT is a registered runtime of a vendor whose Available is set by the
// test; Get calls nothing else.
type fakeRT struct {
	Runtime
	vendor string
	avail  error
}

func (f *fakeRT) Vendor() string   { return f.vendor }
func (f *fakeRT) Available() error { return f.avail }

// withRuntimes replaces the registry for one test (the package's own
// registry is empty: this test binary links no vendor).
func withRuntimes(t *testing.T, rts ...Runtime) {
	t.Helper()
	mu.Lock()
	saved := runtimes
	runtimes = map[string]Runtime{}
	mu.Unlock()
	for _, r := range rts {
		Register(r)
	}
	t.Cleanup(func() { mu.Lock(); runtimes = saved; mu.Unlock() })
}

func TestGetNoneLinked(t *testing.T) {
	withRuntimes(t)
	t.Setenv(DeviceEnv, "")
	if r, err := Get(""); !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), "links no GPU vendor") {
		t.Fatalf("Get with nothing linked = %v, %v", r, err)
	}
	if r, err := Get("cuda"); !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), `"cuda" is not linked`) {
		t.Fatalf("Get(cuda) with nothing linked = %v, %v", r, err)
	}
}

func TestGetSelection(t *testing.T) {
	noGPU := errors.New("no GPU")
	cuda := &fakeRT{vendor: "cuda", avail: noGPU}
	rocm := &fakeRT{vendor: "rocm"}
	// Registration order does not matter: rocm registers first here.
	withRuntimes(t, rocm, cuda)
	if got := fmt.Sprint(Registered()); got != "[cuda rocm]" {
		t.Fatalf("Registered = %s", got)
	}
	t.Setenv(DeviceEnv, "")

	get := func(v string) Runtime {
		t.Helper()
		r, err := Get(v)
		if err != nil {
			t.Fatalf("Get(%q): %v", v, err)
		}
		return r
	}
	// auto: the first available one (CUDA has no GPU here).
	if get("") != rocm || get("auto") != rocm || get(" AUTO ") != rocm {
		t.Error("auto did not pick the available ROCm runtime")
	}
	// CUDA first when both are usable.
	cuda.avail = nil
	if get("") != cuda {
		t.Error("auto did not prefer CUDA when both are available")
	}
	// Neither usable: the first registered (CUDA), whose Available says why.
	cuda.avail, rocm.avail = noGPU, noGPU
	if get("") != cuda {
		t.Error("auto with nothing usable is not the first registered runtime")
	}
	// An explicit vendor is returned even when unavailable (its error is the
	// caller's to report), case and spaces ignored.
	if get("rocm") != rocm || get(" ROCm ") != rocm || get("CUDA") != cuda {
		t.Error("explicit vendor")
	}
	// $DETCOLL_DEVICE picks for "" and "auto", not over an explicit vendor.
	cuda.avail = nil
	t.Setenv(DeviceEnv, "rocm")
	if get("") != rocm || get("auto") != rocm || get("cuda") != cuda {
		t.Error("DETCOLL_DEVICE=rocm")
	}
	t.Setenv(DeviceEnv, "auto")
	if get("") != cuda {
		t.Error("DETCOLL_DEVICE=auto")
	}
	t.Setenv(DeviceEnv, "opencl")
	if r, err := Get(""); !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), `"opencl"`) ||
		!strings.Contains(err.Error(), "[cuda rocm]") {
		t.Fatalf("DETCOLL_DEVICE=opencl: %v, %v", r, err)
	}
}

func TestGetOnlyROCmLinked(t *testing.T) {
	rocm := &fakeRT{vendor: "rocm", avail: errors.New("no GPU")}
	withRuntimes(t, rocm)
	t.Setenv(DeviceEnv, "")
	if r, err := Get(""); err != nil || r != rocm {
		t.Fatalf("Get = %v, %v", r, err)
	}
	if _, err := Get("cuda"); !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), "[rocm]") {
		t.Fatalf("Get(cuda) in a ROCm-only build: %v", err)
	}
}

func TestPtrAdd(t *testing.T) {
	if Ptr(0x1000).Add(256) != 0x1100 {
		t.Fatal("Ptr.Add")
	}
}
