package gpurt

// Result is a CUresult or a hipError_t: HIP mirrors the driver's codes, so
// both bindings' Result is this type. Their Error types stay distinct (by
// vendor), and each names codes from its own table (cuda.ResultName,
// hip.ResultName).
type Result int32

// The codes detcoll tests for, with the same value on both runtimes (each
// binding adds the ones only it has). ResultSymbolNotFound and
// ResultUnavailable are detcoll's own (negative, never returned by either).
const (
	ResultSuccess            Result = 0
	ResultInvalidValue       Result = 1
	ResultOutOfMemory        Result = 2
	ResultNotInitialized     Result = 3
	ResultNoDevice           Result = 100
	ResultInvalidDevice      Result = 101
	ResultNoBinaryForGPU     Result = 209
	ResultPeerAccessUnsupp   Result = 217
	ResultInvalidHandle      Result = 400
	ResultNotFound           Result = 500
	ResultNotReady           Result = 600
	ResultIllegalAddress     Result = 700
	ResultPeerAlreadyEnabled Result = 704
	ResultLaunchFailed       Result = 719
	ResultNotSupported       Result = 801
	ResultCaptureInvalidated Result = 901
	ResultUnknown            Result = 999

	ResultSymbolNotFound Result = -1
	ResultUnavailable    Result = -2
)
