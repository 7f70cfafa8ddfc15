package ccl

type sym int

const (
	sGetVersion sym = iota
	sGetUniqueID
	sCommInitRank
	sCommDestroy
	sCommAbort
	sCommGetAsyncError
	sGetErrorString
	sGetLastError
	sAllGather
	sAllReduce
	sReduceScatter
	sBroadcast
	sSend
	sRecv
	sGroupStart
	sGroupEnd
	sMemAlloc
	sMemFree
	sCommWindowRegister
	sCommWindowDeregister
	numSyms
)

// symbolNames is indexed by sym; NCCL and RCCL export the same names.
var symbolNames = [numSyms]struct {
	name     string
	optional bool
}{
	sGetVersion:        {"ncclGetVersion", false},
	sGetUniqueID:       {"ncclGetUniqueId", false},
	sCommInitRank:      {"ncclCommInitRank", false},
	sCommDestroy:       {"ncclCommDestroy", false},
	sCommAbort:         {"ncclCommAbort", false},
	sCommGetAsyncError: {"ncclCommGetAsyncError", false},
	sGetErrorString:    {"ncclGetErrorString", false},
	sGetLastError:      {"ncclGetLastError", true}, // NCCL ≥ 2.13
	sAllGather:         {"ncclAllGather", false},
	sAllReduce:         {"ncclAllReduce", false},
	sReduceScatter:     {"ncclReduceScatter", false},
	sBroadcast:         {"ncclBroadcast", false},
	sSend:              {"ncclSend", true}, // NCCL ≥ 2.7
	sRecv:              {"ncclRecv", true},
	sGroupStart:        {"ncclGroupStart", false},
	sGroupEnd:          {"ncclGroupEnd", false},
	// Symmetric memory (NCCL ≥ 2.27; ncclMemAlloc ≥ 2.19; not in RCCL).
	sMemAlloc:             {"ncclMemAlloc", true},
	sMemFree:              {"ncclMemFree", true},
	sCommWindowRegister:   {"ncclCommWindowRegister", true},
	sCommWindowDeregister: {"ncclCommWindowDeregister", true},
}
