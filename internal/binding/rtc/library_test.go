package rtc

import (
	"errors"
	"testing"

	"github.com/detcoll/detcoll/internal/binding"
)

type testVendor struct{}

var errTestUnavailable = errors.New("testrtc: unavailable")

func (testVendor) Name() string       { return "testrtc" }
func (testVendor) Unavailable() error { return errTestUnavailable }

// A Library whose load fails reports that failure from every entry point,
// once; NoCgo is such a failure, wrapping the binding's ErrUnavailable.
func TestLibraryLoadFailure(t *testing.T) {
	names := func(r Result) string { return map[Result]string{ResultUnavailable: "TEST_UNAVAILABLE"}[r] }
	loads := 0
	l := &Library[int, testVendor]{Table: binding.NewTable[int]([]binding.Symbol{{API: "tVersion"}}), Names: names,
		Load: func() error { loads++; return NoCgo[testVendor](names) }}
	err := l.Init()
	var e *binding.LogError[Result, testVendor]
	if !errors.As(err, &e) || e.Code != ResultUnavailable || e.Name != "TEST_UNAVAILABLE" || e.Call != "dlopen" || !errors.Is(err, errTestUnavailable) {
		t.Fatalf("Init = %#v", err)
	}
	if _, _, verr := l.Version(); verr != err {
		t.Errorf("Version error %v, want the load error", verr)
	}
	if l.Path() != "" || l.VersionString() != "" || loads != 1 {
		t.Errorf("path %q, version %q, %d loads", l.Path(), l.VersionString(), loads)
	}
	if l.ErrorOf("tCompile", ResultSuccess) != nil {
		t.Error("success mapped to an error")
	}
	if err := l.ErrorOf("tCompile", ResultCompilation); !errors.As(err, &e) || e.Code != ResultCompilation || e.Call != "tCompile" {
		t.Errorf("ErrorOf = %v", err)
	}
}
