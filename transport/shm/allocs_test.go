//go:build linux

package shm

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/store"
)

// TestWindowCollectivesAllocate: a small AllReduce, AllGather and
// ReduceScatter over the window, called with context.Background as the C
// library and the torch backend call them, allocate next to nothing per
// call (each allocation is a GC's worth of work at this scale: the per-call
// timeout context's timer and four allocations were a quarter of a 4 KiB
// collective; docs/shm.md, "The per-call context"). The same holds for a
// context with a deadline, as Go callers and the benchmarks pass: a call
// derives no context from it (a cancellable child was two allocations and a
// registration on the caller's context per call).
func TestWindowCollectivesAllocate(t *testing.T) {
	timed, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ctx := range []context.Context{context.Background(), timed} {
		windowCollectivesAllocate(t, ctx)
	}
}

func windowCollectivesAllocate(t *testing.T, ctx context.Context) {
	const w, n, calls = 2, 4 << 10, 500
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("allocs"), w, Options{})
	comms := make([]*detcoll.Comm, w)
	for r := range comms {
		var err error
		if comms[r], err = detcoll.New(ts[r]); err != nil {
			t.Fatal(err)
		}
		defer comms[r].Close()
	}
	ops := []struct {
		name string
		max  float64 // allocations per call and rank
		fn   func(c *detcoll.Comm, send, recv []byte) error
	}{
		{"AllReduce", 0.1, func(c *detcoll.Comm, send, recv []byte) error {
			return c.AllReduce(ctx, send[:n], recv[:n], detcoll.FP32)
		}},
		{"AllGather", 0.1, func(c *detcoll.Comm, send, recv []byte) error {
			return c.AllGather(ctx, send[:n], recv[:w*n], detcoll.FP32)
		}},
		{"ReduceScatter", 0.1, func(c *detcoll.Comm, send, recv []byte) error {
			return c.ReduceScatter(ctx, send[:w*n], recv[:n], detcoll.FP32)
		}},
	}
	sends, recvs := make([][]byte, w), make([][]byte, w)
	for r := range sends {
		sends[r], recvs[r] = make([]byte, w*n), make([]byte, w*n)
	}
	for _, op := range ops {
		loop := func(k int) error {
			return each(comms, func(c *detcoll.Comm) error {
				for range k {
					if err := op.fn(c, sends[c.Rank()], recvs[c.Rank()]); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err := loop(50); err != nil { // signatures agreed, buffers grown
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := loop(calls); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		per := float64(after.Mallocs-before.Mallocs) / float64(w*calls)
		_, timed := ctx.Deadline()
		t.Logf("%s, context with a deadline %v: %.3f allocations per call and rank", op.name, timed, per)
		if per > op.max {
			t.Errorf("%s of %d bytes over the window, context with a deadline %v: %.2f allocations per call and rank, want at most %.2f", op.name, n, timed, per, op.max)
		}
	}
}
