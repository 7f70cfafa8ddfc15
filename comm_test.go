package detcoll

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/transport/inproc"
	"github.com/detcoll/detcoll/tree"
)

// each runs fn on every rank concurrently and returns the per-rank errors.
func each(comms []*Comm, fn func(c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func(i int, c *Comm) {
			defer wg.Done()
			errs[i] = fn(c)
		}(i, c)
	}
	wg.Wait()
	return errs
}

func mustEach(t *testing.T, comms []*Comm, fn func(c *Comm) error) {
	t.Helper()
	for r, err := range each(comms, fn) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func newComms(t *testing.T, w int, opts ...CommOption) []*Comm {
	t.Helper()
	comms, err := NewInProc(w, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

var testDTypes = []DType{BF16, FP16, FP32, FP64}

// randomBuf fills n elements with a mix of wide-range values and specials.
func randomBuf(rng *rand.Rand, dt DType, n int) []byte {
	b := make([]byte, n*dt.Size())
	sp := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), 1e-40, 65504, 1e30}
	for i := 0; i < n; i++ {
		v := (rng.Float64()*2 - 1) * math.Pow(2, float64(rng.IntN(30)-10))
		if rng.IntN(16) == 0 {
			v = sp[rng.IntN(len(sp))]
		}
		switch dt {
		case FP64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
		case FP32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		case BF16:
			binary.LittleEndian.PutUint16(b[2*i:], dtype.Float32ToBF16(float32(v)))
		case FP16:
			binary.LittleEndian.PutUint16(b[2*i:], dtype.Float32ToFP16(float32(v)))
		}
	}
	return b
}

func oracle(t *testing.T, dt DType, acc Accumulate, ins [][]byte) []byte {
	t.Helper()
	out := make([]byte, len(ins[0]))
	if err := reduce.Oracle(dt, acc, ins, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func sweepCounts(w int) []int {
	c := []int{0, 1, max(w-1, 1), 7, 13, 101, 1000*w + 3}
	if os.Getenv("DETCOLL_LONG_TESTS") != "" {
		c = append(c, 1<<18+5)
	}
	return c
}

// TestAllReduceMatchesOracle: every algorithm, every W 1…16, dtype, mode and
// a sweep of counts (0, 1, < W, prime, not divisible by W, large) give the
// oracle's bits on every rank.
func TestAllReduceMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for w := 1; w <= 16; w++ {
		comms := newComms(t, w)
		for _, dt := range testDTypes {
			for _, acc := range []Accumulate{AccumulateNative, AccumulateF32} {
				if acc == AccumulateF32 && (dt == FP32 || dt == FP64) {
					continue
				}
				for _, count := range sweepCounts(w) {
					ins := make([][]byte, w)
					for r := range ins {
						ins[r] = randomBuf(rng, dt, count)
					}
					want := oracle(t, dt, acc, ins)
					for _, alg := range []Algorithm{GatherTree, A2ATree, RecursiveDoubling, HalvingDoubling} {
						outs := make([][]byte, w)
						inPlace := count%2 == 1
						mustEach(t, comms, func(c *Comm) error {
							send := append([]byte(nil), ins[c.Rank()]...)
							recv := make([]byte, len(send))
							if inPlace {
								recv = send
							}
							outs[c.Rank()] = recv
							return c.AllReduce(context.Background(), send, recv, dt, WithAlgorithm(alg), WithAccumulate(acc))
						})
						for r, o := range outs {
							if !bytes.Equal(o, want) {
								t.Fatalf("W=%d %v %v count=%d %v in-place=%v rank %d differs from oracle", w, dt, acc, count, alg, inPlace, r)
							}
						}
					}
				}
			}
		}
	}
}

// TestAllGather: both forms over messages (one step of W-1 messages, and
// recursive doubling, which Auto uses for small blocks from W = 4 on).
func TestAllGather(t *testing.T) {
	direct := func(cfg *commConfig) { cfg.gatherDoublingBytes = -1 }
	for _, w := range []int{1, 2, 3, 4, 5, 6, 7, 8, 13, 16} {
		for _, opts := range [][]CommOption{nil, {direct}} {
			testAllGather(t, w, opts)
		}
	}
}

func testAllGather(t *testing.T, w int, opts []CommOption) {
	t.Helper()
	{
		comms := newComms(t, w, opts...)
		for _, count := range []int{0, 1, 3, 1025, autoDoublingGatherBytes/4 + 1} {
			for _, inPlace := range []bool{false, true} {
				outs := make([][]byte, w)
				mustEach(t, comms, func(c *Comm) error {
					recv := make([]byte, w*count*4)
					send := bytes.Repeat([]byte{byte(c.Rank() + 1), 0xAA, 0x55, byte(c.Rank())}, count)
					if inPlace {
						copy(recv[c.Rank()*count*4:], send)
						send = recv[c.Rank()*count*4 : (c.Rank()+1)*count*4]
					}
					outs[c.Rank()] = recv
					return c.AllGather(context.Background(), send, recv, FP32)
				})
				var want []byte
				for r := 0; r < w; r++ {
					want = append(want, bytes.Repeat([]byte{byte(r + 1), 0xAA, 0x55, byte(r)}, count)...)
				}
				for r, o := range outs {
					if !bytes.Equal(o, want) {
						t.Fatalf("W=%d count=%d in-place=%v direct=%v: rank %d wrong", w, count, inPlace, opts != nil, r)
					}
				}
			}
		}
		for _, c := range comms {
			if s := c.Stats(); s.WorkspacePeakBytes != 0 {
				t.Fatalf("AllGather used %d bytes of workspace", s.WorkspacePeakBytes)
			}
		}
	}
}

func TestReduceScatterMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for w := 1; w <= 16; w++ {
		comms := newComms(t, w)
		for _, dt := range testDTypes {
			for _, count := range []int{0, 1, 7, 129} {
				ins := make([][]byte, w)
				for r := range ins {
					ins[r] = randomBuf(rng, dt, w*count)
				}
				for _, acc := range []Accumulate{AccumulateNative, AccumulateF32} {
					if acc == AccumulateF32 && dt.Size() != 2 {
						continue
					}
					full := oracle(t, dt, acc, ins)
					for _, alg := range []Algorithm{GatherTree, A2ATree, RecursiveDoubling, HalvingDoubling} {
						outs := make([][]byte, w)
						mustEach(t, comms, func(c *Comm) error {
							outs[c.Rank()] = make([]byte, count*dt.Size())
							return c.ReduceScatter(context.Background(), ins[c.Rank()], outs[c.Rank()], dt, WithAlgorithm(alg), WithAccumulate(acc))
						})
						for r, o := range outs {
							n := count * dt.Size()
							if !bytes.Equal(o, full[r*n:(r+1)*n]) {
								t.Fatalf("W=%d %v %v count=%d %v: rank %d differs from oracle", w, dt, acc, count, alg, r)
							}
						}
					}
				}
			}
		}
	}
}

func TestManyLanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for _, w := range []int{1, 3, 4, 6} {
		comms := newComms(t, w)
		lanes := []int{5, 0, 17} // elements per rank per lane (output of RS)
		dt := BF16
		ins := make([][][]byte, w) // rank, lane
		for r := range ins {
			for _, n := range lanes {
				ins[r] = append(ins[r], randomBuf(rng, dt, w*n))
			}
		}
		for _, alg := range []Algorithm{GatherTree, A2ATree} {
			outs := make([][][]byte, w)
			mustEach(t, comms, func(c *Comm) error {
				for _, n := range lanes {
					outs[c.Rank()] = append(outs[c.Rank()], make([]byte, n*2))
				}
				return c.ReduceScatterMany(context.Background(), ins[c.Rank()], outs[c.Rank()], dt, WithAlgorithm(alg))
			})
			for l, n := range lanes {
				laneIns := make([][]byte, w)
				for r := range laneIns {
					laneIns[r] = ins[r][l]
				}
				full := oracle(t, dt, AccumulateNative, laneIns)
				for r := 0; r < w; r++ {
					if !bytes.Equal(outs[r][l], full[r*n*2:(r+1)*n*2]) {
						t.Fatalf("RSMany W=%d %v lane %d rank %d differs", w, alg, l, r)
					}
				}
			}
		}
		// AllGatherMany
		gouts := make([][][]byte, w)
		mustEach(t, comms, func(c *Comm) error {
			var sends [][]byte
			for l, n := range lanes {
				sends = append(sends, ins[c.Rank()][l][:n*2])
				gouts[c.Rank()] = append(gouts[c.Rank()], make([]byte, w*n*2))
			}
			return c.AllGatherMany(context.Background(), sends, gouts[c.Rank()], dt)
		})
		for l, n := range lanes {
			var want []byte
			for r := 0; r < w; r++ {
				want = append(want, ins[r][l][:n*2]...)
			}
			for r := 0; r < w; r++ {
				if !bytes.Equal(gouts[r][l], want) {
					t.Fatalf("AGMany W=%d lane %d rank %d differs", w, l, r)
				}
			}
		}
	}
}

