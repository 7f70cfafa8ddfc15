//go:build linux

package shm

import (
	"context"
	"runtime"
	"testing"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/store"
)

// TestWindowCollectivesAllocate: a small AllReduce, AllGather and
// ReduceScatter over the window, called with context.Background as the C
// library and the torch backend call them, allocate next to nothing per
// call (each allocation is a GC's worth of work at this scale: the per-call
// timeout context's timer and four allocations were a quarter of a 4 KiB
// collective; docs/shm.md, "The per-call context").
func TestWindowCollectivesAllocate(t *testing.T) {
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
			return c.AllReduce(context.Background(), send[:n], recv[:n], detcoll.FP32)
		}},
		{"AllGather", 0.1, func(c *detcoll.Comm, send, recv []byte) error {
			return c.AllGather(context.Background(), send[:n], recv[:w*n], detcoll.FP32)
		}},
		{"ReduceScatter", 0.1, func(c *detcoll.Comm, send, recv []byte) error {
			return c.ReduceScatter(context.Background(), send[:w*n], recv[:n], detcoll.FP32)
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
		t.Logf("%s: %.3f allocations per call and rank", op.name, per)
		if per > op.max {
			t.Errorf("%s of %d bytes over the window: %.2f allocations per call and rank, want at most %.2f", op.name, n, per, op.max)
		}
	}
}
