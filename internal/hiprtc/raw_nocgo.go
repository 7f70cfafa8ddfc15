//go:build !cgo

package hiprtc

import "github.com/detcoll/detcoll/internal/binding/rtc"

func load() error { return rtc.NoCgo[vendor](ResultName) }

func comgrPath() string             { return "" }
func rComgrISAs() ([]string, error) { return nil, load() }
func rCompile(string, string, []string) ([]byte, string, error) {
	return nil, "", load()
}