func TestBroadcastScatterBarrier(t *testing.T) {
	w := 5
	comms := newComms(t, w)
	negZero := []byte{0, 0, 0, 0x80} // fp32 -0 survives a Scatter
	mustEach(t, comms, func(c *Comm) error {
		buf := make([]byte, 6)
		if c.Rank() == 3 {
			copy(buf, "detcol")
		}
		if err := c.Broadcast(context.Background(), buf, 3); err != nil {
			return err
		}
		if string(buf) != "detcol" {
			return fmt.Errorf("broadcast got %q", buf)
		}
		var send []byte
		if c.Rank() == 1 {
			for r := 0; r < w; r++ {
				send = append(send, negZero...)
				send[len(send)-4] = byte(r)
			}
		}
		recv := make([]byte, 4)
		if err := c.Scatter(context.Background(), send, recv, 1); err != nil {
			return err
		}
		if !bytes.Equal(recv, []byte{byte(c.Rank()), 0, 0, 0x80}) {
			return fmt.Errorf("scatter got %x", recv)
		}
		return c.Barrier(context.Background())
	})
}

func TestSplit(t *testing.T) {
	// A 2 (TP) × 3 (CP) mesh over 6 ranks: TP groups by color rank/2... CP groups by rank%2.
	w := 6
	comms := newComms(t, w)
	rng := rand.New(rand.NewPCG(1, 1))
	ins := make([][]byte, w)
	for r := range ins {
		ins[r] = randomBuf(rng, FP32, 33)
	}
	subs := make([]*Comm, w)
	mustEach(t, comms, func(c *Comm) error {
		s, err := c.Split(context.Background(), c.Rank()%2, -c.Rank()) // reversed order by key
		subs[c.Rank()] = s
		return err
	})
	for r, s := range subs {
		if s.Size() != 3 {
			t.Fatalf("rank %d: sub size %d", r, s.Size())
		}
		wantRank := 2 - r/2 // keys are -rank: the highest parent rank comes first
		if s.Rank() != wantRank {
			t.Fatalf("parent rank %d: sub rank %d, want %d", r, s.Rank(), wantRank)
		}
	}
	outs := make([][]byte, w)
	mustEach(t, subs, func(s *Comm) error {
		var me int
		for i := range subs {
			if subs[i] == s {
				me = i
			}
		}
		outs[me] = make([]byte, len(ins[me]))
		return s.AllReduce(context.Background(), ins[me], outs[me], FP32)
	})
	for color := 0; color < 2; color++ {
		// sub rank order: parent ranks descending within the color
		var group [][]byte
		for p := w - 2 + color; p >= 0; p -= 2 {
			group = append(group, ins[p])
		}
		want := oracle(t, FP32, AccumulateNative, group)
		for p := color; p < w; p += 2 {
			if !bytes.Equal(outs[p], want) {
				t.Fatalf("color %d parent rank %d: sub AllReduce differs from oracle over the sub-group", color, p)
			}
		}
	}
	// Undefined opts out.
	mustEach(t, comms, func(c *Comm) error {
		color := 0
		if c.Rank() == 0 {
			color = Undefined
		}
		s, err := c.Split(context.Background(), color, 0)
		if err != nil {
			return err
		}
		if (s == nil) != (c.Rank() == 0) {
			return fmt.Errorf("rank %d: sub %v", c.Rank(), s)
		}
		return nil
	})
}

