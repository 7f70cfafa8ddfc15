package hiprtc

import (
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
	names := []string{"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so", "libamdhip64.so.5"}
	return append(names, hip.UnderRoots(names...)...)
}

// ComgrNames are the candidates for the code object manager that hiprtc
// compiles with (libamd_comgr.so.3 from ROCm 7, .so.2 before).
func ComgrNames() []string {
	names := []string{"libamd_comgr.so.3", "libamd_comgr.so.2", "libamd_comgr.so"}
	return append(names, hip.UnderRoots(names...)...)
}
