//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
)

// eachRank runs fn on every rank concurrently and returns the errors.
func eachRank(ts []*Transport, fn func(r int, tr *Transport) error) []error { return eachOf(ts, fn) }

// TestWindowPublishes: every rank sees every rank's block, of its own
// length, through many publications (the two slots reused in turn), with
// views of one publication held while the next is staged.
func TestWindowPublishes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, w := range []int{2, 3, 5} {
		ts := connectGroup(t, store.NewMemory(), uniquePrefix("win"), w, Options{WindowBytes: minWindowBytes})
		errs := eachRank(ts, func(r int, tr *Transport) error {
			if tr.WindowBytes() != minWindowBytes {
				return errors.New("window size " + strconv.Itoa(tr.WindowBytes()))
			}
			var held [][]byte
			for k := 0; k < 50; k++ {
				n := (r*7 + k*13) % 1000
				slot, err := tr.Stage(ctx, n)
				if err != nil {
					return err
				}
				copy(slot, pattern(n, r*1000+k))
				if held != nil {
					tr.Release() // the previous publication, after staging this one
				}
				views, err := tr.Publish(ctx, transport.Tag{Phase: 9, Seq: uint64(k)})
				if err != nil {
					return err
				}
				for p, v := range views {
					if m := (p*7 + k*13) % 1000; !bytes.Equal(v, pattern(m, p*1000+k)) {
						return errors.New("publication " + strconv.Itoa(k) + ": rank " + strconv.Itoa(p) + "'s block differs")
					}
				}
				held = views
			}
			tr.Release()
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("W=%d rank %d: %v", w, r, err)
			}
		}
		for _, tr := range ts {
			tr.Close()
		}
	}
}

// TestWindowTagMismatch: ranks publishing different tags both fail with a
// *transport.TagError that names the peer and carries the peer's tag.
func TestWindowTagMismatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("winmis"), 2, Options{})
	defer closeAll(ts)
	errs := eachRank(ts, func(r int, tr *Transport) error {
		if _, err := tr.Stage(ctx, 4); err != nil {
			return err
		}
		_, err := tr.Publish(ctx, transport.Tag{Phase: 2, Seq: 5, Sig: uint64(100 + r)})
		return err
	})
	for r, err := range errs {
		var te *transport.TagError
		var e *transport.Error
		if !errors.As(err, &te) || !errors.As(err, &e) || e.Peer != 1-r || te.Got.Sig != uint64(100+1-r) || te.Want.Sig != uint64(100+r) {
			t.Fatalf("rank %d: %v", r, err)
		}
		// The window is unusable from here on.
		if _, err := ts[r].Stage(ctx, 4); err == nil {
			t.Fatalf("rank %d: Stage after a failed Publish succeeded", r)
		}
	}
}

// TestWindowPeerAheadAfterPublishing: a peer that has published k and
// already sent the first message of its next step is not a mismatch for a
// rank still waiting in Publish of k (it saw the peer unpublished, then the
// message: the race CI caught as "message tag mismatch" in TestCHost), but
// a message from a peer that has not published k is.
func TestWindowPeerAheadAfterPublishing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("winahead"), 2, Options{})
	defer closeAll(ts)
	tag := transport.Tag{Phase: 2, Seq: 17, Sig: 7}
	errs := eachRank(ts, func(r int, tr *Transport) error {
		if _, err := tr.Stage(ctx, 4); err != nil {
			return err
		}
		_, err := tr.Publish(ctx, tag)
		tr.Release()
		return err
	})
	noErrors(t, "", errs)
	next := transport.Tag{Phase: 1, Seq: 18}
	if err := ts[1].Send(ctx, 0, next, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].messageWaiting(1, tag, 1); err != nil {
		t.Fatalf("peer published 1 and moved on: %v", err)
	}
	var te *transport.TagError
	if err := ts[0].messageWaiting(1, tag, 2); !errors.As(err, &te) || te.Got != next {
		t.Fatalf("peer sent a message before publishing 2: %v, want a TagError with %v", err, next)
	}
}