func TestWorkspace(t *testing.T) {
	w := 4
	const n = 4000 // bytes per rank, divisible by W
	comms := newComms(t, w)
	run := func(alg Algorithm) {
		mustEach(t, comms, func(c *Comm) error {
			send := make([]byte, n)
			return c.AllReduce(context.Background(), send, make([]byte, n), FP32, WithAlgorithm(alg))
		})
	}
	run(GatherTree)
	for _, c := range comms {
		if s := c.Stats(); s.WorkspaceBytes != (w-1)*n || s.WorkspacePeakBytes != (w-1)*n {
			t.Fatalf("gather_tree workspace %+v, want %d", s, (w-1)*n)
		}
	}
	for i := 0; i < 3; i++ {
		run(GatherTree)
		run(A2ATree) // needs less: reuses the same buffer
	}
	for _, c := range comms {
		if s := c.Stats(); s.WorkspaceBytes != (w-1)*n || s.WorkspacePeakBytes != (w-1)*n {
			t.Fatalf("workspace grew on reuse: %+v", s)
		}
		c.ReleaseWorkspace()
	}
	run(A2ATree)
	for _, c := range comms {
		if s := c.Stats(); s.WorkspaceBytes != (w-1)*n/w {
			t.Fatalf("a2a_tree workspace %d, want %d", s.WorkspaceBytes, (w-1)*n/w)
		}
	}
}

func TestSignatureValidatedOnce(t *testing.T) {
	comms := newComms(t, 3)
	for i := 0; i < 5; i++ {
		mustEach(t, comms, func(c *Comm) error {
			b := make([]byte, 64)
			return c.AllReduce(context.Background(), b, b, FP32)
		})
	}
	for _, c := range comms {
		if s := c.Stats(); s.SignatureExchanges != 1 || s.Collectives != 5 {
			t.Fatalf("after 5 identical calls: %+v (want 1 exchange)", s)
		}
	}
	mustEach(t, comms, func(c *Comm) error {
		b := make([]byte, 128) // new count: a new signature
		return c.AllReduce(context.Background(), b, b, FP32)
	})
	for _, c := range comms {
		if s := c.Stats(); s.SignatureExchanges != 2 {
			t.Fatalf("new signature not exchanged: %+v", s)
		}
	}
}

func TestMismatchErrorsOnEveryRank(t *testing.T) {
	comms := newComms(t, 3, WithTimeout(2*time.Second))
	errs := each(comms, func(c *Comm) error {
		b := make([]byte, 64)
		if c.Rank() == 2 {
			return c.AllReduce(context.Background(), b[:32], b[:32], FP32)
		}
		return c.AllReduce(context.Background(), b, b, FP32)
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank %d: want ErrMismatch, got %v", r, err)
		}
		if !strings.Contains(err.Error(), "rank 2 called AllReduce(count=8") && r != 2 {
			t.Fatalf("rank %d: error does not name rank 2's call: %v", r, err)
		}
		var de *Error
		wantPeer := 2
		if r == 2 {
			wantPeer = 0
		}
		if !errors.As(err, &de) {
			t.Fatalf("rank %d: not a *detcoll.Error: %v", r, err)
		}
		if de.Peer != wantPeer {
			t.Fatalf("rank %d: error blames peer %d, want %d: %v", r, de.Peer, wantPeer, err)
		}
	}
	// Poisoned afterwards.
	for _, c := range comms {
		if err := c.Barrier(context.Background()); !errors.Is(err, ErrPoisoned) {
			t.Fatalf("after a mismatch: want ErrPoisoned, got %v", err)
		}
	}
}

