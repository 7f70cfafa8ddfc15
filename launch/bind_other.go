//go:build !linux

package launch

import "errors"

var errBindUnsupported = errors.New("binding workers to CPUs needs Linux")

// allowedCPUs: no CPU binding here; BindAuto binds nothing.
func allowedCPUs() ([]int, error) { return nil, errBindUnsupported }

func bindThread([]int) (func() bool, error) { return nil, errBindUnsupported }
