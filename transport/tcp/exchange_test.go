package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
)

// allToAll runs Exchange on every rank at once: rank r sends msg(r, p) to
// every p and checks what it receives, bit for bit.
func allToAll(t *testing.T, ts []*Transport, tag transport.Tag, size func(from, to int) int) {
	t.Helper()
	msg := func(from, to int) []byte { return pattern(size(from, to), 100*from+to) }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([][]error, len(ts))
	got := make([][][]byte, len(ts))
	for r, tr := range ts {
		got[r] = make([][]byte, len(ts))
		for p := range ts {
			if p != r {
				got[r][p] = make([]byte, size(p, r))
			}
		}
		wg.Go(func() {
			var mu sync.Mutex
			tr.Exchange(ctx, tag,
				func(p int) ([]byte, bool) { return msg(r, p), true },
				func(p int) ([]byte, bool) { return got[r][p], true },
				func(err error) { mu.Lock(); errs[r] = append(errs[r], err); mu.Unlock() })
		})
	}
	wg.Wait()
	for r := range ts {
		if len(errs[r]) > 0 {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for p := range ts {
			if p != r && !bytes.Equal(got[r][p], msg(p, r)) {
				t.Fatalf("rank %d from %d: payload differs", r, p)
			}
		}
	}
}

func TestExchange(t *testing.T) {
	// With inlineAll (loopback, one P) every message is inline; without it
	// messages above inlineMax take a goroutine each.
	saved := inlineAllFor
	defer func() { inlineAllFor = saved }()
	for _, remote := range []bool{false, true} {
		t.Run(fmt.Sprintf("remote=%v", remote), func(t *testing.T) {
			inlineAllFor = func(*net.TCPConn) bool { return !remote }
			testExchange(t, remote)
		})
	}
}

func testExchange(t *testing.T, remote bool) {
	for _, w := range []int{2, 3, 5} {
		// 16 KiB socket buffers cannot take a 2 MiB frame at once: the
		// write is cut short and the progress loop comes back to it, or a
		// goroutine finishes it (inline writes, and the loop's hand-off
		// when the peer is slow to read: CI once saw only hand-offs).
		// Checksummed 4 KiB chunks send
		// every frame above 4 KiB from a goroutine (and the progress loop
		// leaves their receipt to the blocking path).
		small := Options{WriteBuffer: 16 << 10, ReadBuffer: 16 << 10}
		for _, opt := range []Options{{}, {ChunkSize: 4096}, {ChunkSize: 4096, Checksum: ChecksumAlways}, small} {
			t.Run(fmt.Sprintf("W=%d/%+v", w, opt), func(t *testing.T) {
				ts := connectGroup(t, store.NewMemory(), uniquePrefix("xchg"), w, opt)
				defer closeAll(ts)
				if got := ts[0].peers[1].inlineAll; got == remote {
					t.Fatalf("peer inlineAll = %v, want %v", got, !remote)
				}
				if got := ts[0].progressAll; got == remote {
					t.Fatalf("progressAll = %v, want %v (the progress loop)", got, !remote)
				}
				sizes := []func(int, int) int{
					func(int, int) int { return 4096 },
					func(int, int) int { return 0 },
					func(int, int) int { return inlineMax },                                   // inline; with 4 KiB socket buffers it is cut short
					func(f, to int) int { return (f*7 + to*131) * 997 % (inlineMax * 3 / 2) }, // a mix, both sides of inlineMax
				}
				switch opt {
				case Options{}:
					sizes = append(sizes, func(int, int) int { return 600 << 10 }) // two chunks, goroutines
				case small:
					sizes = append(sizes, func(int, int) int { return 2 << 20 }) // cut short, whatever the reader does
				}
				before, resumed := inlinePartial.Load(), progressResumed.Load()
				for i, size := range sizes {
					allToAll(t, ts, transport.Tag{Phase: 4, Seq: uint64(i)}, size)
				}
				switch {
				case opt.WriteBuffer == 0:
				case remote && inlinePartial.Load() == before:
					t.Fatal("no inline write was cut short: the finishing path went untested")
				case !remote && progressResumed.Load() == resumed && inlinePartial.Load() == before:
					// The loop resumes a frame, or hands its rest to a
					// goroutine when the peer is slow (race detector, load).
					t.Fatal("every frame went in one write: resuming a frame went untested")
				}
				// Exchange and plain Send/Recv interleave on the same streams.
				exchange(t, ts[0], ts[1], 3, pattern(5000, 9))
				allToAll(t, ts, transport.Tag{Phase: 5}, sizes[0])
			})
		}
	}
}

func TestExchangeErrors(t *testing.T) {
	// Small messages, and large ones moved inline (one goroutine) and by a
	// goroutine per peer and direction.
	saved := inlineAllFor
	defer func() { inlineAllFor = saved }()
	for _, tc := range []struct {
		n   int
		all bool
	}{{1000, false}, {600 << 10, true}, {600 << 10, false}} {
		t.Run(fmt.Sprintf("n=%d/inlineAll=%v", tc.n, tc.all), func(t *testing.T) {
			inlineAllFor = func(*net.TCPConn) bool { return tc.all }
			testExchangeErrors(t, tc.n)
		})
	}
}

func testExchangeErrors(t *testing.T, n int) {
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("xchgerr"), 3, Options{})
	defer closeAll(ts)
	// Rank 2 is gone: rank 0's exchange reports it and still finishes the
	// rest (rank 1 runs its exchange too).
	ts[2].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs [2][]error
	for r := range 2 {
		wg.Go(func() {
			ts[r].Exchange(ctx, tg(1),
				func(p int) ([]byte, bool) { return pattern(n, r), true },
				func(p int) ([]byte, bool) { return make([]byte, n), true },
				func(err error) { mu.Lock(); errs[r] = append(errs[r], err); mu.Unlock() })
		})
	}
	wg.Wait()
	for r := range 2 {
		found := false
		for _, err := range errs[r] {
			var te *transport.Error
			if errors.As(err, &te) && te.Peer == 2 && errors.Is(err, transport.ErrPeerClosed) {
				found = true
			} else {
				t.Errorf("rank %d: unexpected error %v", r, err)
			}
		}
		if !found {
			t.Errorf("rank %d: no ErrPeerClosed from rank 2 in %v", r, errs[r])
		}
	}

	// A peer that never sends: the context bounds the inline receive, and
	// nothing moved, so the connection stays usable.
	ts2 := connectGroup(t, store.NewMemory(), uniquePrefix("xchgctx"), 2, Options{})
	defer closeAll(ts2)
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	var got []error
	start := time.Now()
	ts2[0].Exchange(short, tg(2),
		func(int) ([]byte, bool) { return nil, false },
		func(int) ([]byte, bool) { return make([]byte, 10), true },
		func(err error) { got = append(got, err) })
	if len(got) != 1 || !errors.Is(got[0], context.DeadlineExceeded) || errors.Is(got[0], ErrBroken) {
		t.Fatalf("want one plain DeadlineExceeded, got %v", got)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the deadline took %v to end the exchange", d)
	}
	exchange(t, ts2[1], ts2[0], 2, pattern(10, 1))
}

