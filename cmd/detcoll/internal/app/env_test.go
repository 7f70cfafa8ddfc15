package app

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestEnvReportKinds(t *testing.T) {
	r := EnvReport()
	kinds := GPUKinds()
	if !strings.HasPrefix(r, "GPU kinds in this build: ") {
		t.Fatalf("report starts %q", r[:min(len(r), 60)])
	}
	for _, k := range kinds {
		if !strings.Contains(r, "-- "+k+"\n") {
			t.Errorf("no %s section:\n%s", k, r)
		}
	}
	if len(kinds) == 0 && cgoEnabled && strings.Contains(r, "without cgo") {
		t.Error("a cgo build says it was built without cgo")
	}
	m := EnvJSON()
	if _, err := json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if got, _ := m["gpu_kinds"].([]string); len(got) != len(kinds) {
		t.Fatalf("gpu_kinds %v, want %v", m["gpu_kinds"], kinds)
	}
}

// A kind that registered only a probe (rocm today) is never picked by
// --device auto, even when its probe passes.
func TestResolveDeviceNeedsBackend(t *testing.T) {
	old, had := DeviceProbes["rocm"]
	oldB, hadB := Backends["rocm"]
	delete(Backends, "rocm")
	DeviceProbes["rocm"] = func() error { return nil }
	t.Cleanup(func() {
		if had {
			DeviceProbes["rocm"] = old
		} else {
			delete(DeviceProbes, "rocm")
		}
		if hadB {
			Backends["rocm"] = oldB
		}
	})
	if d, err := ResolveDevice("auto"); err != nil || d == "rocm" {
		t.Fatalf("auto resolved to %q %v", d, err)
	}
	_, err := ResolveDevice("rocm")
	if err == nil || !strings.Contains(err.Error(), "no benchmark backend in this build (have cpu") {
		t.Fatalf("explicit rocm without a backend: %v", err)
	}
}
