package nvrtc

// sym indexes symbolNames.
type sym int

const (
	sVersion sym = iota
	sGetErrorString
	sGetNumSupportedArchs
	sGetSupportedArchs
	sCreateProgram
	sCompileProgram
	sGetProgramLogSize
	sGetProgramLog
	sGetCUBINSize
	sGetCUBIN
	sGetPTXSize
	sGetPTX
	sDestroyProgram
	numSyms
)

// symbolNames lists the NVRTC entry points in the order of the raw layer's
// index (raw_cgo.go). NVRTC exports unversioned names.
var symbolNames = []struct {
	name     string
	optional bool
}{
	{"nvrtcVersion", false},
	{"nvrtcGetErrorString", false},
	{"nvrtcGetNumSupportedArchs", true}, // NVRTC ≥ 11.2
	{"nvrtcGetSupportedArchs", true},
	{"nvrtcCreateProgram", false},
	{"nvrtcCompileProgram", false},
	{"nvrtcGetProgramLogSize", false},
	{"nvrtcGetProgramLog", false},
	{"nvrtcGetCUBINSize", true}, // NVRTC ≥ 11.1
	{"nvrtcGetCUBIN", true},
	{"nvrtcGetPTXSize", false},
	{"nvrtcGetPTX", false},
	{"nvrtcDestroyProgram", false},
}
