package cuda

// sym indexes the driver symbol table.
type sym int

const (
	sInit sym = iota
	sDriverGetVersion
	sGetErrorName
	sGetErrorString
	sDeviceGetCount
	sDeviceGet
	sDeviceGetName
	sDeviceGetAttribute
	sDeviceTotalMem
	sDeviceGetUUID
	sDeviceGetPCIBusID
	sDeviceCanAccessPeer
	sDevicePrimaryCtxRetain
	sDevicePrimaryCtxRelease
	sCtxSetCurrent
	sCtxGetCurrent
	sCtxSynchronize
	sCtxEnablePeerAccess
	sMemGetInfo
	sMemAlloc
	sMemFree
	sMemAllocHost
	sMemFreeHost
	sMemcpyHtoD
	sMemcpyDtoH
	sMemcpyDtoD
	sMemcpyHtoDAsync
	sMemcpyDtoHAsync
	sMemcpyDtoDAsync
	sMemsetD8
	sMemsetD8Async
	sStreamCreate
	sStreamDestroy
	sStreamSynchronize
	sStreamQuery
	sStreamWaitEvent
	sEventCreate
	sEventRecord
	sEventSynchronize
	sEventQuery
	sEventDestroy
	sEventElapsedTime
	sModuleLoadData
	sModuleUnload
	sModuleGetFunction
	sFuncGetAttribute
	sLaunchKernel
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
	sMemGetAddressRange
	numSyms
)

// symbolSpec names one driver entry point: the candidates in order of
// preference (the versioned export that cuda.h of CUDA 12/13 maps the plain
// name to, then older exports with the same signature) and whether the
// binding can work without it.
type symbolSpec struct {
	api        string   // the name in the CUDA documentation
	candidates []string // exported names to try, best first
	optional   bool
}

