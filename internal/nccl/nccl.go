package nccl

import (
	"sync"

	"github.com/detcoll/detcoll/internal/ccl"
	"github.com/detcoll/detcoll/internal/cuda"
)

// NCCLNames are the library candidates; $DETCOLL_NCCL_LIB (NCCLEnv)
// overrides them. RCCL's are internal/rccl's.
var NCCLNames = []string{"libnccl.so.2", "libnccl.so"}

// NCCLEnv names the variable that overrides NCCLNames.
const NCCLEnv = "DETCOLL_NCCL_LIB"

// ErrUnavailable is wrapped by errors meaning "library not usable here".
var ErrUnavailable = ccl.ErrUnavailable

// Error is a failed call (internal/ccl's; its enums, data types and
// operators are ccl's constants, the same for NCCL and RCCL).
type Error = ccl.Error

// Lib is one loaded NCCL: internal/ccl's typed face with the CUDA binding's
// device pointers and streams.
type Lib = ccl.TypedLib[cuda.Runtime]

// Comm is an ncclComm_t of a Lib.
type Comm = ccl.TypedComm[cuda.Runtime]

// Default loads NCCL ($DETCOLL_NCCL_LIB or NCCLNames) once per process.
var Default = sync.OnceValues(func() (*Lib, error) { return Load(NCCLEnv, NCCLNames...) })

// Available reports why NCCL cannot be used, or nil.
func Available() error { _, err := Default(); return err }

// Load opens a library with NCCL's API: the file named by envVar if set,
// else the first of names that loads. Each call loads anew; keep the *Lib.
func Load(envVar string, names ...string) (*Lib, error) {
	return ccl.LoadTyped[cuda.Runtime]("nccl", envVar, names...)
}

// WrapComm gives a communicator of the shared binding (e.g.
// devcomm.Comm.CCL) NCCL's typed face; nil stays nil.
func WrapComm(c *ccl.Comm) *Comm { return ccl.WrapComm[cuda.Runtime](c) }