// TestWindowMisuse: sizes beyond the slot, Stage twice, Publish without
// Stage, too many unreleased publications and a group of one are errors.
func TestWindowMisuse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("winmisuse"), 2, Options{WindowBytes: minWindowBytes})
	defer closeAll(ts)
	tr := ts[0]
	if _, err := tr.Stage(ctx, minWindowBytes+1); !errors.Is(err, transport.ErrSizeMismatch) {
		t.Fatalf("oversized stage: %v", err)
	}
	if _, err := tr.Stage(ctx, -1); !errors.Is(err, transport.ErrSizeMismatch) {
		t.Fatalf("negative stage: %v", err)
	}
	if _, err := tr.Publish(ctx, transport.Tag{}); err == nil {
		t.Fatal("Publish without Stage succeeded")
	}
	if errs := eachRank(ts, func(r int, tr *Transport) error {
		if _, err := tr.Stage(ctx, 1); err != nil {
			return err
		}
		if _, err := tr.Stage(ctx, 1); err == nil {
			return errors.New("Stage twice succeeded")
		}
		if _, err := tr.Publish(ctx, transport.Tag{}); err != nil {
			return err
		}
		tr.Release()
		return nil
	}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	one, err := Connect(ctx, store.NewMemory(), uniquePrefix("winone"), 0, 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if _, err := one.Stage(ctx, 1); !errors.Is(err, errNoWindow) || one.WindowBytes() != 0 {
		t.Fatalf("group of one: %v", err)
	}
	// Two publications unreleased, then a third Stage.
	ts2 := connectGroup(t, store.NewMemory(), uniquePrefix("winhold"), 2, Options{})
	defer ts2[0].Close()
	defer ts2[1].Close()
	errs := eachRank(ts2, func(r int, tr *Transport) error {
		for k := 0; k < 2; k++ {
			if _, err := tr.Stage(ctx, 1); err != nil {
				return err
			}
			if _, err := tr.Publish(ctx, transport.Tag{Seq: uint64(k)}); err != nil {
				return err
			}
		}
		_, err := tr.Stage(ctx, 1)
		if err == nil {
			return errors.New("a third Stage with two publications unreleased succeeded")
		}
		tr.Release()
		tr.Release()
		return nil
	})
	noErrors(t, "", errs)
}

// TestWindowWaitsBounded: a peer that never publishes fails the wait with
// the context's error, naming that peer; a peer that closes fails it with
// ErrPeerClosed; and Close of this rank unblocks its own wait.
func TestWindowWaitsBounded(t *testing.T) {
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("winwait"), 3, Options{})
	defer closeAll(ts)
	defer ts[2].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	ts[0].Stage(ctx, 1)
	_, err := ts[0].Publish(ctx, transport.Tag{})
	var e *transport.Error
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &e) || e.Peer != 1 || time.Since(start) > 5*time.Second {
		t.Fatalf("silent peers: %v after %v", err, time.Since(start))
	}
	bg, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	done := make(chan error, 1)
	ts[1].Stage(bg, 1)
	go func() { _, err := ts[1].Publish(bg, transport.Tag{}); done <- err }()
	time.Sleep(20 * time.Millisecond)
	ts[2].Close()
	// Rank 0's publication carries the same (zero) tag, so only rank 2's
	// close can fail the wait.
	if err := <-done; !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("closed peer: %v", err)
	}
}

// TestCommUsesWindow: over shm the collectives publish through the window
// (and with WindowBytes < 0 they do not), and a mismatched collective over
// the window is ErrMismatch on every rank.
func TestCommUsesWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, opt := range []Options{{}, {WindowBytes: -1}} {
		ts := connectGroup(t, store.NewMemory(), uniquePrefix("commwin"), 3, opt)
		comms := newComms(t, ts, detcoll.WithTimeout(10*time.Second))
		if err := each(comms, func(c *detcoll.Comm) error {
			b := make([]byte, 4096)
			return c.AllReduce(ctx, b, b, dtype.FP32)
		}); err != nil {
			t.Fatal(err)
		}
		if used := ts[0].win.pub > 0; used != (opt.WindowBytes >= 0) {
			t.Fatalf("options %+v: window used = %v", opt, used)
		}
		// Rank 2 reduces fp16 of the same byte size: a mismatch.
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dt := dtype.FP32
				b := make([]byte, 4096)
				c.AllReduce(ctx, b, b, dt) // agreed once already
				if r == 2 {
					dt = dtype.FP16
				}
				errs[r] = c.AllReduce(ctx, b, b, dt)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if !errors.Is(err, detcoll.ErrMismatch) {
				t.Fatalf("options %+v rank %d: %v", opt, r, err)
			}
		}
		for _, c := range comms {
			c.Close()
		}
	}
}

