package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func listenOpts(t *testing.T, opt ServerOptions) *Server {
	t.Helper()
	srv, err := ListenOptions("", opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func dialCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestServerOptionsDefaults(t *testing.T) {
	o := ServerOptions{}.withDefaults()
	want := ServerOptions{AuthTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute, MaxConns: 1024,
		MaxPendingConns: 64, MaxParked: 4096, MaxParkedBytes: 16 << 20, MaxBytes: 1 << 30}
	if o != want {
		t.Fatalf("defaults %+v, want %+v", o, want)
	}
	if o := (ServerOptions{MaxConns: -1, IdleTimeout: -1}).withDefaults(); o.MaxConns != -1 || o.IdleTimeout != -1 {
		t.Fatalf("negative values must stay (off): %+v", o)
	}
}

func TestMaxConns(t *testing.T) {
	srv := listenOpts(t, ServerOptions{MaxConns: 3})
	var cs []*Client
	for range 3 {
		c, err := Dial(dialCtx(t, 5*time.Second), srv.Addr(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	start := time.Now()
	_, err := Dial(dialCtx(t, 5*time.Second), srv.Addr(), "")
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "cap of 3 connections") {
		t.Fatalf("4th Dial: %v; want ErrLimit naming the cap", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("refusal took %v; it must be prompt", d)
	}
	cs[0].Close()
	eventually(t, "a slot frees when a client leaves", func() bool {
		c, err := Dial(dialCtx(t, 5*time.Second), srv.Addr(), "")
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// TestSilentFloodDoesNotLockOut: an attacker without the token holds 300
// connections open and silent (more than the pending cap); a real client
// still gets in, and the server holds at most MaxPendingConns of them.
func TestSilentFloodDoesNotLockOut(t *testing.T) {
	srv := listenOpts(t, ServerOptions{Token: "tok", MaxPendingConns: 16})
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range 300 {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	c, err := Dial(dialCtx(t, 5*time.Second), srv.Addr(), "tok")
	if err != nil {
		t.Fatalf("real client during the flood: %v", err)
	}
	defer c.Close()
	ctx := dialCtx(t, 5*time.Second)
	if err := c.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	srv.mu.Lock()
	n := len(srv.pending)
	srv.mu.Unlock()
	if n > 16 {
		t.Fatalf("%d pending connections held, cap 16", n)
	}
	// A wrong token among the flood is refused as before.
	if _, err := Dial(dialCtx(t, 5*time.Second), srv.Addr(), "nope"); !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong token: %v", err)
	}
}

func TestAuthAndIdleTimeouts(t *testing.T) {
	// The idle timeout leaves the keepalive (a third of it) 400 ms of slack
	// on a loaded machine.
	srv := listenOpts(t, ServerOptions{AuthTimeout: 200 * time.Millisecond, IdleTimeout: 600 * time.Millisecond})
	// Silent before the hello: closed after AuthTimeout.
	nc := rawConn(t, srv)
	start := time.Now()
	expectClosed(t, nc)
	if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
		t.Fatalf("unauthenticated connection closed after %v, want about 200ms", d)
	}
	// Silent after the hello: closed after IdleTimeout.
	nc = rawConn(t, srv)
	nc.Write(helloFrame(""))
	if s := welcome(t, nc); s != statusOK {
		t.Fatalf("welcome status %d", s)
	}
	start = time.Now()
	expectClosed(t, nc)
	if d := time.Since(start); d < 550*time.Millisecond || d > 5*time.Second {
		t.Fatalf("idle connection closed after %v, want about 600ms", d)
	}
	// A real Client idle (and with a Get parked) far longer stays connected:
	// it sends keepalives.
	c := testClient(t, srv, "")
	if c.keepalive != 200*time.Millisecond {
		t.Fatalf("client keepalive %v, want a third of the idle timeout", c.keepalive)
	}
	got := make(chan error, 1)
	go func() {
		v, err := c.Get(dialCtx(t, 10*time.Second), "late")
		if err == nil && string(v) != "x" {
			err = fmt.Errorf("got %q", v)
		}
		got <- err
	}()
	time.Sleep(2400 * time.Millisecond)
	other := testClient(t, srv, "")
	if err := other.Set(dialCtx(t, 5*time.Second), "late", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("parked Get across 4 idle timeouts: %v", err)
	}
	if _, err := c.Add(dialCtx(t, 5*time.Second), "n", 1); err != nil {
		t.Fatalf("client after idling: %v", err)
	}
}

func TestMaxBytes(t *testing.T) {
	srv := listenOpts(t, ServerOptions{MaxBytes: 1000})
	c := testClient(t, srv, "")
	ctx := dialCtx(t, 5*time.Second)
	if err := c.Set(ctx, "a", make([]byte, 600)); err != nil {
		t.Fatal(err)
	}
	err := c.Set(ctx, "b", make([]byte, 600))
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "cap of 1000 bytes") {
		t.Fatalf("Set over MaxBytes: %v; want ErrLimit", err)
	}
	if _, ok, _ := srv.mem.peek([]string{"b"}); ok {
		t.Fatal("the refused Set stored its key")
	}
	if _, err := c.CompareSet(ctx, "b", nil, make([]byte, 600)); !errors.Is(err, ErrLimit) {
		t.Fatalf("CompareSet over MaxBytes: %v", err)
	}
	if err := c.Set(ctx, "a", make([]byte, 100)); err != nil { // shrinking frees room
		t.Fatal(err)
	}
	if err := c.Set(ctx, "b", make([]byte, 600)); err != nil {
		t.Fatalf("Set after shrinking: %v", err)
	}
	if _, err := c.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "c", make([]byte, 800)); err != nil {
		t.Fatalf("Set after Delete: %v", err)
	}
	// In use: a 1+100, c 1+800; a counter fits, another 100 bytes do not.
	if _, err := c.Add(ctx, "n", 1); err != nil {
		t.Fatalf("Add within MaxBytes: %v", err)
	}
	if err := c.Set(ctx, "d", make([]byte, 100)); !errors.Is(err, ErrLimit) {
		t.Fatalf("Set over MaxBytes after Add: %v", err)
	}
}

// TestGlobalParkedCap: three clients park 15 Gets against a cap of 10; the
// server holds 10, the Clients retry the rest, and all 15 complete once the
// key is set. A Get for a key that exists is answered while the cap is full.
func TestGlobalParkedCap(t *testing.T) {
	srv := listenOpts(t, ServerOptions{MaxParked: 10})
	ctx := dialCtx(t, 10*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 15)
	for range 3 {
		c := testClient(t, srv, "")
		for range 5 {
			wg.Go(func() {
				v, err := c.Get(ctx, "k")
				if err == nil && string(v) != "v" {
					err = fmt.Errorf("got %q", v)
				}
				errs <- err
			})
		}
	}
	eventually(t, "the cap is full", func() bool { return parked(srv) == 10 })
	time.Sleep(50 * time.Millisecond)
	if n := parked(srv); n != 10 {
		t.Fatalf("%d parked, cap 10", n)
	}
	c := testClient(t, srv, "")
	if err := c.Set(ctx, "there", []byte("y")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(dialCtx(t, time.Second), "there"); err != nil || string(v) != "y" {
		t.Fatalf("Get of an existing key while the cap is full: %q, %v", v, err)
	}
	if err := c.Wait(dialCtx(t, time.Second), "there"); err != nil {
		t.Fatalf("Wait on an existing key while the cap is full: %v", err)
	}
	if err := c.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := parked(srv); n != 0 {
		t.Fatalf("%d still parked", n)
	}
	srv.pmu.Lock()
	p, pb := srv.parked, srv.parkedBytes
	srv.pmu.Unlock()
	if p != 0 || pb != 0 {
		t.Fatalf("parked accounting leaked: %d requests, %d bytes", p, pb)
	}
}

// helperServerEnv makes the test binary a store server (see TestMain in
// store_test.go): it prints its address and serves until stdin closes.
const helperServerEnv = "DETCOLL_STORE_TEST_SERVER"

// RunHelperServer is the body of that subprocess; mode "nocaps" switches
// the blocked-request and connection caps off.
func RunHelperServer(mode string) {
	opt := ServerOptions{}
	if mode == "nocaps" {
		opt.MaxParked, opt.MaxParkedBytes, opt.MaxConns = -1, -1, -1
	}
	srv, err := ListenOptions("", opt)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println(srv.Addr())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
	os.Exit(0)
}

func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading RSS: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS in /proc/<pid>/status")
	return 0
}

// parkFlood opens conns connections to addr and sends perConn Gets for
// missing keys on each; it returns once the server has answered every
// request it did not park (so what it holds is settled) and how many
// answers were "limit".
func parkFlood(t *testing.T, addr string, conns, perConn, wantParked int) (flood []net.Conn, limited int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	answered := make([]int, conns)
	for i := range conns {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, nc)
		nc.Write(helloFrame(""))
		r := bufio.NewReader(nc)
		nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		body, err := readFrame(r, maxHello)
		if err != nil {
			t.Fatalf("flood connection %d: welcome: %v", i, err)
		}
		if _, st, _, _ := decodeWelcome(body); st != statusOK {
			t.Fatalf("flood connection %d refused: status %d", i, st)
		}
		var b []byte
		for j := range perConn {
			b = append(b, (&request{op: opGet, id: uint64(j), key: fmt.Sprintf("flood/%d/%d", i, j)}).frame()...)
		}
		nc.Write(b)
		wg.Go(func() {
			for {
				body, err := readFrame(r, maxFrame)
				if err != nil {
					return
				}
				_, st, _, _ := decodeResponse(body)
				mu.Lock()
				answered[i]++
				if st == statusLimit {
					limited++
				}
				mu.Unlock()
			}
		})
	}
	total := conns * perConn
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := 0
		for _, a := range answered {
			n += a
		}
		mu.Unlock()
		if n >= total-wantParked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d flood requests answered", n, total-wantParked)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
		wg.Wait()
	})
	return flood, limited
}

// TestParkedFloodRSSBounded reproduces issue 14's exhaustion: 100
// connections × 1024 parked Gets took an uncapped server from 22 MB to
// 596 MB. Against a server subprocess with the default caps, the server
// parks MaxParked of them, answers the rest "limit", its RSS stays within a
// bound, and a real client still gets in and is served (its own Get on a
// missing key completes once the key is set).
func TestParkedFloodRSSBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server subprocess and 100 connections (-short)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperServerEnv+"=caps")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper server: %v", err)
	}
	addr := strings.TrimSpace(line)
	if strings.HasPrefix(addr, "error") {
		t.Fatal(addr)
	}
	// Warm up (a client in, out) so the baseline is a serving server.
	c0, err := Dial(dialCtx(t, 5*time.Second), addr, "")
	if err != nil {
		t.Fatal(err)
	}
	c0.Close()
	before := rssKiB(t, cmd.Process.Pid)

	const conns, perConn = 100, 1024
	_, limited := parkFlood(t, addr, conns, perConn, DefaultMaxParked)
	if want := conns*perConn - DefaultMaxParked; limited != want {
		t.Fatalf("%d requests answered limit, want %d (all but MaxParked=%d)", limited, want, DefaultMaxParked)
	}
	after := rssKiB(t, cmd.Process.Pid)
	t.Logf("server RSS %d KiB before, %d KiB with %d connections × %d Gets (%d parked)", before, after, conns, perConn, DefaultMaxParked)
	// 4096 parked requests cost ~40 MB at most (goroutine stacks, contexts,
	// keys); 596 MB was the uncapped figure.
	// The race detector's shadow memory multiplies every allocation (the
	// subprocess is the race-built test binary too).
	boundKiB := 96 << 10
	if raceEnabled {
		boundKiB = 320 << 10
	}
	if after-before > boundKiB {
		t.Fatalf("server RSS grew by %d KiB (from %d to %d), bound %d KiB", after-before, before, after, boundKiB)
	}

	// A real client during the flood.
	c, err := Dial(dialCtx(t, 5*time.Second), addr, "")
	if err != nil {
		t.Fatalf("real client during the flood: %v", err)
	}
	defer c.Close()
	ctx := dialCtx(t, 10*time.Second)
	got := make(chan error, 1)
	go func() {
		v, err := c.Get(ctx, "real/key")
		if err == nil && string(v) != "v" {
			err = fmt.Errorf("got %q", v)
		}
		got <- err
	}()
	c2, err := Dial(dialCtx(t, 5*time.Second), addr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Set(ctx, "real/key", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("real client's Get during the flood: %v", err)
	}
}
