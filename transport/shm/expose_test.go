//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
)

// exposeAll runs one exposure on tr: Expose buf, Exposed, read every rank's
// whole buffer (lengths as exposed), Unexpose. It returns what it read.
func exposeAll(ctx context.Context, tr *Transport, tag transport.Tag, buf []byte) ([][]byte, error) {
	if err := tr.Expose(ctx, tag, buf); err != nil {
		return nil, err
	}
	lens, err := tr.Exposed(ctx)
	if err != nil {
		return nil, err
	}
	got := make([][]byte, len(lens))
	for p, n := range lens {
		got[p] = make([]byte, n)
		if err == nil {
			err = tr.ReadExposed(p, 0, got[p])
		}
	}
	if uerr := tr.Unexpose(ctx); err == nil {
		err = uerr
	}
	return got, err
}

// TestExposeReadsPeers: every rank reads every rank's exposed buffer (of
// its own length, empty included) whole and in parts, through many
// exposures with window publications between them.
func TestExposeReadsPeers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const w = 3
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("expose"), w, Options{})
	defer closeAll(ts)
	allowExpose(ts)
	if !ts[0].readsAll() {
		t.Skip("this kernel refuses process_vm_readv on this process (ptrace scope or seccomp): nothing to expose")
	}
	lenOf := func(r, i int) int { return []int{0, 1, 4099, 1 << 20}[(r+i)%4] }
	errs := eachRank(ts, func(r int, tr *Transport) error {
		for i := 0; i < 6; i++ {
			mine := pattern(lenOf(r, i), 10*i+r)
			got, err := exposeAll(ctx, tr, transport.Tag{Phase: 7, Seq: uint64(i)}, mine)
			if err != nil {
				return fmt.Errorf("exposure %d: %w", i, err)
			}
			for p := range w {
				if want := pattern(lenOf(p, i), 10*i+p); !bytes.Equal(got[p], want) {
					return fmt.Errorf("exposure %d: rank %d's buffer read wrong (%d bytes, want %d)", i, p, len(got[p]), len(want))
				}
			}
			// The window still works between exposures.
			if _, err := tr.Stage(ctx, 8); err != nil {
				return err
			}
			if _, err := tr.Publish(ctx, transport.Tag{Phase: 8, Seq: uint64(i)}); err != nil {
				return err
			}
			tr.Release()
		}
		// Parts: the last 5 bytes of the next rank's buffer, at an offset.
		mine := pattern(4096, r)
		if err := tr.Expose(ctx, transport.Tag{Phase: 9}, mine); err != nil {
			return err
		}
		if _, err := tr.Exposed(ctx); err != nil {
			return err
		}
		p := (r + 1) % w
		part := make([]byte, 5)
		if err := tr.ReadExposed(p, 4091, part); err != nil {
			return err
		}
		if !bytes.Equal(part, pattern(4096, p)[4091:]) {
			return errors.New("a part read wrong")
		}
		return tr.Unexpose(ctx)
	})
	noErrors(t, "", errs)
}

// TestExposeFallbackAgreed: when one rank cannot read one peer (or nobody
// reads anybody, or one rank has fewer CPUs than the group has ranks),
// every rank's Exposed fails with ErrNoExpose for the same call, and the
// window goes on working.
func TestExposeFallbackAgreed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for name, c := range map[string]struct {
		opt    Options
		refuse func(ts []*Transport)
	}{
		"unreadable": {Options{}, func(ts []*Transport) { ts[2].seg.mem[ts[2].seg.rankOff(2)+rbCanRead+0] = 0 }},
		"nodirect":   {Options{DirectBytes: -1}, func([]*Transport) {}},
		"fewcpus":    {Options{}, func(ts []*Transport) { ts[1].cpus = 2 }},
	} {
		ts := connectGroup(t, store.NewMemory(), uniquePrefix("exposefb"), 3, c.opt)
		allowExpose(ts)
		c.refuse(ts)
		errs := eachRank(ts, func(r int, tr *Transport) error {
			if _, err := exposeAll(ctx, tr, transport.Tag{Phase: 7}, pattern(100, r)); !errors.Is(err, transport.ErrNoExpose) {
				return fmt.Errorf("exposure: %v, want ErrNoExpose", err)
			}
			if _, err := tr.Stage(ctx, 8); err != nil {
				return err
			}
			if _, err := tr.Publish(ctx, transport.Tag{Phase: 8}); err != nil {
				return err
			}
			tr.Release()
			return nil
		})
		noErrors(t, name+", ", errs)
		closeAll(ts)
	}
}

