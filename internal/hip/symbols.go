package hip

import (
	"os"
	"path/filepath"
)

// sym indexes the runtime symbol table.
type sym int

const (
	sInit sym = iota
	sRuntimeGetVersion
	sDriverGetVersion
	sGetErrorName
	sGetErrorString
	sGetDeviceCount
	sGetDevice
	sSetDevice
	sDeviceGetName
	sDeviceGetAttribute
	sDeviceTotalMem
	sDeviceGetPCIBusID
	sDeviceCanAccessPeer
	sDeviceEnablePeerAccess
	sGetDeviceProperties
	sDeviceSynchronize
	sMemGetInfo
	sMalloc
	sFree
	sHostMalloc
	sHostFree
	sMemcpyHtoD
	sMemcpyDtoH
	sMemcpyDtoD
	sMemcpyHtoDAsync
	sMemcpyDtoHAsync
	sMemcpyDtoDAsync
	sMemsetD8
	sMemsetD8Async
	sMemGetAddressRange
	sStreamCreateWithFlags
	sStreamDestroy
	sStreamSynchronize
	sStreamQuery
	sStreamWaitEvent
	sEventCreateWithFlags
	sEventRecord
	sEventSynchronize
	sEventQuery
	sEventDestroy
	sEventElapsedTime
	sModuleLoadData
	sModuleUnload
	sModuleGetFunction
	sFuncGetAttribute
	sModuleLaunchKernel
	sStreamBeginCapture
	sStreamEndCapture
	sStreamIsCapturing
	sGraphInstantiate
	sGraphLaunch
	sGraphExecDestroy
	sGraphDestroy
	sIpcGetMemHandle
	sIpcOpenMemHandle
	sIpcCloseMemHandle
	sIpcGetEventHandle
	sIpcOpenEventHandle
	numSyms
)

// symbolSpec names one entry point: the candidates in order of preference
// and whether the binding can work without it.
type symbolSpec struct {
	api        string   // the name in the HIP documentation
	candidates []string // exported names to try, best first
	optional   bool
}

