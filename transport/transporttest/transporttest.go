// Package transporttest is the conformance suite every transport.Transport
// passes: in-process, TCP, and any later one.
package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/transport"
)

// Factory returns w connected transports, rank i at index i. The suite closes them.
type Factory func(t *testing.T, w int) []transport.Transport

func closeAll(ts []transport.Transport) {
	for _, x := range ts {
		x.Close()
	}
}

func pattern(from, to, n, salt int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(from*31 + to*7 + i*13 + salt)
	}
	return b
}

// Run runs the conformance suite against the transports f makes.
func Run(t *testing.T, f Factory) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, Factory)
	}{
		{"Identity", testIdentity},
		{"PingPongSizes", testPingPongSizes},
		{"FIFO", testFIFO},
		{"AllToAll", testAllToAll},
		{"TagMismatch", testTagMismatch},
		{"SizeMismatch", testSizeMismatch},
		{"InvalidPeer", testInvalidPeer},
		{"ContextCancelsRecv", testContextCancelsRecv},
		{"ContextErrorBeforeMessageKeepsTransport", testContextErrorBeforeMessageKeepsTransport},
		{"CloseUnblocksOwnRecv", testCloseUnblocksOwnRecv},
		{"PeerCloseFailsRecv", testPeerCloseFailsRecv},
		{"Sub", testSub},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, f) })
	}
}

// testIdentity checks that every transport reports its own rank and the world size.
func testIdentity(t *testing.T, f Factory) {
	ts := f(t, 3)
	defer closeAll(ts)
	for i, x := range ts {
		if x.Rank() != i || x.Size() != 3 {
			t.Fatalf("transport %d reports rank %d size %d", i, x.Rank(), x.Size())
		}
	}
}

