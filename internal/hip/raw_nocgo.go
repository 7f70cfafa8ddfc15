//go:build !cgo

package hip

import "github.com/detcoll/detcoll/internal/binding/gpurt"

// Built without cgo: load always fails, so no r* function below is ever
// reached through the exported API (each returns gpurt.ResultUnavailable anyway).

func load() error {
	return &Error{Code: gpurt.ResultUnavailable, Name: ResultName(gpurt.ResultUnavailable),
		Message: "unavailable: built without cgo", Call: "dlopen"}
}

func rErrorName(Result) (string, bool)   { return "", false }
func rErrorString(Result) (string, bool) { return "", false }

const u = gpurt.ResultUnavailable

func rInit() Result                                              { return u }
func rInt(sym, int32) Result                                     { return u }
func rVoid(sym) Result                                           { return u }
func rPint(sym, *int32) Result                                   { return u }
func rDeviceGetString(sym, []byte, Device) Result                { return u }
func rDeviceGetAttribute(*int32, DeviceAttribute, Device) Result { return u }
func rDeviceTotalMem(*uint64, Device) Result                     { return u }
func rDeviceCanAccessPeer(*int32, Device, Device) Result         { return u }
func rDeviceEnablePeerAccess(Device) Result                      { return u }
func rGetDeviceProperties([]byte, Device) Result                 { return u }
func rIpcGetEventHandle(*IpcEventHandle, Event) Result           { return u }
func rIpcOpenEventHandle(*uintptr, *IpcEventHandle) Result       { return u }