// A validated (cached) signature on some ranks and a new one on another must
// still fail on every rank, within the timeout.
func TestMismatchAfterValidation(t *testing.T) {
	comms := newComms(t, 3, WithTimeout(2*time.Second))
	mustEach(t, comms, func(c *Comm) error {
		b := make([]byte, 64)
		return c.AllReduce(context.Background(), b, b, FP32)
	})
	start := time.Now()
	errs := each(comms, func(c *Comm) error {
		b := make([]byte, 64)
		if c.Rank() == 1 {
			return c.AllGather(context.Background(), b[:16], make([]byte, 48), FP32)
		}
		return c.AllReduce(context.Background(), b, b, FP32)
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank %d: want ErrMismatch, got %v", r, err)
		}
		t.Logf("rank %d: %v", r, err)
	}
	if !strings.Contains(errs[0].Error(), "rank 1 called a collective it had not called before") ||
		!strings.Contains(errs[1].Error(), "called AllReduce(count=16") {
		t.Fatalf("errors do not say what the peers called:\n%v\n%v", errs[0], errs[1])
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("mismatch took %v to surface", d)
	}
}

func TestDeadPeer(t *testing.T) {
	comms := newComms(t, 4, WithTimeout(2*time.Second))
	start := time.Now()
	errs := each(comms, func(c *Comm) error {
		if c.Rank() == 3 {
			return c.Close() // rank 3 dies instead of calling
		}
		b := make([]byte, 1024)
		return c.AllReduce(context.Background(), b, b, FP32)
	})
	for r := 0; r < 3; r++ {
		if errs[r] == nil {
			t.Fatalf("rank %d: collective with a dead peer succeeded", r)
		}
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("dead peer took %v to surface", d)
	}
}

// TestDeadPeerMidDoubling: with the signature agreed, a rank that dies
// before a recursive-doubling AllReduce or AllGather, or a halving
// AllReduce or ReduceScatter, is a
// peer of only one
// rank per level; the failures cascade (a failing rank closes its
// transport), so every rank errs well within the timeout, not at it.
func TestDeadPeerMidDoubling(t *testing.T) {
	const timeout = 20 * time.Second
	for _, op := range []string{"AllReduce", "AllGather", "AllReduce halving", "ReduceScatter halving"} {
		comms := newComms(t, 8, WithTimeout(timeout))
		call := func(c *Comm) error {
			b := make([]byte, 1024)
			switch op {
			case "AllReduce":
				return c.AllReduce(context.Background(), b, b, FP32)
			case "AllReduce halving":
				return c.AllReduce(context.Background(), b, b, FP32, WithAlgorithm(HalvingDoubling))
			case "ReduceScatter halving":
				return c.ReduceScatter(context.Background(), make([]byte, 8*len(b)), b, FP32, WithAlgorithm(HalvingDoubling))
			}
			return c.AllGather(context.Background(), b, make([]byte, 8*len(b)), FP32)
		}
		mustEach(t, comms, call) // agrees on the signature
		start := time.Now()
		errs := each(comms, func(c *Comm) error {
			if c.Rank() == 7 {
				return c.Close()
			}
			return call(c)
		})
		for r := 0; r < 7; r++ {
			if errs[r] == nil {
				t.Fatalf("%s: rank %d: collective with a dead peer succeeded", op, r)
			}
		}
		if d := time.Since(start); d > timeout/4 {
			t.Fatalf("%s: dead peer took %v to surface (timeout %v)", op, d, timeout)
		}
	}
}

func TestBadInput(t *testing.T) {
	comms := newComms(t, 2)
	c := comms[0]
	ctx := context.Background()
	b8 := make([]byte, 8)
	cases := []struct {
		name string
		call func() error
	}{
		{"AllReduce ragged", func() error { return c.AllReduce(ctx, make([]byte, 7), make([]byte, 7), FP32) }},
		{"AllReduce recv length", func() error { return c.AllReduce(ctx, b8, make([]byte, 4), FP32) }},
		{"AllReduce bad dtype", func() error { return c.AllReduce(ctx, b8, make([]byte, 8), Byte) }},
		{"AllReduce invalid dtype", func() error { return c.AllReduce(ctx, b8, make([]byte, 8), DType(99)) }},
		{"AllReduce partial overlap", func() error { b := make([]byte, 12); return c.AllReduce(ctx, b[:8], b[4:], FP32) }},
		{"AllReduce bad algorithm", func() error { return c.AllReduce(ctx, b8, make([]byte, 8), FP32, WithAlgorithm(9)) }},
		{"AllReduce bad accumulate", func() error { return c.AllReduce(ctx, b8, make([]byte, 8), FP32, WithAccumulate(9)) }},
		{"AllGather recv length", func() error { return c.AllGather(ctx, b8, make([]byte, 8), FP32) }},
		{"AllGather overlap", func() error { b := make([]byte, 16); return c.AllGather(ctx, b[2:10], b, FP32) }},
		{"ReduceScatter not divisible", func() error { return c.ReduceScatter(ctx, make([]byte, 12), make([]byte, 4), FP32) }},
		{"ReduceScatter bad dtype", func() error { return c.ReduceScatter(ctx, b8, make([]byte, 4), DType(0)) }},
		{"ReduceScatterMany lanes", func() error { return c.ReduceScatterMany(ctx, [][]byte{b8}, nil, FP32) }},
		{"AllGatherMany lanes", func() error { return c.AllGatherMany(ctx, [][]byte{b8}, nil, FP32) }},
		{"Broadcast root", func() error { return c.Broadcast(ctx, b8, 2) }},
		{"Scatter root", func() error { return c.Scatter(ctx, nil, b8, -1) }},
		{"Scatter send length", func() error { return c.Scatter(ctx, b8, b8, 0) }},
		{"Split color", func() error { _, err := c.Split(ctx, -5, 0); return err }},
	}
	for _, cs := range cases {
		err := cs.call()
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: want ErrInvalidArgument, got %v", cs.name, err)
		}
	}
	// Argument errors leave the communicator usable.
	mustEach(t, comms, func(c *Comm) error { return c.Barrier(ctx) })
	// A cancelled context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Barrier(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: got %v", err)
	}
	// Out-of-range construction.
	if _, err := NewInProc(0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("NewInProc(0): %v", err)
	}
	if _, err := New(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("New(nil): %v", err)
	}
	// Closed.
	comms[1].Close()
	comms[1].Close()
	if err := comms[1].Barrier(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("closed communicator: got %v", err)
	}
}