// TestCloseWithViewsHeld: Close while this rank still holds window views
// does not hang; it leaves the mapping in place (the views stay readable)
// and says so.
func TestCloseWithViewsHeld(t *testing.T) {
	old := closeWait
	closeWait = 50 * time.Millisecond
	defer func() { closeWait = old }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("winheld"), 2, Options{})
	var views [][]byte
	errs := eachRank(ts, func(r int, tr *Transport) error {
		slot, err := tr.Stage(ctx, 3)
		if err != nil {
			return err
		}
		copy(slot, "abc")
		v, err := tr.Publish(ctx, transport.Tag{})
		if r == 0 {
			views = v
		} else {
			tr.Release()
		}
		return err
	})
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	ts[1].Close()
	start := time.Now()
	ts[0].Close()
	if time.Since(start) > 5*time.Second || !ts[0].leaked.Load() || ts[1].leaked.Load() {
		t.Fatalf("Close with views held: %v, leaked %v/%v", time.Since(start), ts[0].leaked.Load(), ts[1].leaked.Load())
	}
	if string(views[1]) != "abc" {
		t.Fatalf("held view reads %q", views[1])
	}
}

// TestRotate: publications move along a slot a page at a time, start at 0
// again when the next would pass the span, and always fit in it.
func TestRotate(t *testing.T) {
	const span = 16 * pageSize
	cur := 0
	var got []int
	for _, n := range []int{1, pageSize, pageSize + 1, 0, 5 * pageSize, 8 * pageSize, span, 3} {
		at := rotate(&cur, n, span)
		if at%rotateAlign != 0 || at+n > span {
			t.Fatalf("%d bytes at %d: not aligned or past the %d-byte span", n, at, span)
		}
		got = append(got, at)
	}
	want := []int{0, 1 * pageSize, 2 * pageSize, 4 * pageSize, 4 * pageSize, 0, 0, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("offsets %v, want %v", got, want)
	}
	if cur != pageSize {
		t.Fatalf("cursor %d after a 3-byte publication at 0, want %d", cur, pageSize)
	}
}

// TestWindowRotatesOffsets: successive publications of one slot start at
// different offsets (the cache reason is in window_linux.go), and every rank's
// views follow them.
func TestWindowRotatesOffsets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("winrot"), 2, Options{WindowBytes: 4 * minWindowBytes})
	defer closeAll(ts)
	const n = 16 << 10
	errs := eachRank(ts, func(r int, tr *Transport) error {
		starts := map[uintptr]bool{}
		for k := 0; k < 2*(4*minWindowBytes/n); k++ {
			slot, err := tr.Stage(ctx, n)
			if err != nil {
				return err
			}
			copy(slot, pattern(n, r*100+k))
			views, err := tr.Publish(ctx, transport.Tag{Seq: uint64(k)})
			if err != nil {
				return err
			}
			for p, v := range views {
				if !bytes.Equal(v, pattern(n, p*100+k)) {
					return errors.New("publication " + strconv.Itoa(k) + ": rank " + strconv.Itoa(p) + "'s block differs")
				}
			}
			starts[uintptr(unsafe.Pointer(unsafe.SliceData(views[1-r])))] = true
			tr.Release()
		}
		if len(starts) != 2*(4*minWindowBytes/n) {
			return errors.New("the peer's blocks started at " + strconv.Itoa(len(starts)) + " addresses, want one per publication")
		}
		return nil
	})
	noErrors(t, "", errs)
}

