//go:build !cgo

package nccl

import "github.com/detcoll/detcoll/internal/cuda"

func load(envVar string, names []string) (*Lib, error) {
	return nil, &Error{Code: resultUnavailable, Name: ResultName(resultUnavailable), Call: "dlopen",
		Message: "unavailable: built without cgo"}
}

const u = resultUnavailable

func (l *Lib) errorString(Result) string     { return "" }
func (l *Lib) lastError(*Comm) string        { return "" }
func (l *Lib) rGetVersion(*int32) Result     { return u }
func (l *Lib) rGetUniqueID(*UniqueID) Result { return u }
func (l *Lib) rCommInitRank(*uintptr, int, *UniqueID, int) Result {
	return u
}
func (l *Lib) rComm(sym, uintptr) Result                  { return u }
func (l *Lib) rCommGetAsyncError(uintptr, *Result) Result { return u }
func (l *Lib) rReduceLike(sym, cuda.DevicePtr, cuda.DevicePtr, int, DataType, RedOp, uintptr, cuda.Stream) Result {
	return u
}
func (l *Lib) rAllGather(cuda.DevicePtr, cuda.DevicePtr, int, DataType, uintptr, cuda.Stream) Result {
	return u
}
func (l *Lib) rBroadcast(cuda.DevicePtr, cuda.DevicePtr, int, DataType, int, uintptr, cuda.Stream) Result {
	return u
}
func (l *Lib) rP2P(sym, cuda.DevicePtr, int, DataType, int, uintptr, cuda.Stream) Result { return u }
func (l *Lib) rVoid(sym) Result                                                          { return u }