func TestContextTimeoutPoisons(t *testing.T) {
	comms := newComms(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := comms[0].Barrier(ctx) // rank 1 never comes
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want DeadlineExceeded, got %v", err)
	}
	if err := comms[0].Barrier(context.Background()); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("want ErrPoisoned, got %v", err)
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range []Algorithm{Auto, GatherTree, A2ATree} {
		b, err := ParseAlgorithm(a.String())
		if err != nil || b != a {
			t.Fatalf("%v: %v %v", a, b, err)
		}
	}
	if _, err := ParseAlgorithm("ring"); err == nil {
		t.Fatal("ring accepted")
	}
}

func TestSignatureCacheBounded(t *testing.T) {
	comms := newComms(t, 2)
	for i := 0; i < maxCachedSignatures+10; i++ {
		n := 4 * (i + 1)
		mustEach(t, comms, func(c *Comm) error {
			return c.AllGather(context.Background(), make([]byte, n), make([]byte, 2*n), Byte)
		})
	}
	for _, c := range comms {
		if n := c.agr.Agreed(); n > maxCachedSignatures {
			t.Fatalf("cache holds %d signatures", n)
		}
		if s := c.Stats(); s.SignatureExchanges != int64(maxCachedSignatures+10) {
			t.Fatalf("exchanges %d", s.SignatureExchanges)
		}
	}
}

type badTransport struct{ transport.Transport }

func (b badTransport) Rank() int { return 7 }

func TestRankOutOfRange(t *testing.T) {
	ts, _ := inproc.New(2)
	if _, err := New(badTransport{ts[0]}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("rank 7 of 2: %v", err)
	}
}

