//go:build linux

package shm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
	"github.com/detcoll/detcoll/store"
)

// TestCollectivesBitIdentical runs AllReduce (both algorithms, in and out
// of place), AllGather, ReduceScatter and their Many forms over shm for
// W = 1…5, fp32 and bf16, with counts that are empty, tiny, uneven and
// larger than a ring and than a window slot (so the ring stream, the direct
// copies, the window and its pieces are all used), and compares raw bytes
// with reduce.Oracle and with the in-process transport.
func TestCollectivesBitIdentical(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for w := 1; w <= 5; w++ {
		for name, opt := range map[string]Options{
			"default":     {},
			"smallring":   {DirectBytes: -1, RingBytes: minRingBytes, WindowBytes: -1},
			"nowindow":    {WindowBytes: -1},
			"smallwindow": {WindowBytes: minWindowBytes},
		} {
			ts := connectGroup(t, store.NewMemory(), uniquePrefix("coll"), w, opt)
			allowExpose(ts) // large AllGathers read exposed buffers at every W
			comms := newComms(t, ts)
			ref, err := detcoll.NewInProc(w)
			if err != nil {
				t.Fatal(err)
			}
			for _, dt := range []dtype.DType{dtype.FP32, dtype.BF16} {
				// 40,000 elements: messages of 80–160 KB, beyond the 64 KiB
				// small ring and the direct-copy threshold.
				counts := []int{0, 1, 7, 1000*w + 3, 40_000}
				if os.Getenv("DETCOLL_LONG_TESTS") != "" {
					counts = append(counts, 300_000*w+1)
				}
				for _, count := range counts {
					t.Run(fmt.Sprintf("W=%d/%s/%v/%d", w, name, dt, count), func(t *testing.T) {
						checkCollectives(t, ctx, comms, ref, dt, count)
					})
				}
			}
			for r := range comms {
				comms[r].Close()
				ref[r].Close()
			}
		}
	}
}

func each(comms []*detcoll.Comm, fn func(c *detcoll.Comm) error) error {
	errs := eachOf(comms, func(_ int, c *detcoll.Comm) error { return fn(c) })
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// eachOf runs fn on every element concurrently and returns the errors by index.
func eachOf[T any](xs []T, fn func(i int, x T) error) []error {
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for i, x := range xs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i, x)
		}()
	}
	wg.Wait()
	return errs
}

// newComms makes a communicator over each transport.
func newComms(t *testing.T, ts []*Transport, opts ...detcoll.CommOption) []*detcoll.Comm {
	t.Helper()
	comms := make([]*detcoll.Comm, len(ts))
	for r := range comms {
		c, err := detcoll.New(ts[r], opts...)
		if err != nil {
			t.Fatal(err)
		}
		comms[r] = c
	}
	return comms
}