// symbols is indexed by sym. The legacy-default-stream variants are used
// (not the _ptsz/_ptds per-thread-default-stream ones), as cuda.h does when
// CUDA_API_PER_THREAD_DEFAULT_STREAM is not defined.
var symbols = [numSyms]symbolSpec{
	sInit:                    {"cuInit", []string{"cuInit"}, false},
	sDriverGetVersion:        {"cuDriverGetVersion", []string{"cuDriverGetVersion"}, false},
	sGetErrorName:            {"cuGetErrorName", []string{"cuGetErrorName"}, true},
	sGetErrorString:          {"cuGetErrorString", []string{"cuGetErrorString"}, true},
	sDeviceGetCount:          {"cuDeviceGetCount", []string{"cuDeviceGetCount"}, false},
	sDeviceGet:               {"cuDeviceGet", []string{"cuDeviceGet"}, false},
	sDeviceGetName:           {"cuDeviceGetName", []string{"cuDeviceGetName"}, false},
	sDeviceGetAttribute:      {"cuDeviceGetAttribute", []string{"cuDeviceGetAttribute"}, false},
	sDeviceTotalMem:          {"cuDeviceTotalMem", []string{"cuDeviceTotalMem_v2"}, false},
	sDeviceGetUUID:           {"cuDeviceGetUuid", []string{"cuDeviceGetUuid_v2", "cuDeviceGetUuid"}, true},
	sDeviceGetPCIBusID:       {"cuDeviceGetPCIBusId", []string{"cuDeviceGetPCIBusId"}, true},
	sDeviceCanAccessPeer:     {"cuDeviceCanAccessPeer", []string{"cuDeviceCanAccessPeer"}, true},
	sDevicePrimaryCtxRetain:  {"cuDevicePrimaryCtxRetain", []string{"cuDevicePrimaryCtxRetain"}, false},
	sDevicePrimaryCtxRelease: {"cuDevicePrimaryCtxRelease", []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}, false},
	sCtxSetCurrent:           {"cuCtxSetCurrent", []string{"cuCtxSetCurrent"}, false},
	sCtxGetCurrent:           {"cuCtxGetCurrent", []string{"cuCtxGetCurrent"}, false},
	sCtxSynchronize:          {"cuCtxSynchronize", []string{"cuCtxSynchronize"}, false},
	sCtxEnablePeerAccess:     {"cuCtxEnablePeerAccess", []string{"cuCtxEnablePeerAccess"}, true},
	sMemGetInfo:              {"cuMemGetInfo", []string{"cuMemGetInfo_v2"}, false},
	sMemAlloc:                {"cuMemAlloc", []string{"cuMemAlloc_v2"}, false},
	sMemFree:                 {"cuMemFree", []string{"cuMemFree_v2"}, false},
	sMemAllocHost:            {"cuMemAllocHost", []string{"cuMemAllocHost_v2"}, false},
	sMemFreeHost:             {"cuMemFreeHost", []string{"cuMemFreeHost"}, false},
	sMemcpyHtoD:              {"cuMemcpyHtoD", []string{"cuMemcpyHtoD_v2"}, false},
	sMemcpyDtoH:              {"cuMemcpyDtoH", []string{"cuMemcpyDtoH_v2"}, false},
	sMemcpyDtoD:              {"cuMemcpyDtoD", []string{"cuMemcpyDtoD_v2"}, false},
	sMemcpyHtoDAsync:         {"cuMemcpyHtoDAsync", []string{"cuMemcpyHtoDAsync_v2"}, false},
	sMemcpyDtoHAsync:         {"cuMemcpyDtoHAsync", []string{"cuMemcpyDtoHAsync_v2"}, false},
	sMemcpyDtoDAsync:         {"cuMemcpyDtoDAsync", []string{"cuMemcpyDtoDAsync_v2"}, false},
	sMemsetD8:                {"cuMemsetD8", []string{"cuMemsetD8_v2"}, false},
	sMemsetD8Async:           {"cuMemsetD8Async", []string{"cuMemsetD8Async"}, false},
	sStreamCreate:            {"cuStreamCreate", []string{"cuStreamCreate"}, false},
	sStreamDestroy:           {"cuStreamDestroy", []string{"cuStreamDestroy_v2"}, false},
	sStreamSynchronize:       {"cuStreamSynchronize", []string{"cuStreamSynchronize"}, false},
	sStreamQuery:             {"cuStreamQuery", []string{"cuStreamQuery"}, false},
	sStreamWaitEvent:         {"cuStreamWaitEvent", []string{"cuStreamWaitEvent"}, false},
	sEventCreate:             {"cuEventCreate", []string{"cuEventCreate"}, false},
	sEventRecord:             {"cuEventRecord", []string{"cuEventRecord"}, false},
	sEventSynchronize:        {"cuEventSynchronize", []string{"cuEventSynchronize"}, false},
	sEventQuery:              {"cuEventQuery", []string{"cuEventQuery"}, false},
	sEventDestroy:            {"cuEventDestroy", []string{"cuEventDestroy_v2"}, false},
	// CUDA 12.8 added cuEventElapsedTime_v2 (same signature); CUDA 13's
	// header maps the plain name to it. Older drivers export only v1.
	sEventElapsedTime:   {"cuEventElapsedTime", []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}, false},
	sModuleLoadData:     {"cuModuleLoadData", []string{"cuModuleLoadData"}, false},
	sModuleUnload:       {"cuModuleUnload", []string{"cuModuleUnload"}, false},
	sModuleGetFunction:  {"cuModuleGetFunction", []string{"cuModuleGetFunction"}, false},
	sFuncGetAttribute:   {"cuFuncGetAttribute", []string{"cuFuncGetAttribute"}, true},
	sLaunchKernel:       {"cuLaunchKernel", []string{"cuLaunchKernel"}, false},
	sStreamBeginCapture: {"cuStreamBeginCapture", []string{"cuStreamBeginCapture_v2"}, true},
	sStreamEndCapture:   {"cuStreamEndCapture", []string{"cuStreamEndCapture"}, true},
	sStreamIsCapturing:  {"cuStreamIsCapturing", []string{"cuStreamIsCapturing"}, true},
	sGraphInstantiate:   {"cuGraphInstantiate", []string{"cuGraphInstantiateWithFlags"}, true},
	sGraphLaunch:        {"cuGraphLaunch", []string{"cuGraphLaunch"}, true},
	sGraphExecDestroy:   {"cuGraphExecDestroy", []string{"cuGraphExecDestroy"}, true},
	sGraphDestroy:       {"cuGraphDestroy", []string{"cuGraphDestroy"}, true},
	sIpcGetMemHandle:    {"cuIpcGetMemHandle", []string{"cuIpcGetMemHandle"}, true},
	sIpcOpenMemHandle:   {"cuIpcOpenMemHandle", []string{"cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"}, true},
	sIpcCloseMemHandle:  {"cuIpcCloseMemHandle", []string{"cuIpcCloseMemHandle"}, true},
	sMemGetAddressRange: {"cuMemGetAddressRange", []string{"cuMemGetAddressRange_v2"}, true},
}

// LibraryNames are the candidates for the driver library; $DETCOLL_CUDA_LIB
// overrides them.
var LibraryNames = []string{"libcuda.so.1", "libcuda.so"}

// LibraryEnv names the environment variable that overrides LibraryNames.
const LibraryEnv = "DETCOLL_CUDA_LIB"
