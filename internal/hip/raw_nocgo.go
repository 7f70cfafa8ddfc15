//go:build !cgo

package hip

// Built without cgo: load always fails, so no r* function below is ever
// reached through the exported API (each returns ResultUnavailable anyway).

func load() error {
	return &Error{Code: ResultUnavailable, Name: ResultName(ResultUnavailable),
		Message: "unavailable: built without cgo", Call: "dlopen"}
}

func rErrorName(Result) (string, bool)   { return "", false }
func rErrorString(Result) (string, bool) { return "", false }

const u = ResultUnavailable

func rInit() Result                                                    { return u }
func rInt(sym, int32) Result                                           { return u }
func rVoid(sym) Result                                                 { return u }
func rPint(sym, *int32) Result                                         { return u }
func rDeviceGetString(sym, []byte, Device) Result                      { return u }
func rDeviceGetAttribute(*int32, DeviceAttribute, Device) Result       { return u }
func rDeviceTotalMem(*uint64, Device) Result                           { return u }
func rDeviceCanAccessPeer(*int32, Device, Device) Result               { return u }
func rDeviceEnablePeerAccess(Device) Result                            { return u }
func rGetDeviceProperties([]byte, Device) Result                       { return u }
func rMemGetInfo(_, _ *uint64) Result                                  { return u }
func rMalloc(*DevicePtr, int) Result                                   { return u }
func rPtr(sym, DevicePtr) Result                                       { return u }
func rMemGetAddressRange(*DevicePtr, *uint64, DevicePtr) Result        { return u }
func rHostMalloc(*HostMem, int) Result                                 { return u }
func rHostFree(HostMem) Result                                         { return u }
func rMemcpyHtoD(DevicePtr, []byte) Result                             { return u }
func rMemcpyDtoH([]byte, DevicePtr) Result                             { return u }
func rMemcpyDtoD(_, _ DevicePtr, _ int) Result                         { return u }
func rMemcpyHtoDAsync(DevicePtr, HostMem, int, int, Stream) Result     { return u }
func rMemcpyDtoHAsync(HostMem, int, DevicePtr, int, Stream) Result     { return u }
func rMemcpyDtoDAsync(_, _ DevicePtr, _ int, _ Stream) Result          { return u }
func rMemsetD8(DevicePtr, byte, int) Result                            { return u }
func rMemsetD8Async(DevicePtr, byte, int, Stream) Result               { return u }
func rLaunchKernel(Function, Dim3, Dim3, uint32, Stream, *Args) Result { return u }
func rIpcGetMemHandle(*IpcMemHandle, DevicePtr) Result                 { return u }
func rIpcOpenMemHandle(*DevicePtr, *IpcMemHandle, uint32) Result       { return u }
func rIpcGetEventHandle(*IpcEventHandle, Event) Result                 { return u }
func rIpcOpenEventHandle(*uintptr, *IpcEventHandle) Result             { return u }