func checkCollectives(t *testing.T, ctx context.Context, comms, ref []*detcoll.Comm, dt dtype.DType, count int) {
	w := len(comms)
	sz := dt.Size()
	ins := make([][]byte, w)
	for r := range ins {
		ins[r] = make([]byte, count*sz)
		bench.FillInput(ins[r], dt, 7, r, 0)
	}
	want := make([]byte, count*sz)
	if err := reduce.Oracle(dt, reduce.Native, ins, want); err != nil {
		t.Fatal(err)
	}
	run := func(cs []*detcoll.Comm, fn func(c *detcoll.Comm, out []byte) error, outLen int) [][]byte {
		outs := make([][]byte, w)
		for r := range outs {
			outs[r] = make([]byte, outLen)
		}
		if err := each(cs, func(c *detcoll.Comm) error { return fn(c, outs[c.Rank()]) }); err != nil {
			t.Fatal(err)
		}
		return outs
	}
	for _, alg := range []detcoll.Algorithm{detcoll.GatherTree, detcoll.A2ATree} {
		outs := run(comms, func(c *detcoll.Comm, out []byte) error {
			return c.AllReduce(ctx, ins[c.Rank()], out, dt, detcoll.WithAlgorithm(alg))
		}, count*sz)
		for r, o := range outs {
			if !bytes.Equal(o, want) {
				t.Fatalf("AllReduce %v rank %d differs from the oracle", alg, r)
			}
		}
		outs = run(comms, func(c *detcoll.Comm, out []byte) error {
			copy(out, ins[c.Rank()])
			return c.AllReduce(ctx, out, out, dt, detcoll.WithAlgorithm(alg))
		}, count*sz)
		for r, o := range outs {
			if !bytes.Equal(o, want) {
				t.Fatalf("in-place AllReduce %v rank %d differs from the oracle", alg, r)
			}
		}
	}
	// Many forms: two lanes, the second a prefix of the first.
	lanes := func(b []byte) [][]byte { return [][]byte{b, b[:len(b)/sz/2*sz]} }
	gatherMany := func(c *detcoll.Comm, out []byte) error {
		s := lanes(ins[c.Rank()])
		n0 := w * len(s[0])
		return c.AllGatherMany(ctx, s, [][]byte{out[:n0], out[n0:]}, dt)
	}
	manyLen := w * (count*sz + count/2*sz)
	gm, gmRef := run(comms, gatherMany, manyLen), run(ref, gatherMany, manyLen)
	for r := range gm {
		if !bytes.Equal(gm[r], gmRef[r]) {
			t.Fatalf("AllGatherMany rank %d differs from the in-process result", r)
		}
	}
	gather := func(c *detcoll.Comm, out []byte) error { return c.AllGather(ctx, ins[c.Rank()], out, dt) }
	got, exp := run(comms, gather, w*count*sz), run(ref, gather, w*count*sz)
	for r := range got {
		if !bytes.Equal(got[r], exp[r]) || !bytes.Equal(got[r][r*count*sz:(r+1)*count*sz], ins[r]) {
			t.Fatalf("AllGather rank %d differs from the in-process result", r)
		}
	}
	// ReduceScatter of W*count elements: block r of the oracle over the
	// whole inputs.
	big := make([][]byte, w)
	for r := range big {
		big[r] = make([]byte, w*count*sz)
		bench.FillInput(big[r], dt, 9, r, 0)
	}
	full := make([]byte, w*count*sz)
	if err := reduce.Oracle(dt, reduce.Native, big, full); err != nil {
		t.Fatal(err)
	}
	for _, alg := range []detcoll.Algorithm{detcoll.GatherTree, detcoll.A2ATree} {
		outs := run(comms, func(c *detcoll.Comm, out []byte) error {
			return c.ReduceScatter(ctx, big[c.Rank()], out, dt, detcoll.WithAlgorithm(alg))
		}, count*sz)
		for r, o := range outs {
			if !bytes.Equal(o, full[r*count*sz:(r+1)*count*sz]) {
				t.Fatalf("ReduceScatter %v rank %d differs from the oracle", alg, r)
			}
		}
		rsMany := func(c *detcoll.Comm, out []byte) error {
			b := big[c.Rank()]
			half := count / 2 * w * sz
			return c.ReduceScatterMany(ctx, [][]byte{b, b[:half]}, [][]byte{out[:count*sz], out[count*sz:]}, dt, detcoll.WithAlgorithm(alg))
		}
		rl := count*sz + count/2*sz
		rm, rmRef := run(comms, rsMany, rl), run(ref, rsMany, rl)
		for r := range rm {
			if !bytes.Equal(rm[r], rmRef[r]) || !bytes.Equal(rm[r][:count*sz], full[r*count*sz:(r+1)*count*sz]) {
				t.Fatalf("ReduceScatterMany %v rank %d differs", alg, r)
			}
		}
	}
}

// TestCollectivesWideGroups: the window protocol for W = 6…16 (every
// collective against the oracle and the in-process transport) with small
// rings and 64 KiB window slots, so that pieces are used.
func TestCollectivesWideGroups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for w := 6; w <= 16; w++ {
		ts := connectGroup(t, store.NewMemory(), uniquePrefix("wide"), w, Options{RingBytes: minRingBytes, WindowBytes: minWindowBytes})
		comms := newComms(t, ts)
		ref, err := detcoll.NewInProc(w)
		if err != nil {
			t.Fatal(err)
		}
		for _, count := range []int{0, 1, w - 1, 257, 20_000} {
			t.Run(fmt.Sprintf("W=%d/%d", w, count), func(t *testing.T) {
				checkCollectives(t, ctx, comms, ref, dtype.BF16, count)
			})
		}
		for r := range comms {
			comms[r].Close()
			ref[r].Close()
		}
	}
}