// testPingPongSizes sends rank 0 to rank 1 messages from empty to over a MiB.
func testPingPongSizes(t *testing.T, f Factory) {
	ts := f(t, 2)
	defer closeAll(ts)
	ctx := context.Background()
	for _, n := range []int{0, 1, 7, 4096, 1<<20 + 3} {
		want := pattern(0, 1, n, n)
		got := make([]byte, n)
		errc := make(chan error, 1)
		go func() { errc <- ts[0].Send(ctx, 1, tg(5), want) }()
		if err := ts[1].Recv(ctx, 0, tg(5), got); err != nil {
			t.Fatalf("recv %d bytes: %v", n, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("send %d bytes: %v", n, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: payload differs", n)
		}
	}
}

// testFIFO checks that messages between one pair arrive in the order sent.
func testFIFO(t *testing.T, f Factory) {
	ts := f(t, 2)
	defer closeAll(ts)
	ctx := context.Background()
	const k = 50
	go func() {
		for i := 0; i < k; i++ {
			ts[0].Send(ctx, 1, tg(uint32(i)), pattern(0, 1, 16+i, i))
		}
	}()
	for i := 0; i < k; i++ {
		got := make([]byte, 16+i)
		if err := ts[1].Recv(ctx, 0, tg(uint32(i)), got); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !bytes.Equal(got, pattern(0, 1, 16+i, i)) {
			t.Fatalf("message %d out of order or corrupt", i)
		}
	}
}

// testAllToAll runs every-rank-to-every-rank exchanges at several world sizes.
func testAllToAll(t *testing.T, f Factory) {
	for _, w := range []int{1, 2, 5} {
		ts := f(t, w)
		allToAll(t, ts, 3000, 1)
		allToAll(t, ts, 17, 2)
		closeAll(ts)
	}
}

// testTagMismatch checks that a receive naming a different tag fails with a TagError.
func testTagMismatch(t *testing.T, f Factory) {
	// Every field of the tag counts: a peer one call ahead (Seq) or in
	// another collective with the same phase (Sig) is a mismatch too.
	sent := transport.Tag{Phase: 1, Seq: 9, Sig: 0xfeedface_00000001}
	for name, want := range map[string]transport.Tag{
		"phase":     {Phase: 2, Seq: 9, Sig: sent.Sig},
		"seq":       {Phase: 1, Seq: 10, Sig: sent.Sig},
		"signature": {Phase: 1, Seq: 9, Sig: sent.Sig ^ 1<<63},
	} {
		t.Run(name, func(t *testing.T) {
			ts := f(t, 2)
			defer closeAll(ts)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			go ts[0].Send(ctx, 1, sent, make([]byte, 8))
			err := ts[1].Recv(ctx, 0, want, make([]byte, 8))
			var te *transport.TagError
			if !errors.Is(err, transport.ErrTagMismatch) || !errors.As(err, &te) || te.Got != sent || te.Want != want {
				t.Fatalf("want a TagError got %v want %v, got %v", sent, want, err)
			}
		})
	}
}

// testSizeMismatch checks that a receive buffer of the wrong length fails.
func testSizeMismatch(t *testing.T, f Factory) {
	ts := f(t, 2)
	defer closeAll(ts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go ts[0].Send(ctx, 1, tg(1), make([]byte, 8))
	err := ts[1].Recv(ctx, 0, tg(1), make([]byte, 9))
	if !errors.Is(err, transport.ErrSizeMismatch) {
		t.Fatalf("want ErrSizeMismatch, got %v", err)
	}
}

// testInvalidPeer checks that out-of-range and self peers are refused.
func testInvalidPeer(t *testing.T, f Factory) {
	ts := f(t, 2)
	defer closeAll(ts)
	ctx := context.Background()
	for _, p := range []int{-1, 0, 2} {
		if err := ts[0].Send(ctx, p, tg(0), nil); !errors.Is(err, transport.ErrInvalidPeer) {
			t.Fatalf("send to %d: want ErrInvalidPeer, got %v", p, err)
		}
		if err := ts[0].Recv(ctx, p, tg(0), nil); !errors.Is(err, transport.ErrInvalidPeer) {
			t.Fatalf("recv from %d: want ErrInvalidPeer, got %v", p, err)
		}
	}
}

// testContextCancelsRecv checks that a receive with nothing coming returns at its deadline.
func testContextCancelsRecv(t *testing.T, f Factory) {
	ts := f(t, 2)
	defer closeAll(ts)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := ts[1].Recv(ctx, 0, tg(0), make([]byte, 4))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want DeadlineExceeded, got %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("recv took %v after its deadline", d)
	}
}

// testContextErrorBeforeMessageKeepsTransport checks that a receive that
// timed out before any byte moved leaves the pair usable.
func testContextErrorBeforeMessageKeepsTransport(t *testing.T, f Factory) {
	ts := f(t, 2)
	defer closeAll(ts)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := ts[1].Recv(ctx, 0, tg(3), make([]byte, 4)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want DeadlineExceeded, got %v", err)
	}
	// Nothing had moved: the pair still works.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	go ts[0].Send(ctx2, 1, tg(3), []byte{1, 2, 3, 4})
	got := make([]byte, 4)
	if err := ts[1].Recv(ctx2, 0, tg(3), got); err != nil || !bytes.Equal(got, []byte{1, 2, 3, 4}) {
		t.Fatalf("after a context error before any message: %v %v", got, err)
	}
}

// testCloseUnblocksOwnRecv checks that Close wakes a blocked receive with
// ErrClosed, that later sends fail, and that a second Close is harmless.
func testCloseUnblocksOwnRecv(t *testing.T, f Factory) {
	ts := f(t, 2)
	defer closeAll(ts)
	errc := make(chan error, 1)
	go func() { errc <- ts[1].Recv(context.Background(), 0, tg(0), make([]byte, 4)) }()
	time.Sleep(50 * time.Millisecond)
	ts[1].Close()
	select {
	case err := <-errc:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("recv on a closed transport: want ErrClosed, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Recv")
	}
	if err := ts[1].Send(context.Background(), 0, tg(0), nil); err == nil {
		t.Fatal("send after close succeeded")
	}
	if err := ts[1].Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// testPeerCloseFailsRecv checks that a peer closing fails a receive blocked on it.
func testPeerCloseFailsRecv(t *testing.T, f Factory) {
	ts := f(t, 2)
	defer closeAll(ts)
	errc := make(chan error, 1)
	go func() { errc <- ts[1].Recv(context.Background(), 0, tg(0), make([]byte, 4)) }()
	time.Sleep(50 * time.Millisecond)
	ts[0].Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("recv from a closed peer succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("peer Close did not unblock Recv")
	}
}

// testSub checks that disjoint sub-groups and their parent all carry traffic at once.
func testSub(t *testing.T, f Factory) {
	ts := f(t, 4)
	defer closeAll(ts)
	if _, ok := ts[0].(transport.Splitter); !ok {
		t.Skip("transport does not implement transport.Splitter")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Two disjoint sub-groups {3,1} and {0,2} plus the parent, all busy at once.
	groups := [][]int{{3, 1}, {0, 2}}
	subs := make([]transport.Transport, 4)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for gi, g := range groups {
		for _, r := range g {
			wg.Add(1)
			go func(r int, g []int, id uint64) {
				defer wg.Done()
				s, err := ts[r].(transport.Splitter).Sub(ctx, id, g)
				if err != nil {
					errs <- err
					return
				}
				subs[r] = s
			}(r, g, uint64(100+gi))
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if subs[3].Rank() != 0 || subs[1].Rank() != 1 || subs[1].Size() != 2 {
		t.Fatalf("sub ranks: %d %d size %d", subs[3].Rank(), subs[1].Rank(), subs[1].Size())
	}
	var all sync.WaitGroup
	all.Add(2)
	go func() { defer all.Done(); allToAll(t, ts, 1000, 7) }()
	go func() {
		defer all.Done()
		allToAll(t, []transport.Transport{subs[3], subs[1]}, 999, 8)
		allToAll(t, []transport.Transport{subs[0], subs[2]}, 998, 9)
	}()
	all.Wait()
	for _, s := range subs {
		s.Close()
	}
}

// allToAll has every rank send a distinct pattern to every other and checks
// every payload. Sends and receives all run concurrently.
func allToAll(t *testing.T, ts []transport.Transport, n, salt int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := len(ts)
	var wg sync.WaitGroup
	errs := make(chan error, 2*w*w)
	for from := 0; from < w; from++ {
		for to := 0; to < w; to++ {
			if from == to {
				continue
			}
			wg.Add(2)
			go func(from, to int) {
				defer wg.Done()
				if err := ts[from].Send(ctx, to, tg(uint32(salt)), pattern(from, to, n, salt)); err != nil {
					errs <- err
				}
			}(from, to)
			go func(from, to int) {
				defer wg.Done()
				got := make([]byte, n)
				if err := ts[to].Recv(ctx, from, tg(uint32(salt)), got); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, pattern(from, to, n, salt)) {
					errs <- fmt.Errorf("payload %d→%d corrupt", from, to)
				}
			}(from, to)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// tg is the tag of phase n (sequence number and signature zero).
func tg(n uint32) transport.Tag { return transport.Tag{Phase: n} }
