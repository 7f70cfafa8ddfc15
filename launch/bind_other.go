//go:build !linux

package launch

import "errors"

var errBindUnsupported = errors.New("binding workers to CPUs needs Linux")

// allowedCPUs: no CPU binding here; BindAuto binds nothing.
func allowedCPUs() ([]int, error) { return nil, errBindUnsupported }

func bindThread([]int) (func() bool, error) { return nil, errBindUnsupported }

// claimer: no CPU claims where nothing is bound.
type claimer struct{}

func newClaimer() *claimer { return &claimer{} }

func (*claimer) claim(allowed []int, nproc int) []int {
	out := make([]int, nproc)
	for l := range out {
		out[l] = workerCPUs(allowed, nproc, l)[0]
	}
	return out
}

func (*claimer) release() {}
