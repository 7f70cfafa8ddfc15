// Package rccl is RCCL for the ROCm side of detcoll: it loads librccl.so.1
// (or the file named by $DETCOLL_RCCL_LIB) through the NCCL-API binding
// shared with NCCL (internal/ccl: same entry points, enums and 128-byte
// unique id) and types device buffers and streams as the HIP binding's
// (hip.DevicePtr, hip.Stream). It imports nothing of CUDA.
//
// Communicators are created with the HIP device current on the calling OS
// thread: call CommInitRank inside hip.Device.Do. Everything else is as in
// internal/ccl's contract. RCCL reads the NCCL_* environment variables.
package rccl

import (
	"sync"

	"github.com/detcoll/detcoll/internal/ccl"
	"github.com/detcoll/detcoll/internal/hip"
)

// LibraryEnv names the variable that overrides LibraryNames.
const LibraryEnv = "DETCOLL_RCCL_LIB"

// LibraryNames are the candidates: the soname on the loader path, then
// under $ROCM_PATH/lib, $ROCM_HOME/lib and /opt/rocm/lib.
func LibraryNames() []string {
	return append([]string{"librccl.so.1", "librccl.so"}, hip.UnderRoots("librccl.so.1")...)
}

// ErrUnavailable is wrapped by errors meaning "library not usable here".
var ErrUnavailable = ccl.ErrUnavailable

// Error is a failed call (internal/ccl's; the data types and operators are
// ccl's constants, shared with NCCL).
type Error = ccl.Error

// Lib is one loaded RCCL: internal/ccl's typed face with the HIP binding's
// device pointers and streams.
type Lib = ccl.TypedLib[hip.Runtime]

// Comm is an RCCL communicator of a Lib.
type Comm = ccl.TypedComm[hip.Runtime]

// Default loads RCCL ($DETCOLL_RCCL_LIB or LibraryNames) once per process.
var Default = sync.OnceValues(Load)

// Available reports why RCCL cannot be used, or nil.
func Available() error { _, err := Default(); return err }

// Load opens RCCL anew ($DETCOLL_RCCL_LIB or LibraryNames); keep the *Lib.
func Load() (*Lib, error) { return ccl.LoadTyped[hip.Runtime]("rccl", LibraryEnv, LibraryNames()...) }

// WrapComm gives a communicator of the shared binding (e.g.
// devcomm.Comm.CCL) RCCL's typed face; nil stays nil.
func WrapComm(c *ccl.Comm) *Comm { return ccl.WrapComm[hip.Runtime](c) }