func TestDTypeMismatchAcrossRanks(t *testing.T) {
	comms := newComms(t, 2, WithTimeout(2*time.Second))
	errs := each(comms, func(c *Comm) error {
		b := make([]byte, 16)
		dt := FP32
		if c.Rank() == 1 {
			dt = BF16 // same bytes, different dtype: 8 elements instead of 4
		}
		return c.AllReduce(context.Background(), b, b, dt)
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "dtype=") {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestAutoChoice: Auto ReduceScatter is A2ATree (its gather form receives
// W times the bytes for the same bits) except for small inputs over
// messages from W = 4 on (HalvingDoubling at W = 2^k, else
// RecursiveDoubling); Auto AllReduce
// over messages is RecursiveDoubling below autoDoublingARBytes from W = 4 on,
// GatherTree at W = 2 and 3; over a window recursive doubling runs as
// GatherTree.
func TestAutoChoice(t *testing.T) {
	for _, w := range []int{2, 3, 4, 6, 8, 16} {
		comms := newComms(t, w)
		c := comms[0]
		for _, n := range []int{0, 4, 4096, autoDoublingRSBytes, autoDoublingRSBytes + 4, autoHalvingRSBytes, autoHalvingRSBytes + 4, autoA2ABytes, 1 << 20} {
			want := A2ATree
			switch {
			case w >= autoDoublingMinW && n <= autoHalvingRSBytes && w&(w-1) == 0:
				want = HalvingDoubling
			case w >= autoDoublingMinW && n <= autoDoublingRSBytes:
				want = RecursiveDoubling
			}
			if alg, _ := c.resolve(nil, true, n, n/4); alg != want {
				t.Errorf("W=%d ReduceScatter of %d bytes: Auto resolved to %v, want %v", w, n, alg, want)
			}
			if alg, _ := c.resolve([]Option{WithAlgorithm(GatherTree)}, true, n, n/4); alg != GatherTree {
				t.Errorf("W=%d ReduceScatter of %d bytes with gather_tree asked: resolved to %v", w, n, alg)
			}
		}
		small := GatherTree
		if w >= autoDoublingMinW {
			small = RecursiveDoubling
		}
		for _, n := range []int{4096, autoA2ABytes, autoDoublingARBytes - 4, autoDoublingARBytes, autoHalvingBytes(w) - 4, autoHalvingBytes(w)} {
			want := small
			switch {
			case n >= autoA2ABytes && w == 3, n >= autoHalvingBytes(w) && w > 2:
				want = A2ATree
			case n >= autoDoublingARBytes && w >= 4 && w&(w-1) == 0:
				want = HalvingDoubling
			case n >= autoDoublingARBytes && w >= 4:
				want = A2ATree
			}
			if alg, _ := c.resolve(nil, false, n, n/4); alg != want {
				t.Errorf("W=%d AllReduce of %d bytes: Auto resolved to %v, want %v", w, n, alg, want)
			}
		}
		for _, k := range []struct {
			dt   DType
			acc  Accumulate
			want Algorithm
		}{{FP32, AccumulateNative, RecursiveDoubling}, {BF16, AccumulateNative, RecursiveDoubling},
			{BF16, AccumulateF32, GatherTree}, {FP16, AccumulateF32, GatherTree}, {FP64, AccumulateF32, RecursiveDoubling}} {
			if got := c.runsAs(RecursiveDoubling, k.dt, k.acc); got != k.want {
				t.Errorf("W=%d recursive_doubling for %v, accumulate %v, runs as %v, want %v", w, k.dt, k.acc, got, k.want)
			}
			want := HalvingDoubling
			if k.want == GatherTree || w&(w-1) != 0 {
				want = A2ATree
			}
			if got := c.runsAs(HalvingDoubling, k.dt, k.acc); got != want {
				t.Errorf("W=%d halving_doubling for %v, accumulate %v, runs as %v, want %v", w, k.dt, k.acc, got, want)
			}
		}
		// bf16 with f32 accumulation cannot go by doubling: Auto takes what
		// it would without it.
		f32 := []Option{WithAccumulate(AccumulateF32)}
		if alg, _ := c.resolve(f32, false, 4096, 2048); alg != GatherTree {
			t.Errorf("W=%d bf16 f32-accumulated 4 KiB AllReduce: Auto resolved to %v, want gather_tree", w, alg)
		}
		if alg, _ := c.resolve(f32, true, 4096, 2048); alg != A2ATree {
			t.Errorf("W=%d bf16 f32-accumulated 4 KiB ReduceScatter: Auto resolved to %v, want a2a_tree", w, alg)
		}
		if alg, _ := c.resolve(f32, false, autoA2ABytes, autoA2ABytes/2); w > 2 && alg != A2ATree {
			t.Errorf("W=%d bf16 f32-accumulated 64 KiB AllReduce: Auto resolved to %v, want a2a_tree", w, alg)
		}
		want := A2ATree
		if w == 2 {
			want = GatherTree
		}
		if alg, _ := c.resolve(nil, false, 1<<20, 1<<18); alg != want {
			t.Errorf("W=%d AllReduce of 1 MiB: Auto resolved to %v, want %v", w, alg, want)
		}
		if alg, _ := c.resolve(nil, false, autoA2ABytesW2, autoA2ABytesW2/4); alg != A2ATree {
			t.Errorf("W=%d AllReduce of %d bytes: Auto resolved to %v, want a2a_tree", w, autoA2ABytesW2, alg)
		}
	}
	// Over a window the element count decides, at W = 2 too; from W = 4 on
	// a host with a CPU for every rank, the lower threshold.
	defer func(f func() int) { hostCPUs = f }(hostCPUs)
	for _, w := range []int{2, 4, 8} {
		comms := newComms(t, w)
		c, err := New(windowed{comms[0].t})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close() // closes comms[0]'s transport too, as its own Close would
		for _, cpus := range []int{2, w - 1, w, 64} {
			hostCPUs = func() int { return cpus }
			limit := autoA2AWindowElems
			if w >= 4 && cpus >= w {
				limit = autoA2AWindowElemsSpread
			}
			for _, k := range []struct {
				elems int
				want  Algorithm
			}{{0, GatherTree}, {limit - 1, GatherTree}, {limit, A2ATree}, {1 << 20, A2ATree}} {
				if alg, _ := c.resolve(nil, false, 2*k.elems, k.elems); alg != k.want {
					t.Errorf("W=%d over a window, %d host CPUs, AllReduce of %d elements: Auto resolved to %v, want %v", w, cpus, k.elems, alg, k.want)
				}
				if got := c.runsAs(RecursiveDoubling, FP32, AccumulateNative); got != GatherTree {
					t.Errorf("W=%d over a window: recursive_doubling runs as %v, want gather_tree", w, got)
				}
				if got := c.runsAs(HalvingDoubling, FP32, AccumulateNative); got != A2ATree {
					t.Errorf("W=%d over a window: halving_doubling runs as %v, want a2a_tree", w, got)
				}
				if c.gatherDoubling(64) {
					t.Errorf("W=%d over a window: AllGather by recursive doubling", w)
				}
				if alg, _ := c.resolve(nil, true, 64, 16); alg != A2ATree {
					t.Errorf("W=%d over a window: small ReduceScatter resolved to %v, want a2a_tree", w, alg)
				}
			}
		}
	}
	if autoA2AWindowElemsSpread >= autoA2AWindowElems {
		t.Errorf("the spread threshold %d is not below the shared one %d", autoA2AWindowElemsSpread, autoA2AWindowElems)
	}
}

// TestCountCPUList: the kernel's CPU list format, and what it refuses.
func TestCountCPUList(t *testing.T) {
	for s, want := range map[string]int{
		"0\n": 1, "0-1\n": 2, "0-15": 16, "0-3,8-11\n": 8, "0,2,4": 3, "1-1": 1,
		"": 0, "x": 0, "3-1": 0, "0-": 0, "-1": 0, "0,,1": 0,
		"0-9223372036854775807": 0, "0-1048576": 1048577, "1048577": 0,
	} {
		if got := countCPUList(s); got != want {
			t.Errorf("countCPUList(%q) = %d, want %d", s, got, want)
		}
	}
	if n := hostCPUs(); n < 1 {
		t.Errorf("hostCPUs() = %d", n)
	}
}

// windowed makes a transport look like one with a shared window, for
// resolve only: it never stages or publishes.
type windowed struct{ transport.Transport }

func (windowed) WindowBytes() int                                         { return 1 << 20 }
func (windowed) Stage(context.Context, int) ([]byte, error)               { return nil, ErrUnsupported }
func (windowed) Publish(context.Context, transport.Tag) ([][]byte, error) { return nil, ErrUnsupported }
func (windowed) Release()                                                 {}

var _ transport.Sharer = windowed{}

// TestSharedDeadline: calls made without a context share one deadline
// context while they start within timeout/100 of its first; each gets at
// least the timeout; a later call gets a new one; a call that waits past it
// fails with DeadlineExceeded; Close releases it.
func TestSharedDeadline(t *testing.T) {
	const timeout = 200 * time.Millisecond
	comms := newComms(t, 2, WithTimeout(timeout))
	c := comms[0]
	c.mu.Lock()
	start := time.Now()
	a, _ := c.withTimeout(context.Background())
	b, _ := c.withTimeout(nil)
	if a != b {
		t.Errorf("two calls within %v got different contexts", timeout/100)
	}
	if dl, ok := b.Deadline(); !ok || dl.Before(start.Add(timeout)) || dl.After(time.Now().Add(timeout+timeout/100)) {
		t.Errorf("shared deadline %v (ok %v): want within [%v, %v] of the call", dl.Sub(start), ok, timeout, timeout+timeout/100)
	}
	time.Sleep(timeout/100 + time.Millisecond)
	now := time.Now()
	d, _ := c.withTimeout(context.TODO())
	if d == a {
		t.Error("a call after timeout/100 reused the old deadline context")
	}
	if dl, _ := d.Deadline(); dl.Before(now.Add(timeout)) {
		t.Errorf("renewed deadline %v after the call, want at least %v", dl.Sub(now), timeout)
	}
	user, cancel := context.WithCancel(context.Background())
	defer cancel()
	if u, _ := c.withTimeout(user); u == d {
		t.Error("a caller's own context was replaced by the shared one")
	}
	c.mu.Unlock()

	// Rank 1 never joins: rank 0's call waits out the shared deadline.
	begin := time.Now()
	err := c.AllReduce(context.Background(), make([]byte, 8), make([]byte, 8), FP32)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call past the timeout: %v, want DeadlineExceeded", err)
	}
	if took := time.Since(begin); took < timeout {
		t.Errorf("timed out after %v, before the timeout %v", took, timeout)
	}
	c.Close()
	if d.Err() == nil {
		t.Error("Close left the shared deadline's timer running")
	}
}

// TestSharedDeadlineHugeTimeout: a timeout near the largest Duration (a
// caller's "never") must not wrap into a deadline in the past.
func TestSharedDeadlineHugeTimeout(t *testing.T) {
	comms := newComms(t, 2, WithTimeout(time.Duration(math.MaxInt64)))
	c := comms[0]
	c.mu.Lock()
	ctx, _ := c.withTimeout(context.Background())
	c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		t.Fatalf("shared context with a timeout of %v: %v", time.Duration(math.MaxInt64), err)
	}
	if dl, _ := ctx.Deadline(); !dl.After(time.Now().Add(100 * 365 * 24 * time.Hour)) {
		t.Fatalf("deadline %v is not a century away", dl)
	}
	mustEach(t, comms, func(c *Comm) error {
		b := make([]byte, 8)
		return c.AllReduce(context.Background(), b, b, FP32)
	})
}

// FuzzCountCPUList: any text gives a count ≥ 0 without panicking, and a
// list written from a set of ranges counts their CPUs.
func FuzzCountCPUList(f *testing.F) {
	for _, s := range []string{"0", "0-15\n", "0-3,8-11", "", "3-1", "a-b", "0,,1", "-", "0-9223372036854775807"} {
		f.Add(s, uint8(0), uint8(0))
	}
	f.Fuzz(func(t *testing.T, s string, lo, span uint8) {
		if n := countCPUList(s); n < 0 {
			t.Fatalf("countCPUList(%q) = %d", s, n)
		}
		a, b := int(lo), int(lo)+int(span)
		list := fmt.Sprintf("%d-%d,%d\n", a, b, b+1)
		if got, want := countCPUList(list), b-a+2; got != want {
			t.Fatalf("countCPUList(%q) = %d, want %d", list, got, want)
		}
	})
}

// countingTransport counts the data messages a rank sends (not the
// signature exchange, phaseSig).
type countingTransport struct {
	transport.Transport
	sends *atomic.Int64
}

func (c countingTransport) Send(ctx context.Context, peer int, tg transport.Tag, buf []byte) error {
	if tg.Phase != phaseSig {
		c.sends.Add(1)
	}
	return c.Transport.Send(ctx, peer, tg, buf)
}

// TestRecursiveDoublingMessages: a small AllReduce and AllGather at W ≥ 4
// send the messages of tree.DoublingSteps (⌈log2 W⌉ per rank at W = 2^k),
// not W-1 per rank, and an AllReduce with gather_tree asked sends W-1;
// halving_doubling sends 2·log2 W at W = 2^k (its ReduceScatter log2 W)
// and runs as a2a_tree else.
func TestRecursiveDoublingMessages(t *testing.T) {
	for _, w := range []int{4, 6, 8} {
		ts, err := inproc.New(w)
		if err != nil {
			t.Fatal(err)
		}
		var sends atomic.Int64
		comms := make([]*Comm, w)
		for r := range comms {
			if comms[r], err = New(countingTransport{ts[r], &sends}); err != nil {
				t.Fatal(err)
			}
			defer comms[r].Close()
		}
		var want int64
		for r := 0; r < w; r++ {
			for _, st := range tree.DoublingSteps(w, r) {
				want += int64(len(st.To))
			}
		}
		halving := int64(w * 2 * len(tree.Levels(w))) // at W = 6: a2a_tree's 2(W-1)
		if w&(w-1) != 0 {
			halving = int64(w * 2 * (w - 1))
		}
		for _, k := range []struct {
			name string
			call func(c *Comm) error
			want int64
		}{
			{"AllReduce auto", func(c *Comm) error { b := make([]byte, 4096); return c.AllReduce(context.Background(), b, b, FP32) }, want},
			{"AllReduce halving_doubling", func(c *Comm) error {
				b := make([]byte, 4096)
				return c.AllReduce(context.Background(), b, b, FP32, WithAlgorithm(HalvingDoubling))
			}, halving},
			{"AllReduce gather_tree", func(c *Comm) error {
				b := make([]byte, 4096)
				return c.AllReduce(context.Background(), b, b, FP32, WithAlgorithm(GatherTree))
			}, int64(w * (w - 1))},
			{"AllGather", func(c *Comm) error {
				return c.AllGather(context.Background(), make([]byte, 64), make([]byte, 64*w), FP32)
			}, want},
			{"ReduceScatter auto", func(c *Comm) error {
				return c.ReduceScatter(context.Background(), make([]byte, 64*w), make([]byte, 64), FP32)
			}, want},
			{"ReduceScatter halving_doubling", func(c *Comm) error {
				return c.ReduceScatter(context.Background(), make([]byte, 64*w), make([]byte, 64), FP32, WithAlgorithm(HalvingDoubling))
			}, halving / 2},
			{"ReduceScatterMany recursive_doubling", func(c *Comm) error {
				return c.ReduceScatterMany(context.Background(), [][]byte{make([]byte, 64*w)}, [][]byte{make([]byte, 64)}, FP32, WithAlgorithm(RecursiveDoubling))
			}, int64(w * (w - 1))},
		} {
			sends.Store(0)
			mustEach(t, comms, k.call)
			if got := sends.Load(); got != k.want {
				t.Errorf("W=%d %s: %d messages, want %d", w, k.name, got, k.want)
			}
		}
		if w == 8 && (want != 8*3 || halving != 8*6) {
			t.Errorf("W=8: recursive doubling sends %d messages, want 24", want)
		}
	}
}

// TestLevelAlgorithmsOverTCP: the level-by-level algorithms give the
// oracle's bits over TCP too (Exchange's inline and goroutine paths: blocks
// of a few bytes and of more than 64 KiB), AllReduce and ReduceScatter, at
// W = 4, 6 and 8 (6: halving runs as a2a_tree), and so do gather_tree and
// a2a_tree (the one-lane a2a ReduceScatter over the bound step callbacks).
func TestLevelAlgorithmsOverTCP(t *testing.T) {
	// With one P when connecting, every loopback connection is moved by
	// the transport's progress loop (one goroutine per rank moves a whole
	// step); with more, by goroutines and one receive after another.
	for _, procs := range []int{1, runtime.GOMAXPROCS(0)} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			testLevelAlgorithmsOverTCP(t, procs)
		})
	}
}