// TestExposeWithdrawn: an owner whose Unexpose gives up (its context)
// withdraws its buffer, and a peer's later copy from it fails instead of
// returning bytes the owner may be overwriting; a peer that closes fails an
// owner's wait with ErrPeerClosed.
func TestExposeWithdrawn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("exposewd"), 2, Options{})
	defer closeAll(ts)
	allowExpose(ts)
	if !ts[0].readsAll() {
		t.Skip("this kernel refuses process_vm_readv on this process: nothing to expose")
	}
	bufs := [][]byte{pattern(64, 0), pattern(64, 1)}
	if errs := eachRank(ts, func(r int, tr *Transport) error {
		if err := tr.Expose(ctx, transport.Tag{Phase: 7}, bufs[r]); err != nil {
			return err
		}
		_, err := tr.Exposed(ctx)
		return err
	}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	start := time.Now()
	err := ts[0].Unexpose(short) // rank 1 has not read: the wait runs out
	var te *transport.Error
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &te) || te.Peer != 1 || time.Since(start) > 5*time.Second {
		t.Fatalf("owner's Unexpose with a silent peer: %v", err)
	}
	if err := ts[1].ReadExposed(0, 0, make([]byte, 64)); !errors.Is(err, ErrBroken) {
		t.Fatalf("copy from a withdrawn buffer: %v, want ErrBroken", err)
	}
	if err := ts[1].Unexpose(ctx); err == nil {
		t.Fatal("Unexpose after a failed copy succeeded")
	}

	// A peer that closes while the owner waits for its release (holding
	// its exposure: its Close gives up waiting for it after closeWait).
	old := closeWait
	closeWait = 50 * time.Millisecond
	defer func() { closeWait = old }()
	ts2 := connectGroup(t, store.NewMemory(), uniquePrefix("exposecl"), 2, Options{})
	defer closeAll(ts2)
	allowExpose(ts2)
	if errs := eachRank(ts2, func(r int, tr *Transport) error {
		if err := tr.Expose(ctx, transport.Tag{Phase: 7}, bufs[r]); err != nil {
			return err
		}
		_, err := tr.Exposed(ctx)
		return err
	}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	done := make(chan error, 1)
	go func() { done <- ts2[0].Unexpose(ctx) }()
	time.Sleep(20 * time.Millisecond)
	ts2[1].Close()
	if err := <-done; !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("owner's Unexpose, peer closed: %v", err)
	}
}

// TestExposeMisuse: calls out of order and reads outside a buffer are
// errors, not panics.
func TestExposeMisuse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("exposemis"), 2, Options{})
	defer closeAll(ts)
	tr := ts[0]
	if _, err := tr.Exposed(ctx); err == nil {
		t.Fatal("Exposed without Expose succeeded")
	}
	if err := tr.ReadExposed(1, 0, make([]byte, 1)); err == nil {
		t.Fatal("ReadExposed without Expose succeeded")
	}
	if err := tr.Unexpose(ctx); err == nil {
		t.Fatal("Unexpose without Expose succeeded")
	}
	errs := eachRank(ts, func(r int, tr *Transport) error {
		if err := tr.Expose(ctx, transport.Tag{Phase: 7}, make([]byte, 16)); err != nil {
			return err
		}
		if err := tr.ReadExposed(1-r, 0, make([]byte, 1)); err == nil {
			return errors.New("ReadExposed before Exposed succeeded")
		}
		if err := tr.Expose(ctx, transport.Tag{Phase: 7}, nil); err == nil {
			return errors.New("Expose twice succeeded")
		}
		lens, err := tr.Exposed(ctx)
		if errors.Is(err, transport.ErrNoExpose) {
			return nil // nothing more to check on a kernel without CMA
		}
		if err != nil {
			return err
		}
		if lens[1-r] != 16 {
			return fmt.Errorf("peer's length %d, want 16", lens[1-r])
		}
		for _, c := range []struct{ p, off, n int }{{1 - r, 10, 7}, {1 - r, -1, 1}, {1 - r, 17, 0}, {2, 0, 1}, {-1, 0, 1}} {
			if err := tr.ReadExposed(c.p, c.off, make([]byte, c.n)); err == nil {
				return fmt.Errorf("ReadExposed(%d, %d, %d bytes) succeeded", c.p, c.off, c.n)
			}
		}
		return tr.Unexpose(ctx) // a refused range does not end the exposure
	})
	noErrors(t, "", errs)
}

