//go:build cgo && (rocm || !cuda)

package app

import (
	"strings"
	"testing"
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
