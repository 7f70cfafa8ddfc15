package cudart

import "testing"

// TestInfoStringGolden pins the whole report (captured before the
// formatting helpers moved to internal/probefmt).
func TestInfoStringGolden(t *testing.T) {
	want := []string{
		"NVIDIA driver  580.65.06\nCUDA driver    13.0 (/usr/lib/libcuda.so.1)\nNVRTC          13.0 ()\nNCCL           unavailable: no NCCL: x\nGPUs           2\n  0: NVIDIA H200, cc 9.0, 141.0 GiB, 132 SMs, 0000:19:00.0 GPU-1\n  1: , cc , 0.0 GiB, 0 SMs,   (error: boom)\npeer access:\n  0: Y .\n  1: Y Y\nerror: e1\nerror: e2\n",
		"NVIDIA driver  unknown\nCUDA driver    unavailable: no CUDA driver: x\nNVRTC          unavailable: no NVRTC: y\nNCCL           unknown\nGPUs           0\n",
	}
	for k, i := range []Info{
		{DriverVersion: "580.65.06", CUDAVersion: "13.0", CUDALibrary: "/usr/lib/libcuda.so.1", NVRTCVersion: "13.0", NVRTCLibrary: "", NCCLError: "no NCCL: x",
			GPUs:       []GPUInfo{{Ordinal: 0, Name: "NVIDIA H200", ComputeCapability: "9.0", TotalMemory: 141 << 30, Multiprocessors: 132, PCIBusID: "0000:19:00.0", UUID: "GPU-1"}, {Ordinal: 1, Error: "boom"}},
			PeerAccess: [][]bool{{true, false}, {true, true}}, Errors: []string{"e1", "e2"}},
		{CUDAError: "no CUDA driver: x", NVRTCError: "no NVRTC: y", PeerAccess: [][]bool{{true}}},
	} {
		if got := i.String(); got != want[k] {
			t.Errorf("report %d:\n got %q\nwant %q", k, got, want[k])
		}
	}
}
