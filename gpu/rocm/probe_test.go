package rocm

import (
	"os"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/hip"
)

func TestTargetOverride(t *testing.T) {
	t.Setenv(ArchEnv, "gfx942:sramecc+:xnack-")
	if a, env, err := Target(0); err != nil || !env || a != "gfx942:sramecc+:xnack-" {
		t.Fatalf("override: %q %v %v", a, env, err)
	}
	t.Setenv(ArchEnv, "sm_90")
	if _, _, err := Target(0); err == nil || !strings.Contains(err.Error(), ArchEnv) {
		t.Fatalf("bad override accepted: %v", err)
	}
	t.Setenv(ArchEnv, "")
	if hip.Available() != nil {
		if _, _, err := Target(0); err == nil || !strings.Contains(err.Error(), ArchEnv) {
			t.Fatalf("no device, no override: %v", err)
		}
	}
}

func TestInfoString(t *testing.T) {
	i := Info{HIPVersion: "6.4.43483", HIPLibrary: "/opt/rocm/lib/libamdhip64.so.6", HiprtcVersion: "6.4",
		HiprtcLibrary: "/opt/rocm/lib/libhiprtc.so.6", HiprtcTargets: []string{"gfx90a", "gfx942"}, RCCLError: "no RCCL: x",
		IPC: true, GPUs: []GPU{{Ordinal: 0, Name: "AMD Instinct MI300X", GCNArchName: "gfx942:sramecc+:xnack-", Processor: "gfx942",
			Compilable: true, WarpSize: 64, TotalMemory: 192 << 30, ComputeUnits: 304, PCIBusID: "0000:0c:00.0"},
			{Ordinal: 1, Name: "AMD Instinct MI300X", GCNArchName: "gfx942", Processor: "gfx942", WarpSize: 64}},
		PeerAccess: [][]bool{{true, true}, {true, true}}}
	s := i.String()
	for _, want := range []string{"HIP runtime    6.4.43483 (/opt/rocm/lib/libamdhip64.so.6)", "hiprtc targets gfx90a gfx942",
		"RCCL           unavailable: no RCCL: x", "AMD GPUs       2", "0: AMD Instinct MI300X, gfx942:sramecc+:xnack-, wavefront 64, 192.0 GiB, 304 CUs",
		"hiprtc cannot compile for gfx942", "peer access:", "HIP IPC calls  yes"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}

// TestProbeHere runs Probe on this machine: it must not fail, and with
// Debian's HIP installed (CI: $DETCOLL_REQUIRE_HIP=1) it finds the runtime
// and hiprtc but no GPU.
func TestProbeHere(t *testing.T) {
	i := Probe()
	t.Logf("\n%s", i)
	if os.Getenv("DETCOLL_REQUIRE_HIP") == "1" {
		if i.HIPVersion == "" || i.HiprtcVersion == "" {
			t.Fatalf("DETCOLL_REQUIRE_HIP=1 but the probe found no runtime or hiprtc: %+v", i)
		}
	}
	if i.HIPVersion == "" && i.HIPError == "" {
		t.Fatal("neither a runtime nor a reason")
	}
	if hip.Available() != nil && (len(i.GPUs) != 0 || !strings.Contains(i.String(), "AMD GPUs       0")) {
		t.Fatalf("GPUs without a usable runtime: %+v", i.GPUs)
	}
}
