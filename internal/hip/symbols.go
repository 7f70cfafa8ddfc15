package hip

import (
	"os"
	"path/filepath"
)

// propLayout is where detcoll's fields lie in one hipDeviceProp_t layout
// (offsets on x86-64 Linux, from the ROCm headers: hipDeviceProp_tR0000 of
// ROCm 5.x, hipDeviceProp_tR0600 of ROCm 6 and later).
type propLayout struct {
	size        int // sizeof the struct
	warpSize    int // offsetof(warpSize)
	gcnArchName int // offsetof(gcnArchName), char[256]
}

// nameLen is the length of both char arrays, name (at offset 0 in every
// layout) and gcnArchName.
const nameLen = 256

// propLayouts maps the exported symbol bound for hipGetDeviceProperties to
// the layout it fills.
var propLayouts = map[string]propLayout{
	"hipGetDevicePropertiesR0600": {size: 1472, warpSize: 308, gcnArchName: 1160},
	"hipGetDevicePropertiesR0000": {size: 792, warpSize: 276, gcnArchName: 396},
	"hipGetDeviceProperties":      {size: 792, warpSize: 276, gcnArchName: 396}, // ROCm 5.x
}

// propBufferSize is the buffer hipGetDeviceProperties writes into: larger
// than every known layout, so that a newer, larger struct cannot write past
// it before the checks notice the layout is unknown.
const propBufferSize = 8192

// LibraryEnv names the environment variable that overrides LibraryNames.
const LibraryEnv = "DETCOLL_HIP_LIB"

// LibraryNames are the candidates for the HIP runtime, newest ROCm first:
// the sonames on the loader path, then the same files under $ROCM_PATH/lib
// and /opt/rocm/lib (often not on the loader path).
func LibraryNames() []string {
	sonames := []string{"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"}
	return append(sonames, UnderRoots(sonames...)...)
}

// UnderRoots is each of names under the lib directory of each ROCm root
// (RocmRoots), root by root: where the ROCm libraries' candidates are
// looked for after the loader path (hip, hiprtc, comgr, rccl).
func UnderRoots(names ...string) []string {
	var out []string
	for _, r := range RocmRoots() {
		for _, n := range names {
			out = append(out, filepath.Join(r, "lib", n))
		}
	}
	return out
}

// RocmRoots are the ROCm installation roots searched after the loader path:
// $ROCM_PATH, $ROCM_HOME, then /opt/rocm, without duplicates.
func RocmRoots() []string {
	var roots []string
	seen := map[string]bool{}
	for _, r := range []string{os.Getenv("ROCM_PATH"), os.Getenv("ROCM_HOME"), "/opt/rocm"} {
		if r != "" && !seen[r] {
			seen[r] = true
			roots = append(roots, r)
		}
	}
	return roots
}
