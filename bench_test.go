package detcoll

import (
	"context"
	"fmt"
	"testing"

	"github.com/detcoll/detcoll/internal/agree"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/transport/tcp"
)

// tcpComms connects w communicators over TCP loopback in this process.
func tcpComms(tb testing.TB, w int, opts ...CommOption) []*Comm {
	tb.Helper()
	return tcpCommsWith(tb, w, tcp.Options{}, opts...)
}

// tcpCommsWith is tcpComms with the transport's options.
func tcpCommsWith(tb testing.TB, w int, topts tcp.Options, opts ...CommOption) []*Comm {
	tb.Helper()
	st := store.NewMemory()
	prefix := fmt.Sprintf("%s/%p", tb.Name(), tb)
	ts := make([]transport.Transport, w)
	errs := make([]error, w)
	done := make(chan int, w)
	for r := 0; r < w; r++ {
		go func(r int) {
			t, err := tcp.Connect(context.Background(), st, prefix, r, w, topts)
			if err == nil {
				ts[r] = t
			}
			errs[r] = err
			done <- r
		}(r)
	}
	for range w {
		<-done
	}
	comms := make([]*Comm, w)
	for r := range w {
		if errs[r] != nil {
			tb.Fatalf("rank %d: %v", r, errs[r])
		}
		c, err := New(ts[r], opts...)
		if err != nil {
			tb.Fatal(err)
		}
		comms[r] = c
	}
	tb.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// rankLoop runs fn on every rank in persistent goroutines, one round per
// step call, so that a measured round allocates only what the collective
// does (no goroutine start per rank and round).
type rankLoop struct {
	start []chan struct{}
	done  chan error
}

func newRankLoop(comms []*Comm, fn func(c *Comm) error) *rankLoop {
	l := &rankLoop{start: make([]chan struct{}, len(comms)), done: make(chan error, len(comms))}
	for i, c := range comms {
		l.start[i] = make(chan struct{})
		go func(c *Comm, start chan struct{}) {
			for range start {
				l.done <- fn(c)
			}
		}(c, l.start[i])
	}
	return l
}

func (l *rankLoop) step() error {
	for _, s := range l.start {
		s <- struct{}{}
	}
	var first error
	for range l.start {
		if err := <-l.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (l *rankLoop) stop() {
	for _, s := range l.start {
		close(s)
	}
}

// BenchmarkCollective is the per-call cost of validated (cached-signature)
// collectives, W = 4: Barrier is pure latency, AllReduce 4 KiB small and
// 1 MiB bandwidth-bound (gather_tree and a2a_tree).
func BenchmarkCollective(b *testing.B) {
	const w = 4
	for _, tr := range []string{"inproc", "tcp"} {
		var comms []*Comm
		if tr == "inproc" {
			var err error
			if comms, err = NewInProc(w); err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
		} else {
			comms = tcpComms(b, w)
		}
		type cs struct {
			name string
			fn   func(c *Comm, buf []byte) error
			n    int
		}
		cases := []cs{{"Barrier", func(c *Comm, _ []byte) error { return c.Barrier(context.Background()) }, 0}}
		for _, n := range []int{4 << 10, 1 << 20} {
			for _, alg := range []Algorithm{GatherTree, A2ATree, RecursiveDoubling} {
				cases = append(cases, cs{fmt.Sprintf("AllReduce-%v-%dB", alg, n), func(c *Comm, buf []byte) error {
					return c.AllReduce(context.Background(), buf, buf, FP32, WithAlgorithm(alg))
				}, n})
			}
		}
		for _, k := range cases {
			b.Run(tr+"/"+k.name, func(b *testing.B) {
				bufs := make([][]byte, w)
				for r := range bufs {
					bufs[r] = make([]byte, k.n)
				}
				l := newRankLoop(comms, func(c *Comm) error { return k.fn(c, bufs[c.Rank()]) })
				defer l.stop()
				if err := l.step(); err != nil { // validates the signature
					b.Fatal(err)
				}
				b.SetBytes(int64(k.n))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := l.step(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCallIdentity is the per-call bookkeeping alone: before the
// agreement work a validated call cost one map look-up of its signature
// (map[signature]uint32, as main e076ef6 did); now it encodes the record and
// asks agree.Begin (the last agreed record is compared first, the map only
// when the signature changed). "repeat" calls one signature, "alternate"
// two in turn.
func BenchmarkCallIdentity(b *testing.B) {
	sigs := []signature{
		{op: opAllReduce, dt: uint8(FP32), acc: uint8(AccumulateNative), alg: uint8(GatherTree), count: 1024},
		{op: opAllGather, dt: uint8(BF16), count: 4096},
	}
	for _, pattern := range []string{"repeat", "alternate"} {
		pick := func(i int) signature {
			if pattern == "repeat" {
				return sigs[0]
			}
			return sigs[i&1]
		}
		b.Run("before-map/"+pattern, func(b *testing.B) {
			m := map[signature]uint32{sigs[0]: 1, sigs[1]: 2}
			var sink uint32
			for i := 0; i < b.N; i++ {
				sink += m[pick(i)]
			}
			_ = sink
		})
		b.Run("after-agree/"+pattern, func(b *testing.B) {
			a := newAgreement()
			for _, s := range sigs {
				var r agree.Record
				s.encode(r[:])
				c, _ := a.Begin(&r)
				all := make([]byte, agree.ProposalSize)
				agree.Proposal(all, c, &r)
				if err := a.Settle(0, c, &r, all); err != nil {
					b.Fatal(err)
				}
			}
			var sink uint64
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var r agree.Record
				pick(i).encode(r[:])
				c, _ := a.Begin(&r)
				sink += c.Hash
			}
			_ = sink
		})
	}
}