// TestWindowBadOffset: a header whose offset would put the block past the
// slot fails every rank's Publish with ErrCorrupt, instead of handing out a
// view of another rank's memory.
func TestWindowBadOffset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("winbad"), 2, Options{WindowBytes: minWindowBytes})
	defer closeAll(ts)
	errs := eachRank(ts, func(r int, tr *Transport) error {
		if _, err := tr.Stage(ctx, 64); err != nil {
			return err
		}
		if r == 1 {
			tr.win.at = minWindowBytes - 32 // what a corrupt or foreign header says
		}
		_, err := tr.Publish(ctx, transport.Tag{})
		if !errors.Is(err, transport.ErrCorrupt) {
			return errors.New("Publish: " + fmt.Sprint(err) + ", want ErrCorrupt")
		}
		return nil
	})
	noErrors(t, "", errs)
}

// TestBarrierUsesWindow: over shm a Barrier is one empty publication (no
// message per peer), and a Barrier on two ranks against an AllReduce on the
// third, both agreed on before, is ErrMismatch on every rank.
func TestBarrierUsesWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("barwin"), 3, Options{})
	comms := newComms(t, ts, detcoll.WithTimeout(10*time.Second))
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	b := func() []byte { return make([]byte, 4096) }
	if err := each(comms, func(c *detcoll.Comm) error {
		x := b()
		if err := c.AllReduce(ctx, x, x, dtype.FP32); err != nil {
			return err
		}
		return c.Barrier(ctx) // agrees on Barrier's signature
	}); err != nil {
		t.Fatal(err)
	}
	before := ts[0].win.pub
	if err := each(comms, func(c *detcoll.Comm) error { return c.Barrier(ctx) }); err != nil {
		t.Fatal(err)
	}
	if got := ts[0].win.pub - before; got != 1 {
		t.Fatalf("a Barrier made %d publications, want 1", got)
	}
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r == 2 {
				x := b()
				errs[r] = c.AllReduce(ctx, x, x, dtype.FP32)
				return
			}
			errs[r] = c.Barrier(ctx)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, detcoll.ErrMismatch) {
			t.Errorf("rank %d: %v, want ErrMismatch", r, err)
		}
	}
}

// TestBellWakesSleeper: a rank asleep in Publish (counted in offBellWts)
// is woken by its peer's publication, not by its sleep's timeout (a lost
// wake-up costs up to maxSleep per call and fails no other test). A
// timeout can end a sleep that began just before the peer published, so
// the wake-up is tried a few times: a publication that never rings for a
// sleeper fails every try.
func TestBellWakesSleeper(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("bell"), 2, Options{WindowBytes: minWindowBytes})
	defer closeAll(ts)
	waiters := ts[0].seg.u32(offBellWts)

	publish := func(tr *Transport, k int) error {
		if _, err := tr.Stage(ctx, 8); err != nil {
			return err
		}
		if _, err := tr.Publish(ctx, transport.Tag{Phase: 3, Seq: uint64(k)}); err != nil {
			return err
		}
		tr.Release()
		return nil
	}
	woken := false
	for k := 0; k < 5 && !woken; k++ {
		done := make(chan error, 1)
		go func() { done <- publish(ts[1], k) }()
		for waiters.Load() == 0 { // rank 1 has spun, yielded and gone to sleep
			if ctx.Err() != nil {
				t.Fatal("rank 1 never slept on the bell")
			}
			time.Sleep(50 * time.Microsecond)
		}
		wakes := winWakes.Load()
		if err := publish(ts[0], k); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		woken = winWakes.Load() > wakes
	}
	if !woken {
		t.Fatal("in 5 tries no sleeping rank was woken by its peer's publication (each slept out its timeout)")
	}
}