func testLevelAlgorithmsOverTCP(t *testing.T, procs int) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, w := range []int{4, 6, 8} {
		saved := runtime.GOMAXPROCS(procs)
		comms := tcpComms(t, w)
		runtime.GOMAXPROCS(saved)
		for _, dt := range []DType{FP32, BF16} {
			for _, count := range []int{0, 1, 7, 20000} { // elements per block
				ins := make([][]byte, w)
				for r := range ins {
					ins[r] = randomBuf(rng, dt, w*count)
				}
				full := oracle(t, dt, AccumulateNative, ins)
				n := count * dt.Size()
				for _, alg := range []Algorithm{RecursiveDoubling, HalvingDoubling, GatherTree, A2ATree} {
					ars, rss := make([][]byte, w), make([][]byte, w)
					mustEach(t, comms, func(c *Comm) error {
						r := c.Rank()
						ars[r], rss[r] = make([]byte, len(full)), make([]byte, n)
						if err := c.AllReduce(context.Background(), ins[r], ars[r], dt, WithAlgorithm(alg)); err != nil {
							return err
						}
						return c.ReduceScatter(context.Background(), ins[r], rss[r], dt, WithAlgorithm(alg))
					})
					for r := range w {
						if !bytes.Equal(ars[r], full) {
							t.Fatalf("W=%d %v count=%d %v: AllReduce on rank %d differs from the oracle", w, dt, count, alg, r)
						}
						if !bytes.Equal(rss[r], full[r*n:(r+1)*n]) {
							t.Fatalf("W=%d %v count=%d %v: ReduceScatter on rank %d differs from the oracle", w, dt, count, alg, r)
						}
					}
				}
			}
		}
	}
}