// TestExchangeDoesNotAllocate: small exchanges allocate nothing in the
// transport, with a context that cannot be cancelled and with one that can:
// the receiving direction arms a cancellable context (an AfterFunc, four
// allocations and a registration on the context) only when a read is about
// to park, and a read that polling satisfies never parks. The budget is
// long here so that a slow scheduler does not park a read.
func TestExchangeDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("xchgalloc"), 2, Options{Poll: time.Second})
	defer closeAll(ts)
	timed, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bufs := [2][2][]byte{{pattern(4096, 1), make([]byte, 4096)}, {pattern(4096, 2), make([]byte, 4096)}}
	sends := [2]func(int) ([]byte, bool){
		func(int) ([]byte, bool) { return bufs[0][0], true },
		func(int) ([]byte, bool) { return bufs[1][0], true },
	}
	recvs := [2]func(int) ([]byte, bool){
		func(int) ([]byte, bool) { return bufs[0][1], true },
		func(int) ([]byte, bool) { return bufs[1][1], true },
	}
	report := func(err error) { panic(err) }
	for _, ctx := range []context.Context{context.Background(), timed} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 1 + 1 + 200 { // our warm-up, AllocsPerRun's warm-up, its runs
				ts[1].Exchange(ctx, tg(1), sends[1], recvs[1], report)
			}
		}()
		ts[0].Exchange(ctx, tg(1), sends[0], recvs[0], report) // warm up
		n := testing.AllocsPerRun(200, func() { ts[0].Exchange(ctx, tg(1), sends[0], recvs[0], report) })
		<-done
		if n != 0 {
			_, timed := ctx.Deadline()
			t.Fatalf("context with a deadline %v: %.1f allocations per Exchange", timed, n)
		}
	}
}
