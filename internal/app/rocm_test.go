//go:build cgo && (rocm || !cuda)

package app

import (
	"errors"
	"strings"
	"testing"
)

func TestROCmRegistered(t *testing.T) {
	if _, ok := DeviceProbes["rocm"]; !ok {
		t.Fatal("no rocm probe")
	}
	if _, ok := Backends["rocm"]; ok {
		t.Fatal("a rocm bench backend is registered, but docs/rocm.md says there is none")
	}
	found := false
	for _, k := range GPUKinds() {
		found = found || k == "rocm"
	}
	if !found {
		t.Fatalf("kinds %v", GPUKinds())
	}
	err := ROCmAvailable()
	if err == nil {
		t.Fatal("ROCm reported available without a backend")
	}
	r := ROCmEnvReport()
	if !strings.Contains(r, "HIP runtime") || !strings.Contains(r, "rocm backend   unavailable: ") {
		t.Fatalf("report:\n%s", r)
	}
	if errors.Is(err, errROCmBackend) && !strings.Contains(r, "no ROCm benchmark") {
		t.Fatalf("report does not say what is missing:\n%s", r)
	}
}
