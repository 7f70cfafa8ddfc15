package rocm

import "testing"

// TestInfoStringGolden pins the whole report (captured before the
// formatting helpers moved to internal/probefmt).
func TestInfoStringGolden(t *testing.T) {
	want := []string{
		"HIP runtime    6.4.43483 (/opt/rocm/lib/libamdhip64.so.6)\n               no usable AMD GPU: z\nhiprtc         6.4\nhiprtc targets gfx90a gfx942\nRCCL           unavailable: no RCCL: x\nHIP IPC calls  no\nAMD GPUs       2\n  0: AMD Instinct MI300X, gfx942:sramecc+:xnack-, wavefront 64, 192.0 GiB, 304 CUs, 0000:0c:00.0\n  1: AMD Instinct MI300X, gfx942, wavefront 64, 0.0 GiB, 0 CUs,  (hiprtc cannot compile for gfx942) (error: e)\npeer access:\n  0: Y .\n  1: Y Y\nerror: e1\n",
		"HIP runtime    unavailable: no HIP runtime: x\nhiprtc         unknown\nRCCL           2.20.5 (/opt/rocm/lib/librccl.so.1)\nAMD GPUs       0\n",
	}
	for k, i := range []Info{
		{HIPVersion: "6.4.43483", HIPLibrary: "/opt/rocm/lib/libamdhip64.so.6", HIPError: "no usable AMD GPU: z", HiprtcVersion: "6.4",
			HiprtcLibrary: "", HiprtcTargets: []string{"gfx90a", "gfx942"}, RCCLError: "no RCCL: x",
			GPUs: []GPU{{Ordinal: 0, Name: "AMD Instinct MI300X", GCNArchName: "gfx942:sramecc+:xnack-", Processor: "gfx942",
				Compilable: true, WarpSize: 64, TotalMemory: 192 << 30, ComputeUnits: 304, PCIBusID: "0000:0c:00.0"},
				{Ordinal: 1, Name: "AMD Instinct MI300X", GCNArchName: "gfx942", Processor: "gfx942", WarpSize: 64, Error: "e"}},
			PeerAccess: [][]bool{{true, false}, {true, true}}, Errors: []string{"e1"}},
		{HIPError: "no HIP runtime: x", RCCLVersion: "2.20.5", RCCLLibrary: "/opt/rocm/lib/librccl.so.1"},
	} {
		if got := i.String(); got != want[k] {
			t.Errorf("report %d:\n got %q\nwant %q", k, got, want[k])
		}
	}
}
