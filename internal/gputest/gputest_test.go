package gputest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/launch"
)

// fakeRT is a devrt.Runtime whose availability checks are set by the test
// (every other method panics: Why must not call them).
type fakeRT struct {
	devrt.Runtime
	vendor, ccl, compiler     string
	driver, comp, collectives error
	devices                   int
}

func (f fakeRT) Vendor() string                               { return f.vendor }
func (f fakeRT) CCLName() string                              { return f.ccl }
func (f fakeRT) CompilerName() string                         { return f.compiler }
func (f fakeRT) DriverAvailable() error                       { return f.driver }
func (f fakeRT) CompilerAvailable() error                     { return f.comp }
func (f fakeRT) CCLAvailable() error                          { return f.collectives }
func (f fakeRT) DeviceCount() (int, error)                    { return f.devices, nil }
func (f fakeRT) Available() error                             { panic("Why called Available") }
func (f fakeRT) Open(int) (devrt.Context, devrt.Props, error) { panic("Why opened a device") }

func cudaRT() fakeRT { return fakeRT{vendor: "cuda", ccl: "NCCL", compiler: "NVRTC", devices: 2} }
func rocmRT() fakeRT { return fakeRT{vendor: "rocm", ccl: "RCCL", compiler: "hiprtc", devices: 8} }

func TestWhy(t *testing.T) {
	missing := errors.New("library not found")
	with := func(f fakeRT, edit func(*fakeRT)) fakeRT { edit(&f); return f }
	for _, c := range []struct {
		name     string
		rt       fakeRT
		compiler bool
		want     string // "" = runs
	}{
		{"cuda ok", cudaRT(), true, ""},
		{"rocm ok", rocmRT(), true, ""},
		{"cuda no driver", with(cudaRT(), func(f *fakeRT) { f.driver = missing }), true, "no CUDA driver: library not found"},
		{"rocm no runtime", with(rocmRT(), func(f *fakeRT) { f.driver = missing }), true, "no HIP runtime: library not found"},
		{"no GPU", with(rocmRT(), func(f *fakeRT) { f.devices = 0 }), false, "no GPU (0 devices, <nil>)"},
		{"no NVRTC", with(cudaRT(), func(f *fakeRT) { f.comp = missing }), true, "no NVRTC: library not found"},
		{"no hiprtc", with(rocmRT(), func(f *fakeRT) { f.comp = missing }), true, "no hiprtc: library not found"},
		{"compiler not needed", with(rocmRT(), func(f *fakeRT) { f.comp = missing }), false, ""},
		{"no NCCL", with(cudaRT(), func(f *fakeRT) { f.collectives = missing }), false, "no NCCL: library not found"},
		{"no RCCL", with(rocmRT(), func(f *fakeRT) { f.collectives = missing }), true, "no RCCL: library not found"},
	} {
		if got := Why(c.rt, nil, c.compiler); got != c.want {
			t.Errorf("%s: Why = %q, want %q", c.name, got, c.want)
		}
	}
	err := fmt.Errorf("%w: %q is not linked into this build", devrt.ErrNoRuntime, "rocm")
	if got := Why(nil, err, true); !strings.HasPrefix(got, "no GPU runtime for this test binary: ") || !strings.Contains(got, `"rocm"`) {
		t.Errorf("Why(devrt.Get error) = %q", got)
	}
}

// skipTB records a Skip and stops the test function, as testing.T does.
type skipTB struct {
	testing.TB
	skipped string
}

type stopped struct{}

func (s *skipTB) Helper()                     {}
func (s *skipTB) Skip(args ...any)            { s.skipped = fmt.Sprint(args...); panic(stopped{}) }
func (s *skipTB) Skipf(f string, args ...any) { s.skipped = fmt.Sprintf(f, args...); panic(stopped{}) }

func TestRequireLaunchedGPUNotLaunched(t *testing.T) {
	for _, k := range []string{launch.EnvRank, "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"} {
		t.Setenv(k, "")
	}
	tb := &skipTB{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(stopped); !ok {
					panic(p)
				}
			}
		}()
		RequireLaunchedGPU(tb, "devcomm.test", false)
		t.Error("RequireLaunchedGPU returned in a process no launcher started")
	}()
	if !strings.Contains(tb.skipped, "not started by a launcher") || !strings.Contains(tb.skipped, "./devcomm.test") {
		t.Errorf("skip reason %q", tb.skipped)
	}
}

// Launched, in a test binary that links no GPU runtime (this one): the skip
// names devrt's reason.
func TestRequireLaunchedGPUNoRuntime(t *testing.T) {
	t.Setenv(launch.EnvRank, "0")
	t.Setenv(devrt.DeviceEnv, "")
	tb := &skipTB{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(stopped); !ok {
					panic(p)
				}
			}
		}()
		RequireLaunchedGPU(tb, "x.test", true)
		t.Error("RequireLaunchedGPU returned without a GPU runtime")
	}()
	if !strings.Contains(tb.skipped, "no GPU runtime for this test binary") {
		t.Errorf("skip reason %q", tb.skipped)
	}
}
