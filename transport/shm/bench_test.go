//go:build linux

package shm

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
)

// BenchmarkLineRoundTrip: two threads pass a counter back and forth through
// two cache lines, the floor of any handshake between cores: one
// iteration is one line each way. On the 2-core machine it was 0.9–1.0 µs
// (docs/shm.md, "One line per publication"), so every line a waiter must
// see after another's store costs about 0.5 µs.
//
//	go test -run '^$' -bench LineRoundTrip ./transport/shm/
func BenchmarkLineRoundTrip(b *testing.B) {
	if runtime.NumCPU() < 2 {
		b.Skip("needs two CPUs: one thread would only spin against itself")
	}
	type line struct {
		v atomic.Uint64
		_ [56]byte
	}
	var ping, pong line
	n := uint64(b.N)
	go func() {
		runtime.LockOSThread()
		for i := uint64(1); i <= n; i++ {
			for ping.v.Load() != i {
			}
			pong.v.Store(i)
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	for i := uint64(1); i <= n; i++ {
		ping.v.Store(i)
		for pong.v.Load() != i {
		}
	}
}

// BenchmarkPingPong: one message each way per iteration between two ranks
// of this process (bytes per second counts both directions), over the ring
// and with direct copies.
//
//	go test -run '^$' -bench PingPong ./transport/shm/
func BenchmarkPingPong(b *testing.B) {
	for _, mode := range []struct {
		name string
		opt  Options
	}{{"ring", Options{DirectBytes: -1}}, {"direct", Options{}}} {
		for _, n := range []int{4 << 10, 64 << 10, 1 << 20, 16 << 20} {
			b.Run(fmt.Sprintf("%s/%d", mode.name, n), func(b *testing.B) {
				ts := connectGroup(b, store.NewMemory(), uniquePrefix("bench"), 2, mode.opt)
				defer ts[0].Close()
				defer ts[1].Close()
				ctx := context.Background()
				bufs := [][]byte{make([]byte, n), make([]byte, n)}
				done := make(chan error)
				go func() {
					for i := 0; i < b.N; i++ {
						if err := ts[1].Recv(ctx, 0, transport.Tag{}, bufs[1]); err != nil {
							done <- err
							return
						}
						if err := ts[1].Send(ctx, 0, transport.Tag{}, bufs[1]); err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
				b.SetBytes(int64(2 * n))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := ts[0].Send(ctx, 1, transport.Tag{}, bufs[0]); err != nil {
						b.Fatal(err)
					}
					if err := ts[0].Recv(ctx, 1, transport.Tag{}, bufs[0]); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkAllReduce: a detcoll AllReduce (fp32, gather tree) over shm
// between ranks of this process.
//
//	go test -run '^$' -bench AllReduce ./transport/shm/
func BenchmarkAllReduce(b *testing.B) {
	for _, w := range []int{2, 4} {
		for _, n := range []int{4 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("W=%d/%d", w, n), func(b *testing.B) {
				ts := connectGroup(b, store.NewMemory(), uniquePrefix("benchar"), w, Options{})
				comms := make([]*detcoll.Comm, w)
				for r := range comms {
					comms[r], _ = detcoll.New(ts[r])
					defer comms[r].Close()
				}
				ctx := context.Background()
				bufs := make([][]byte, w)
				for r := range bufs {
					bufs[r] = make([]byte, n)
				}
				b.SetBytes(int64(n))
				b.ResetTimer()
				if err := each(comms, func(c *detcoll.Comm) error {
					for i := 0; i < b.N; i++ {
						if err := c.AllReduce(ctx, bufs[c.Rank()], bufs[c.Rank()], benchDType); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// benchDType is BenchmarkAllReduce's element type ($DETCOLL_BENCH_DTYPE=bf16 for bf16).
var benchDType = func() detcoll.DType {
	if os.Getenv("DETCOLL_BENCH_DTYPE") == "bf16" {
		return detcoll.BF16
	}
	return detcoll.FP32
}()

// BenchmarkReduceScatter: a detcoll ReduceScatter (fp32) over shm between
// ranks of this process; n is each rank's send bytes (W blocks).
//
//	go test -run '^$' -bench ReduceScatter ./transport/shm/
func BenchmarkReduceScatter(b *testing.B) {
	for _, w := range []int{2, 4} {
		for _, n := range []int{4 << 10, 64 << 10} {
			b.Run(fmt.Sprintf("W=%d/%d", w, n), func(b *testing.B) {
				ts := connectGroup(b, store.NewMemory(), uniquePrefix("benchrs"), w, Options{})
				comms := make([]*detcoll.Comm, w)
				for r := range comms {
					comms[r], _ = detcoll.New(ts[r])
					defer comms[r].Close()
				}
				ctx := context.Background()
				send, recv := make([][]byte, w), make([][]byte, w)
				for r := range send {
					send[r], recv[r] = make([]byte, n), make([]byte, n/w)
				}
				b.SetBytes(int64(n))
				b.ResetTimer()
				if err := each(comms, func(c *detcoll.Comm) error {
					for i := 0; i < b.N; i++ {
						if err := c.ReduceScatter(ctx, send[c.Rank()], recv[c.Rank()], benchDType); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