// TestExposeNeedsReleasedWindow: Expose with a publication still
// unreleased is an error.
func TestExposeNeedsReleasedWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("exposehold"), 2, Options{})
	defer closeAll(ts)
	errs := eachRank(ts, func(r int, tr *Transport) error {
		if _, err := tr.Stage(ctx, 1); err != nil {
			return err
		}
		if _, err := tr.Publish(ctx, transport.Tag{}); err != nil {
			return err
		}
		err := tr.Expose(ctx, transport.Tag{Phase: 7}, make([]byte, 8))
		tr.Release()
		if err == nil {
			return errors.New("Expose with a publication unreleased succeeded")
		}
		return nil
	})
	noErrors(t, "", errs)
}

// allowExpose lets the group expose on this machine whatever its CPUs
// (willExpose declines when the ranks outnumber them).
func allowExpose(ts []*Transport) {
	for _, tr := range ts {
		tr.cpus = max(tr.cpus, len(ts))
		tr.exposeOK = true
	}
}

// noErrors fails the test with the first rank's error, if any.
func noErrors(t *testing.T, what string, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%srank %d: %v", what, r, err)
		}
	}
}

func closeAll(ts []*Transport) {
	for _, tr := range ts {
		tr.Close()
	}
}

// TestCommAllGatherExposed: over shm an AllGather of large blocks reads the
// peers' send buffers (exposures), in place and not, and gets every block
// right; when one rank cannot read a peer, every rank falls back to the
// window on the same call and stays there; a rank running another
// collective is ErrMismatch on every rank; a rank that never comes fails
// the others within their timeout.
func TestCommAllGatherExposed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const w, n = 3, 256 << 10
	want := make([]byte, 0, w*n)
	for r := range w {
		want = append(want, pattern(n, r)...)
	}
	gather := func(comms []*detcoll.Comm, inPlace bool) []error {
		return eachOf(comms, func(r int, c *detcoll.Comm) error {
			recv := make([]byte, w*n)
			send := pattern(n, r)
			if inPlace {
				copy(recv[r*n:], send)
				send = recv[r*n : (r+1)*n]
			}
			if err := c.AllGather(ctx, send, recv, dtype.FP32); err != nil {
				return err
			}
			if !bytes.Equal(recv, want) {
				return errors.New("gathered bytes differ")
			}
			return nil
		})
	}
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("commexp"), w, Options{})
	allowExpose(ts)
	comms := newComms(t, ts, detcoll.WithTimeout(10*time.Second))
	readable := ts[0].readsAll()
	for _, inPlace := range []bool{false, true} {
		noErrors(t, fmt.Sprintf("in place %v, ", inPlace), gather(comms, inPlace))
	}
	if got := ts[0].exp.count; readable && got != 2 {
		t.Fatalf("%d exposures for two AllGathers of %d bytes per rank, want 2", got, n)
	}

	// Rank 2 runs AllReduce of the same bytes: a mismatch on every rank.
	errs := eachOf(comms, func(r int, c *detcoll.Comm) error {
		b := pattern(n, r)
		if r == 2 {
			return c.AllReduce(ctx, b, make([]byte, n), dtype.FP32)
		}
		return c.AllGather(ctx, b, make([]byte, w*n), dtype.FP32)
	})
	for r, err := range errs {
		if !errors.Is(err, detcoll.ErrMismatch) {
			t.Fatalf("mismatch, rank %d: %v", r, err)
		}
	}
	for _, c := range comms {
		c.Close()
	}

	// Rank 2 cannot read rank 0: all fall back, on the same call, for good.
	ts = connectGroup(t, store.NewMemory(), uniquePrefix("commexpfb"), w, Options{})
	allowExpose(ts)
	ts[2].seg.mem[ts[2].seg.rankOff(2)+rbCanRead+0] = 0
	comms = newComms(t, ts, detcoll.WithTimeout(10*time.Second))
	for call := range 2 {
		pubs := ts[1].win.pub
		noErrors(t, fmt.Sprintf("fallback call %d, ", call), gather(comms, false))
		// The first call publishes the descriptors and then the blocks;
		// the second only the blocks.
		if got, want := ts[1].win.pub-pubs, uint64(2-call); ts[1].exp.count != 0 || (readable && got != want) {
			t.Fatalf("fallback call %d: %d exposures, %d publications (want %d)", call, ts[1].exp.count, got, want)
		}
	}

	for _, c := range comms {
		c.Close()
	}

	// After one call together, rank 2 stops: ranks 0 and 1, waiting for its
	// exposure, fail within their timeout (the calls carry no deadline of
	// their own).
	ts = connectGroup(t, store.NewMemory(), uniquePrefix("commexpabs"), w, Options{})
	allowExpose(ts)
	comms = newComms(t, ts, detcoll.WithTimeout(300*time.Millisecond))
	noErrors(t, "before the stop, ", gather(comms, false))
	start := time.Now()
	errs = eachOf(comms[:2], func(r int, c *detcoll.Comm) error {
		return c.AllGather(context.Background(), pattern(n, r), make([]byte, w*n), dtype.FP32)
	})
	for r, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
			t.Fatalf("stopped peer, rank %d: %v after %v", r, err, time.Since(start))
		}
		t.Logf("stopped peer, rank %d: %v", r, err)
	}
	for _, c := range comms {
		c.Close()
	}
}