// TestWindowStageWaitsForHeldViews: a peer's header carries the releases it
// had made when it published, and Stage trusts it only as far as it goes.
// Rank 1 publishes 1 and 2 while holding the views of 1 (its header of 2
// says no release), so rank 0's Stage of 3, which would overwrite the slot
// of 1, must wait for rank 1's counter and go on once rank 1 releases 1.
// In lockstep the headers alone suffice: rank 0 has seen rank 1's releases
// without a look at its counter.
func TestWindowStageWaitsForHeldViews(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("winheld"), 2, Options{WindowBytes: minWindowBytes})
	defer closeAll(ts)
	publish := func(tr *Transport, k int) error {
		if _, err := tr.Stage(ctx, 8); err != nil {
			return err
		}
		_, err := tr.Publish(ctx, transport.Tag{Seq: uint64(k)})
		return err
	}
	released := make(chan struct{})
	staged := make(chan error, 1)
	errs := eachRank(ts, func(r int, tr *Transport) error {
		for k := 1; k <= 2; k++ {
			if err := publish(tr, k); err != nil {
				return err
			}
			if r == 0 {
				tr.Release()
			}
		}
		if r == 1 {
			if got := tr.win.relSeen[0]; got != 1 {
				return fmt.Errorf("rank 0's header of publication 2 gave %d releases, want 1", got)
			}
			short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
			defer stop()
			select {
			case err := <-staged:
				return fmt.Errorf("rank 0 staged publication 3 while rank 1 held the views of 1 (%v)", err)
			case <-short.Done():
			}
			tr.Release()
			close(released)
			if err := <-staged; err != nil {
				return fmt.Errorf("rank 0's Stage after the release: %v", err)
			}
			tr.Release()
			return nil
		}
		_, err := tr.Stage(ctx, 8)
		staged <- err
		select { // rank 1 releases after its checks, or has failed
		case <-released:
		case <-time.After(5 * time.Second):
		}
		return nil
	})
	noErrors(t, "", errs)
}

// TestSentBeforeCloseDelivered: what a peer sends or publishes right
// before it closes is delivered, even when the waiter looks at the peer's
// closed flag only after both (waitHook puts the peer's send or
// publication and its Close right before the waiter's check), in the
// yielding waits of an oversubscribed group and in the sleeping ones.
// Before the look after the check, the waiter failed with ErrPeerClosed
// (capi's TestCHost in CI).
func TestSentBeforeCloseDelivered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	oldYield := yieldFor
	defer func() { yieldFor = oldYield; waitHook.Store(nil) }()
	msg := []byte("sent before the close")
	tag := transport.Tag{Phase: 7, Seq: 3}
	for _, tc := range []struct {
		name string
		peer func(tr *Transport) error // the peer's last act before Close
		wait func(tr *Transport) ([]byte, error)
	}{
		{"message",
			func(tr *Transport) error { return tr.Send(ctx, 0, tag, msg) },
			func(tr *Transport) ([]byte, error) {
				buf := make([]byte, len(msg))
				return buf, tr.Recv(ctx, 1, tag, buf)
			}},
		{"publication",
			func(tr *Transport) error {
				slot, err := tr.Stage(ctx, len(msg))
				if err != nil {
					return err
				}
				copy(slot, msg)
				_, err = tr.Publish(ctx, tag)
				tr.Release()
				return err
			},
			func(tr *Transport) ([]byte, error) {
				if _, err := tr.Stage(ctx, 0); err != nil {
					return nil, err
				}
				views, err := tr.Publish(ctx, tag)
				if err != nil {
					return nil, err
				}
				defer tr.Release()
				return bytes.Clone(views[1]), nil
			}},
	} {
		for _, yield := range []int64{int64(time.Second), 0} {
			ts := connectGroup(t, store.NewMemory(), uniquePrefix("lastact"), 2, Options{WindowBytes: minWindowBytes})
			ts[0].spin = 0 // no busy spin: the waits that check the flag
			yieldFor = yield
			var fired atomic.Bool
			var peerErr error
			hook := func() {
				if fired.CompareAndSwap(false, true) {
					peerErr = tc.peer(ts[1])
					ts[1].Close()
				}
			}
			waitHook.Store(&hook)
			got, err := tc.wait(ts[0])
			waitHook.Store(nil)
			switch {
			case !fired.Load():
				t.Errorf("%s, yield %v: the wait never checked the peer", tc.name, time.Duration(yield))
			case peerErr != nil:
				t.Errorf("%s, yield %v: the peer: %v", tc.name, time.Duration(yield), peerErr)
			case err != nil:
				t.Errorf("%s, yield %v: %v, want what the peer sent before it closed", tc.name, time.Duration(yield), err)
			case !bytes.Equal(got, msg):
				t.Errorf("%s, yield %v: got %q, want %q", tc.name, time.Duration(yield), got, msg)
			}
			closeAll(ts)
		}
	}
}