// symbols is indexed by sym. HIP exports plain names (with ELF symbol
// versions such as hip_4.2, which dlsym resolves to the default version);
// the only renamed entry point detcoll uses is hipGetDeviceProperties
// (R0600 layout from ROCm 6 on, see propLayouts).
var symbols = [numSyms]symbolSpec{
	sInit:                   {"hipInit", []string{"hipInit"}, false},
	sRuntimeGetVersion:      {"hipRuntimeGetVersion", []string{"hipRuntimeGetVersion"}, false},
	sDriverGetVersion:       {"hipDriverGetVersion", []string{"hipDriverGetVersion"}, false},
	sGetErrorName:           {"hipGetErrorName", []string{"hipGetErrorName"}, true},
	sGetErrorString:         {"hipGetErrorString", []string{"hipGetErrorString"}, true},
	sGetDeviceCount:         {"hipGetDeviceCount", []string{"hipGetDeviceCount"}, false},
	sGetDevice:              {"hipGetDevice", []string{"hipGetDevice"}, false},
	sSetDevice:              {"hipSetDevice", []string{"hipSetDevice"}, false},
	sDeviceGetName:          {"hipDeviceGetName", []string{"hipDeviceGetName"}, false},
	sDeviceGetAttribute:     {"hipDeviceGetAttribute", []string{"hipDeviceGetAttribute"}, false},
	sDeviceTotalMem:         {"hipDeviceTotalMem", []string{"hipDeviceTotalMem"}, false},
	sDeviceGetPCIBusID:      {"hipDeviceGetPCIBusId", []string{"hipDeviceGetPCIBusId"}, true},
	sDeviceCanAccessPeer:    {"hipDeviceCanAccessPeer", []string{"hipDeviceCanAccessPeer"}, true},
	sDeviceEnablePeerAccess: {"hipDeviceEnablePeerAccess", []string{"hipDeviceEnablePeerAccess"}, true},
	// ROCm 6 renamed the struct (hipDeviceProp_tR0600) and maps the plain
	// name to hipGetDevicePropertiesR0600; ROCm 5 has only the R0000 layout.
	sGetDeviceProperties:   {"hipGetDeviceProperties", []string{"hipGetDevicePropertiesR0600", "hipGetDevicePropertiesR0000", "hipGetDeviceProperties"}, true},
	sDeviceSynchronize:     {"hipDeviceSynchronize", []string{"hipDeviceSynchronize"}, false},
	sMemGetInfo:            {"hipMemGetInfo", []string{"hipMemGetInfo"}, false},
	sMalloc:                {"hipMalloc", []string{"hipMalloc"}, false},
	sFree:                  {"hipFree", []string{"hipFree"}, false},
	sHostMalloc:            {"hipHostMalloc", []string{"hipHostMalloc"}, false},
	sHostFree:              {"hipHostFree", []string{"hipHostFree"}, false},
	sMemcpyHtoD:            {"hipMemcpyHtoD", []string{"hipMemcpyHtoD"}, false},
	sMemcpyDtoH:            {"hipMemcpyDtoH", []string{"hipMemcpyDtoH"}, false},
	sMemcpyDtoD:            {"hipMemcpyDtoD", []string{"hipMemcpyDtoD"}, false},
	sMemcpyHtoDAsync:       {"hipMemcpyHtoDAsync", []string{"hipMemcpyHtoDAsync"}, false},
	sMemcpyDtoHAsync:       {"hipMemcpyDtoHAsync", []string{"hipMemcpyDtoHAsync"}, false},
	sMemcpyDtoDAsync:       {"hipMemcpyDtoDAsync", []string{"hipMemcpyDtoDAsync"}, false},
	sMemsetD8:              {"hipMemsetD8", []string{"hipMemsetD8"}, false},
	sMemsetD8Async:         {"hipMemsetD8Async", []string{"hipMemsetD8Async"}, false},
	sMemGetAddressRange:    {"hipMemGetAddressRange", []string{"hipMemGetAddressRange"}, true},
	sStreamCreateWithFlags: {"hipStreamCreateWithFlags", []string{"hipStreamCreateWithFlags"}, false},
	sStreamDestroy:         {"hipStreamDestroy", []string{"hipStreamDestroy"}, false},
	sStreamSynchronize:     {"hipStreamSynchronize", []string{"hipStreamSynchronize"}, false},
	sStreamQuery:           {"hipStreamQuery", []string{"hipStreamQuery"}, false},
	sStreamWaitEvent:       {"hipStreamWaitEvent", []string{"hipStreamWaitEvent"}, false},
	sEventCreateWithFlags:  {"hipEventCreateWithFlags", []string{"hipEventCreateWithFlags"}, false},
	sEventRecord:           {"hipEventRecord", []string{"hipEventRecord"}, false},
	sEventSynchronize:      {"hipEventSynchronize", []string{"hipEventSynchronize"}, false},
	sEventQuery:            {"hipEventQuery", []string{"hipEventQuery"}, false},
	sEventDestroy:          {"hipEventDestroy", []string{"hipEventDestroy"}, false},
	sEventElapsedTime:      {"hipEventElapsedTime", []string{"hipEventElapsedTime"}, false},
	sModuleLoadData:        {"hipModuleLoadData", []string{"hipModuleLoadData"}, false},
	sModuleUnload:          {"hipModuleUnload", []string{"hipModuleUnload"}, false},
	sModuleGetFunction:     {"hipModuleGetFunction", []string{"hipModuleGetFunction"}, false},
	sFuncGetAttribute:      {"hipFuncGetAttribute", []string{"hipFuncGetAttribute"}, true},
	sModuleLaunchKernel:    {"hipModuleLaunchKernel", []string{"hipModuleLaunchKernel"}, false},
	sStreamBeginCapture:    {"hipStreamBeginCapture", []string{"hipStreamBeginCapture"}, true},
	sStreamEndCapture:      {"hipStreamEndCapture", []string{"hipStreamEndCapture"}, true},
	sStreamIsCapturing:     {"hipStreamIsCapturing", []string{"hipStreamIsCapturing"}, true},
	sGraphInstantiate:      {"hipGraphInstantiateWithFlags", []string{"hipGraphInstantiateWithFlags"}, true},
	sGraphLaunch:           {"hipGraphLaunch", []string{"hipGraphLaunch"}, true},
	sGraphExecDestroy:      {"hipGraphExecDestroy", []string{"hipGraphExecDestroy"}, true},
	sGraphDestroy:          {"hipGraphDestroy", []string{"hipGraphDestroy"}, true},
	sIpcGetMemHandle:       {"hipIpcGetMemHandle", []string{"hipIpcGetMemHandle"}, true},
	sIpcOpenMemHandle:      {"hipIpcOpenMemHandle", []string{"hipIpcOpenMemHandle"}, true},
	sIpcCloseMemHandle:     {"hipIpcCloseMemHandle", []string{"hipIpcCloseMemHandle"}, true},
	sIpcGetEventHandle:     {"hipIpcGetEventHandle", []string{"hipIpcGetEventHandle"}, true},
	sIpcOpenEventHandle:    {"hipIpcOpenEventHandle", []string{"hipIpcOpenEventHandle"}, true},
}

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
	names := append([]string(nil), sonames...)
	for _, r := range RocmRoots() {
		for _, n := range sonames {
			names = append(names, filepath.Join(r, "lib", n))
		}
	}
	return names
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
