package app

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
)

// envFault names the fault-injection variable of the bench fault tests:
// DETCOLL_TEST_STOP=PHASE:RANK makes rank RANK stop itself with SIGSTOP on
// entering PHASE, "native" (the first run of the native baseline, the CPU
// ring) or "raw" (the raw TCP all-to-all, once connected, before data
// moves). The other ranks must then fail within the timeout. It is for
// tests only and does nothing on systems without SIGSTOP.
const envFault = "DETCOLL_TEST_STOP"

type fault struct{ phase string }

// parseFault returns the fault for this rank, or none.
func parseFault(v string, rank int) fault {
	phase, r, ok := strings.Cut(v, ":")
	if !ok {
		return fault{}
	}
	n, err := strconv.Atoi(r)
	if err != nil || n != rank {
		return fault{}
	}
	return fault{phase: phase}
}

// stopInNative stops this process on the first native run of any case.
type stopInNative struct{ bench.Backend }

func (b stopInNative) Prepare(ctx context.Context, spec bench.CaseSpec) (bench.Case, error) {
	c, err := b.Backend.Prepare(ctx, spec)
	if err != nil {
		return c, err
	}
	return &stopCase{Case: c}, nil
}

var stopOnce sync.Once

type stopCase struct{ bench.Case }

func (c *stopCase) RunNative(ctx context.Context, iters int) (time.Duration, error) {
	stopOnce.Do(stopSelf)
	return c.Case.RunNative(ctx, iters)
}

func (c *stopCase) RunDeterministic(ctx context.Context, alg detcoll.Algorithm, acc detcoll.Accumulate, iters int) (time.Duration, error) {
	return c.Case.RunDeterministic(ctx, alg, acc, iters)
}
