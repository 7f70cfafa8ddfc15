package launch

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// allowedCPUs is the CPUs this thread may run on, ascending.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// bindThread restricts the calling thread (locked to its goroutine) to
// cpus, so that a process it starts inherits them. restore puts back the
// thread's mask; ok is false when that failed and the thread must not run
// other goroutines (its goroutine should exit locked).
func bindThread(cpus []int) (restore func() (ok bool), err error) {
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("binding to CPUs %v: sched_setaffinity: %w", cpus, err)
	}
	return func() bool { return unix.SchedSetaffinity(0, &old) == nil }, nil
}
