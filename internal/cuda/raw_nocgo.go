//go:build !cgo

package cuda

import "github.com/detcoll/detcoll/internal/binding/gpurt"

// Built without cgo: load always fails, so no r* function below is ever
// reached through the exported API (each returns gpurt.ResultUnavailable anyway).

func load() error {
	return &Error{Code: gpurt.ResultUnavailable, Name: ResultName(gpurt.ResultUnavailable),
		Message: "unavailable: built without cgo", Call: "dlopen"}
}

func rErrorName(Result) (string, bool) { return "", false }
func rErrorString(Result) (string, bool) {
	return "", false
}

const u = gpurt.ResultUnavailable

func rDriverGetVersion(*int32) Result                            { return u }
func rDeviceGetCount(*int32) Result                              { return u }
func rDeviceGet(*Device, int) Result                             { return u }
func rDeviceGetName([]byte, Device) Result                       { return u }
func rDeviceGetAttribute(*int32, DeviceAttribute, Device) Result { return u }
func rDeviceTotalMem(*uint64, Device) Result                     { return u }
func rDeviceGetUUID(*[16]byte, Device) Result                    { return u }
func rDeviceGetPCIBusID([]byte, Device) Result                   { return u }
func rDeviceCanAccessPeer(*int32, Device, Device) Result         { return u }
func rPrimaryCtxRetain(*Context, Device) Result                  { return u }
func rPrimaryCtxRelease(Device) Result                           { return u }
func rCtxSetCurrent(Context) Result                              { return u }
func rCtxGetCurrent(*Context) Result                             { return u }
func rCtxSynchronize() Result                                    { return u }
func rCtxEnablePeerAccess(Context) Result                        { return u }
