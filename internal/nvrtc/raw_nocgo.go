//go:build !cgo

package nvrtc

func load() error {
	return &Error{Code: ResultUnavailable, Name: ResultName(ResultUnavailable),
		Message: "unavailable: built without cgo", Call: "dlopen"}
}

func rVersion() (int, int, error)     { return 0, 0, load() }
func rSupportedArchs() ([]int, error) { return nil, load() }
func rCompile(string, string, []string, bool) ([]byte, string, error) {
	return nil, "", load()
}
