//go:build !cgo

package hiprtc

func load() error {
	return &Error{Code: ResultUnavailable, Name: ResultName(ResultUnavailable),
		Message: "unavailable: built without cgo", Call: "dlopen"}
}

func comgrPath() string             { return "" }
func rVersion() (int, int, error)   { return 0, 0, load() }
func rComgrISAs() ([]string, error) { return nil, load() }
func rCompile(string, string, []string) ([]byte, string, error) {
	return nil, "", load()
}
