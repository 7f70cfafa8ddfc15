package tcp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
)

// progressOn makes every loopback connection of the test use the progress
// loop (inlineAll), whatever GOMAXPROCS the test runs with.
func progressOn(t *testing.T) {
	saved := inlineAllFor
	inlineAllFor = func(*net.TCPConn) bool { return true }
	t.Cleanup(func() { inlineAllFor = saved })
}

// TestProgressHandoff: a peer that starts its step after the poll budget
// makes the loop hand the rest to the blocking path: the send the 16 KiB
// send buffer cut short goes to a goroutine, the receive waits in readRest.
// Both ranks still get every byte.
func TestProgressHandoff(t *testing.T) {
	progressOn(t)
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("handoff"), 2, Options{Poll: 100 * time.Microsecond, WriteBuffer: 16 << 10})
	defer closeAll(ts)
	if !ts[0].progressAll || !ts[1].progressAll {
		t.Fatal("the progress loop is off")
	}
	const n = 1 << 20
	before := progressHandoffs.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := [2][]byte{make([]byte, n), make([]byte, n)}
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			if r == 1 {
				time.Sleep(30 * time.Millisecond) // 300 budgets late
			}
			ts[r].Exchange(ctx, tg(3),
				func(int) ([]byte, bool) { return pattern(n, r), true },
				func(int) ([]byte, bool) { return got[r], true },
				func(err error) { errs <- err })
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for r := range 2 {
		if !bytes.Equal(got[r], pattern(n, 1-r)) {
			t.Fatalf("rank %d: payload differs", r)
		}
	}
	if progressHandoffs.Load() == before {
		t.Fatal("no loop handed its rest to the blocking path: the late peer did not test it")
	}
	// The streams stay in step for the next step.
	allToAll(t, ts, tg(4), func(int, int) int { return 4096 })
}

// TestProgressResumesMidFrame: a frame that stops in the middle (of its
// header or its payload) for longer than the budget is finished by
// readRest from where the loop left it, for each kind of frame: without a
// payload checksum, with one (checked once the payload is whole), and with
// several chunks (which the loop leaves to readRest after the header). A
// corrupt one-chunk payload cut in the middle still fails the checksum.
func TestProgressResumesMidFrame(t *testing.T) {
	progressOn(t)
	const n = 300 << 10
	payload := pattern(n, 8)
	noCRC := func() []byte {
		var h [frameHeaderLen]byte
		encodeFrameHeader(&h, frameHeader{tag: tg(5), length: n, flags: flagNoPayloadCRC})
		return append(h[:], payload...)
	}()
	corrupt := chunkedFrame(5, payload, 20, 0)
	cases := []struct {
		name    string
		wire    []byte
		cut     int
		handoff bool // the loop hands the frame over (a multi-chunk frame is readRest's anyway)
		want    error
	}{
		{"no checksum, cut in the payload", noCRC, frameHeaderLen + n/2, true, nil},
		{"no checksum, cut in the header", noCRC, 20, true, nil},
		{"one chunk, cut in the payload", chunkedFrame(5, payload, 20, -1), frameHeaderLen + n/3, true, nil},
		{"several chunks, cut in the payload", chunkedFrame(5, payload, 12, -1), frameHeaderLen + n/2, false, nil},
		{"one corrupt chunk, cut in the payload", corrupt, frameHeaderLen + n/2, true, transport.ErrCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, raw := rawPeer(t, Options{Poll: 100 * time.Microsecond})
			if !tr.progressAll {
				t.Fatal("the progress loop is off")
			}
			before := progressHandoffs.Load()
			go func() {
				raw.Write(tc.wire[:tc.cut])
				time.Sleep(30 * time.Millisecond)
				raw.Write(tc.wire[tc.cut:])
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			buf := make([]byte, n)
			err := recvOne(ctx, tr, "Exchange", tg(5), buf)
			switch {
			case tc.want != nil:
				if !errors.Is(err, tc.want) {
					t.Fatalf("want %v, got %v", tc.want, err)
				}
				return
			case err != nil:
				t.Fatal(err)
			case !bytes.Equal(buf, payload):
				t.Fatal("payload differs")
			}
			if tc.handoff && progressHandoffs.Load() == before {
				t.Fatal("the loop did not hand the cut frame to readRest")
			}
		})
	}
}

// TestProgressContext: a peer that never sends ends the loop's exchange at
// the context's deadline, with the context's error, and the stream stays
// usable (nothing of the frame had arrived).
func TestProgressContext(t *testing.T) {
	progressOn(t)
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("progctx"), 2, Options{})
	defer closeAll(ts)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := recvOne(ctx, ts[0], "Exchange", tg(6), make([]byte, 10))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrBroken) {
		t.Fatalf("want a plain DeadlineExceeded, got %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the deadline took %v to end the exchange", d)
	}
	exchange(t, ts[1], ts[0], 6, pattern(10, 1))
}
