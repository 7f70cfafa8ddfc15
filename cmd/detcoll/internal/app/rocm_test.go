//go:build cgo && (rocm || !cuda)

package app

import (
	"strings"
	"testing"

	"github.com/detcoll/detcoll/gpu/devbench"
	"github.com/detcoll/detcoll/internal/hip"
)

func TestROCmRegistered(t *testing.T) {
	if _, ok := DeviceProbes["rocm"]; !ok {
		t.Fatal("no rocm probe")
	}
	if _, ok := Backends["rocm"]; !ok {
		t.Fatal("no rocm bench backend")
	}
	if _, ok := JobVerifiers["rocm"]; !ok {
		t.Fatal("no rocm verifier")
	}
	// The report's HIP versions. Debian's libamdhip64.so.5 (where installed)
	// loads without a GPU and answers both calls.
	if v, ok := devbench.Versions["rocm"]; !ok {
		t.Fatal("no rocm versions for the bench report")
	} else if driver, runtime := v(); hip.Load() == nil && (driver == "" || runtime == "") {
		t.Errorf("HIP runtime loads, but the report versions are driver %q, runtime %q", driver, runtime)
	} else {
		t.Logf("HIP driver %q, runtime %q", driver, runtime)
	}
	found := false
	for _, k := range GPUKinds() {
		found = found || k == "rocm"
	}
	if !found {
		t.Fatalf("kinds %v", GPUKinds())
	}
	err := ROCmAvailable()
	r := ROCmEnvReport()
	if !strings.Contains(r, "HIP runtime") {
		t.Fatalf("report:\n%s", r)
	}
	if err != nil {
		if !strings.Contains(r, "rocm backend   unavailable: ") {
			t.Fatalf("report does not say why rocm is unavailable:\n%s", r)
		}
	}
}
