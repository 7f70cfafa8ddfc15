package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/detcoll/detcoll/store"
)

// Data that comes within the budget is read without parking; data that
// comes later after one park; then EOF, a deadline and a zero-length read.
func TestPollReader(t *testing.T) {
	w, c := rawPair(t)
	r := newPollReader(c, time.Second)
	if _, ok := r.(*pollReader); !ok {
		t.Fatalf("newPollReader gave %T, want *pollReader", r)
	}
	buf := make([]byte, 8)
	send := func(after time.Duration, b []byte) {
		go func() {
			time.Sleep(after)
			w.Write(b)
		}()
	}

	parks := pollParks.Load()
	send(20*time.Millisecond, []byte("polled"))
	if n, err := io.ReadFull(r, buf[:6]); err != nil || string(buf[:n]) != "polled" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if d := pollParks.Load() - parks; d != 0 {
		t.Errorf("%d parks while the data came within the budget", d)
	}

	r = newPollReader(c, 100*time.Microsecond)
	parks = pollParks.Load()
	send(30*time.Millisecond, []byte("parked"))
	if n, err := io.ReadFull(r, buf[:6]); err != nil || string(buf[:n]) != "parked" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if d := pollParks.Load() - parks; d < 1 {
		t.Error("no park while the data came after the budget")
	}

	if n, err := r.Read(nil); n != 0 || err != nil {
		t.Errorf("zero-length read: %d, %v", n, err)
	}

	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	c.SetReadDeadline(time.Time{})

	w.Write([]byte("x"))
	w.Close()
	if n, err := r.Read(buf); n != 1 || err != nil {
		t.Fatalf("last byte: %d, %v", n, err)
	}
	if _, err := r.Read(buf); err != io.EOF {
		t.Errorf("after the peer closed: %v, want io.EOF", err)
	}
}

// Closing the connection ends a read that is polling or parked.
func TestPollReaderClose(t *testing.T) {
	_, c := rawPair(t)
	r := newPollReader(c, DefaultPoll)
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 4))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("read still blocked 5 s after Close")
	}
}

func TestPollBudgetOption(t *testing.T) {
	for _, tc := range []struct {
		opt  time.Duration
		env  string
		want time.Duration
		bad  bool
	}{
		{0, "", DefaultPoll, false},
		{0, "0", 0, false},
		{0, "35", 35 * time.Microsecond, false},
		{time.Millisecond, "35", time.Millisecond, false}, // the option wins
		{-1, "35", 0, false},
		{0, "-5", 0, true},
		{0, "1.5", 0, true},
		{0, "lots", 0, true},
	} {
		t.Setenv(EnvPoll, tc.env)
		got, err := Options{Poll: tc.opt}.pollBudget()
		if tc.bad != (err != nil) || got != tc.want {
			t.Errorf("Poll=%v %s=%q: %v, %v; want %v (error: %v)", tc.opt, EnvPoll, tc.env, got, err, tc.want, tc.bad)
		}
	}
	if _, ok := newPollReader(nil, 0).(*net.TCPConn); !ok {
		t.Error("a zero budget should read the connection directly")
	}
}

// An invalid $DETCOLL_TCP_POLL_US fails Connect, naming the variable.
func TestPollEnvInvalidFailsConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t.Setenv(EnvPoll, "soon")
	_, err := Connect(ctx, store.NewMemory(), uniquePrefix("pollenv"), 0, 2, Options{})
	if err == nil || !strings.Contains(err.Error(), EnvPoll) {
		t.Fatalf("Connect with %s=soon: %v", EnvPoll, err)
	}
}

// While it polls, a read lets this process's other goroutines run: with one
// P the goroutine that writes what it waits for gets to run at once, so the
// read does not park (a budget below the runtime's 10 ms preemption, so
// that only the read's own yield can let the writer in).
func TestPollReaderLetsGoroutinesRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	w, c := rawPair(t)
	r := newPollReader(c, 5*time.Millisecond)
	parks := pollParks.Load()
	ready := make(chan struct{})
	go func() {
		<-ready
		w.Write([]byte("x"))
	}()
	close(ready) // the writer can run; this goroutine keeps the only P
	buf := make([]byte, 1)
	if n, err := r.Read(buf); n != 1 || err != nil {
		t.Fatalf("read: %d, %v", n, err)
	}
	if d := pollParks.Load() - parks; d != 0 {
		t.Errorf("the read parked %d times: its poll kept the writer goroutine from running", d)
	}
}

// A polling read calls runtime.Gosched at every attempt while polling reads
// may hold every P (one P: the writer goroutine must get it), and only every
// goschedEvery attempts while a P is free (each Gosched then wakes an idle
// P's thread to take the reader over). Whatever calls Gosched, every read
// ends with its data and none is left counted as polling.
func TestPollReaderGoschedOnlyWhenPsAreHeld(t *testing.T) {
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			w, c := rawPair(t)
			r := newPollReader(c, time.Second).(*pollReader)
			before := pollGoscheds.Load()
			go func() {
				time.Sleep(3 * time.Millisecond)
				w.Write([]byte("x"))
			}()
			buf := make([]byte, 1)
			if n, err := r.Read(buf); n != 1 || err != nil {
				t.Fatalf("read: %d, %v", n, err)
			}
			tries, calls := r.tries, int(pollGoscheds.Load()-before)
			if tries < goschedEvery {
				t.Skipf("only %d empty reads in 3 ms: too few to tell the rules apart", tries)
			}
			want := tries / goschedEvery
			if procs == 1 {
				want = tries
			}
			if calls != want {
				t.Errorf("%d empty reads made %d Gosched calls, want %d", tries, calls, want)
			}
			if n := pollers.Load(); n != 0 {
				t.Errorf("%d reads still counted as polling after the read", n)
			}
		})
	}
}
