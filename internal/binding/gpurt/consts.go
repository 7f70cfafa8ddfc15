package gpurt

// The flag and enum values the shared calls take: CUDA and HIP give them
// the same values (HIP mirrors the driver API), so they are named once here
// rather than once per binding.

// Stream and event creation flags (CU_STREAM_* / hipStream*, CU_EVENT_* /
// hipEvent*).
const (
	StreamDefault     uint32 = 0
	StreamNonBlocking uint32 = 1

	EventDefault       uint32 = 0
	EventBlockingSync  uint32 = 1
	EventDisableTiming uint32 = 2
	EventInterprocess  uint32 = 4
)

// Stream capture modes.
const (
	CaptureGlobal      CaptureMode = 0
	CaptureThreadLocal CaptureMode = 1
	CaptureRelaxed     CaptureMode = 2
)

// Stream capture statuses.
const (
	CaptureNone        CaptureStatus = 0
	CaptureActive      CaptureStatus = 1
	CaptureInvalidated CaptureStatus = 2
)

// Function attributes (for reports: registers, spills). CUDA's further ones
// (PTX and binary version) are internal/cuda's.
const (
	FuncMaxThreadsPerBlock FunctionAttribute = 0
	FuncSharedSizeBytes    FunctionAttribute = 1
	FuncConstSizeBytes     FunctionAttribute = 2
	FuncLocalSizeBytes     FunctionAttribute = 3
	FuncNumRegs            FunctionAttribute = 4
)
