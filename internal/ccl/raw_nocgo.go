//go:build !cgo

package ccl

func load(vendor, envVar string, names []string) (*Lib, error) {
	return nil, &Error{Code: resultUnavailable, Name: ResultName(resultUnavailable), Call: "dlopen",
		Message: "unavailable: built without cgo", Vendor: vendor}
}

const u = resultUnavailable

func (l *Lib) errorString(Result) string                          { return "" }
func (l *Lib) lastError(*Comm) string                             { return "" }
func (l *Lib) rGetVersion(*int32) Result                          { return u }
func (l *Lib) rGetUniqueID(*UniqueID) Result                      { return u }
func (l *Lib) rCommInitRank(*uintptr, int, *UniqueID, int) Result { return u }
func (l *Lib) rComm(sym, uintptr) Result                          { return u }
func (l *Lib) rCommGetAsyncError(uintptr, *Result) Result         { return u }
func (l *Lib) rReduceLike(sym, uint64, uint64, int, DataType, RedOp, uintptr, uintptr) Result {
	return u
}
func (l *Lib) rAllGather(uint64, uint64, int, DataType, uintptr, uintptr) Result      { return u }
func (l *Lib) rBroadcast(uint64, uint64, int, DataType, int, uintptr, uintptr) Result { return u }
func (l *Lib) rP2P(sym, uint64, int, DataType, int, uintptr, uintptr) Result          { return u }
func (l *Lib) rVoid(sym) Result                                                       { return u }
func (l *Lib) rMemAlloc(*uint64, int) Result                                          { return u }
func (l *Lib) rMemFree(uint64) Result                                                 { return u }
func (l *Lib) rWindowRegister(uintptr, uint64, int, *uintptr, int) Result             { return u }
func (l *Lib) rWindowDeregister(uintptr, uintptr) Result                              { return u }
