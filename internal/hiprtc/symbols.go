package hiprtc

import (
	"path/filepath"

	"github.com/detcoll/detcoll/internal/hip"
	"github.com/detcoll/detcoll/internal/kcache"
)

// comgr entry points used to list the supported ISAs (optional library).
const (
	comgrGetISACount = "amd_comgr_get_isa_count"
	comgrGetISAName  = "amd_comgr_get_isa_name"
	comgrGetVersion  = "amd_comgr_get_version"
)

// LibraryEnv overrides LibraryNames.
const LibraryEnv = "DETCOLL_HIPRTC_LIB"

// ComgrEnv overrides ComgrNames.
const ComgrEnv = "DETCOLL_COMGR_LIB"

// CacheEnv overrides the disk cache directory (internal/kcache, shared with
// internal/nvrtc).
const CacheEnv = kcache.Env

// LibraryNames are the hiprtc candidates, newest ROCm first: libhiprtc of
// ROCm 7 and 6, then ROCm 5's runtime, which exports hiprtc itself; the
// sonames on the loader path first, then under each ROCm root.
func LibraryNames() []string {
	sonames := []string{"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so"}
	rt5 := "libamdhip64.so.5"
	names := append(append([]string(nil), sonames...), rt5)
	for _, r := range hip.RocmRoots() {
		for _, n := range append(sonames, rt5) {
			names = append(names, filepath.Join(r, "lib", n))
		}
	}
	return names
}

// ComgrNames are the candidates for the code object manager that hiprtc
// compiles with (libamd_comgr.so.3 from ROCm 7, .so.2 before).
func ComgrNames() []string {
	sonames := []string{"libamd_comgr.so.3", "libamd_comgr.so.2", "libamd_comgr.so"}
	names := append([]string(nil), sonames...)
	for _, r := range hip.RocmRoots() {
		for _, n := range sonames {
			names = append(names, filepath.Join(r, "lib", n))
		}
	}
	return names
}
