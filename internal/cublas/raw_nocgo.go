//go:build !cgo

package cublas

// Built without cgo: load always fails, so no r* function below is reached
// through the exported API.

func load() error {
	return &Error{Code: StatusUnavailable, Name: StatusName(StatusUnavailable),
		Message: "unavailable: built without cgo", Call: "dlopen"}
}

func rStatusName(Status) (string, bool)   { return "", false }
func rStatusString(Status) (string, bool) { return "", false }
func rCreate(*uintptr) Status             { return StatusUnavailable }
func rHandle(sym, uintptr) Status         { return StatusUnavailable }
func rHandlePtr(sym, uintptr, uintptr) Status {
	return StatusUnavailable
}
func rSetWorkspace(uintptr, uint64, uint64) Status { return StatusUnavailable }
func rHandleInt(sym, uintptr, int32) Status        { return StatusUnavailable }
func rHandleIntPtr(sym, uintptr, *int32) Status    { return StatusUnavailable }
func rGetProperty(int32, *int32) Status            { return StatusUnavailable }
func rGemmEx(uintptr, *Gemm) Status                { return StatusUnavailable }
func rGemmStridedBatchedEx(uintptr, *Gemm) Status  { return StatusUnavailable }