// TestCommAllReduceExposed: at W = 2 an AllReduce above the bound reads
// the peer's buffers and gives the in-process transport's bytes, for both
// algorithms, in place and not: gather_tree reads the whole input (one
// exposure) unless in place, where it goes through the window (the peer
// may still read what the rank would overwrite); a2a_tree reads shards (two
// exposures) or, on a host of few CPUs and not in place, the whole input.
func TestCommAllReduceExposed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const w, n = 2, 600_000 // bytes per rank: pieces of 256 KiB and a rest
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("commexpar"), w, Options{})
	allowExpose(ts)
	comms := newComms(t, ts, detcoll.WithTimeout(10*time.Second))
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ref, err := detcoll.NewInProc(w)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range ref {
			c.Close()
		}
	}()
	ins := make([][]byte, w)
	for r := range ins {
		ins[r] = make([]byte, n)
		bench.FillInput(ins[r], dtype.FP32, 3, r, 0)
	}
	want := make([][]byte, w)
	if errs := eachOf(ref, func(r int, c *detcoll.Comm) error {
		want[r] = make([]byte, n)
		return c.AllReduce(ctx, ins[r], want[r], dtype.FP32)
	}); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	for _, alg := range []detcoll.Algorithm{detcoll.GatherTree, detcoll.A2ATree} {
		for _, inPlace := range []bool{false, true} {
			before := ts[0].exp.count
			errs := eachOf(comms, func(r int, c *detcoll.Comm) error {
				send, recv := ins[r], make([]byte, n)
				if inPlace {
					send = append([]byte(nil), ins[r]...)
					recv = send
				}
				if err := c.AllReduce(ctx, send, recv, dtype.FP32, detcoll.WithAlgorithm(alg)); err != nil {
					return err
				}
				if !bytes.Equal(recv, want[r]) {
					return errors.New("reduced bytes differ from the in-process transport's")
				}
				return nil
			})
			noErrors(t, fmt.Sprintf("%v in place %v, ", alg, inPlace), errs)
			got := ts[0].exp.count - before
			var ok bool
			switch {
			case alg == detcoll.GatherTree && !inPlace:
				ok = got == 1 // the whole input
			case alg == detcoll.GatherTree:
				ok = got == 0 // in place: the window
			case !inPlace:
				ok = got == 1 || got == 2 // the whole input or the shards, by the host's CPUs
			default:
				ok = got == 2 // the shards
			}
			if ts[0].readsAll() && !ok {
				t.Fatalf("%v in place %v: %d exposures", alg, inPlace, got)
			}
		}
	}
}
