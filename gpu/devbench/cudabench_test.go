package devbench

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/gpu/devrt/cudart"
	"github.com/detcoll/detcoll/internal/cuda"
)

func TestAvailableSaysWhy(t *testing.T) {
	err := Available()
	if cuda.Available() != nil && err == nil {
		t.Fatal("Available reports the backend usable without a CUDA driver")
	}
	t.Logf("Available: %v", err)
	if cudart.Runtime.Vendor() != "cuda" {
		t.Fatal("cudart is not the cuda runtime")
	}
}

func TestDrop(t *testing.T) {
	if drop(0, 5) != 0 || drop(10, 12) != 0 || drop(10, 4) != 6 {
		t.Fatal("drop")
	}
}

// The report's device info per vendor: CUDA's fields unchanged (no HIP keys
// in its JSON), ROCm's HIP driver/runtime versions and RCCL.
func TestDeviceInfo(t *testing.T) {
	saved := Versions
	t.Cleanup(func() { Versions = saved })
	Versions = map[string]func() (string, string){
		"cuda": func() (string, string) { return "580.65", "13.0" },
		"rocm": func() (string, string) { return "6.4.43483", "6.4.43484" },
	}
	c := deviceInfo("cuda", []string{"NVIDIA H200"}, "2.27.7")
	if c.DriverVersion != "580.65" || c.CUDAVersion != "13.0" || c.NCCLVersion != "2.27.7" || c.HIPVersion != "" || c.CCL != "" {
		t.Errorf("cuda: %+v", c)
	}
	j, _ := json.Marshal(c)
	if strings.Contains(string(j), "hip_version") || strings.Contains(string(j), `"ccl"`) {
		t.Errorf("cuda JSON has ROCm keys: %s", j)
	}
	r := deviceInfo("rocm", []string{"AMD Instinct MI300X"}, "2.22.3")
	if r.DriverVersion != "6.4.43483" || r.HIPVersion != "6.4.43484" || r.CUDAVersion != "" || r.NCCLVersion != "2.22.3" || r.CCL != "RCCL" {
		t.Errorf("rocm: %+v", r)
	}
	j, _ = json.Marshal(r)
	if !strings.Contains(string(j), `"hip_version":"6.4.43484"`) || !strings.Contains(string(j), `"ccl":"RCCL"`) {
		t.Errorf("rocm JSON: %s", j)
	}
	delete(Versions, "rocm")
	if r := deviceInfo("rocm", nil, ""); r.HIPVersion != "" || r.DriverVersion != "" || r.CCL != "RCCL" {
		t.Errorf("rocm without versions: %+v", r)
	}
}
