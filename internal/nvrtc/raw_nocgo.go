//go:build !cgo

package nvrtc

import "github.com/detcoll/detcoll/internal/binding/rtc"

func load() error { return rtc.NoCgo[vendor](ResultName) }

func rSupportedArchs() ([]int, error) { return nil, load() }
func rCompile(string, string, []string, bool) ([]byte, string, error) {
	return nil, "", load()
}
