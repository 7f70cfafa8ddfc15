package bench

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/store"
)

// The raw all-to-all measures and returns a positive rate on every rank.
func TestRawAllToAll(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	const w = 3
	rates := make([]float64, w)
	errs := make([]error, w)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for r := 0; r < w; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rates[r], errs[r] = RawAllToAll(ctx, st, "t", r, w, 1<<20, RawOptions{})
		}(r)
	}
	wg.Wait()
	for r := range rates {
		if errs[r] != nil || !(rates[r] > 0) {
			t.Fatalf("rank %d: %v, rate %g", r, errs[r], rates[r])
		}
	}
}

// A rank that stops once connected (as under SIGSTOP) makes every other
// rank fail within the deadline, in the transfer, not hang.
func TestRawAllToAllStoppedPeer(t *testing.T) {
	for _, w := range []int{2, 3} {
		st := store.NewMemory()
		release := make(chan struct{})
		errs := make([]error, w)
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		for r := 0; r < w; r++ {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				opt := RawOptions{}
				if r == 1 {
					opt.OnConnected = func() { <-release }
				}
				_, errs[r] = RawAllToAll(ctx, st, "t", r, w, 4<<20, opt)
			}(r)
		}
		done := make(chan struct{})
		go func() {
			for r := 0; r < w; r++ {
				if r == 1 {
					continue
				}
			}
			close(done)
		}()
		time.Sleep(1500 * time.Millisecond)
		close(release)
		wg.Wait()
		cancel()
		st.Close()
		for r := 0; r < w; r++ {
			if r == 1 {
				continue
			}
			if !errors.Is(errs[r], context.DeadlineExceeded) {
				t.Fatalf("W=%d rank %d: %v, want a deadline error", w, r, errs[r])
			}
			// It names the peer it waited on, as launch.FailureOf reads it.
			var pe *rawPeerError
			if !errors.As(errs[r], &pe) || pe.Rank != r || pe.Peer != 1 || !strings.Contains(errs[r].Error(), "transfer with rank 1") {
				t.Fatalf("W=%d rank %d: %v, want it to name rank 1", w, r, errs[r])
			}
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("W=%d: took %v", w, el)
		}
	}
}
