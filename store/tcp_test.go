package store_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/detcoll/detcoll/store"
)

// withTimeout returns a ctx for calls expected to finish well within d.
func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestToken(t *testing.T) {
	srv := serve(t, "s3cret")
	for _, tok := range []string{"wrong", "", "s3cret-and-more", "s3cre"} {
		start := time.Now()
		c, err := store.Dial(withTimeout(t, 5*time.Second), srv.Addr(), tok)
		if !errors.Is(err, store.ErrAuth) {
			if c != nil {
				c.Close()
			}
			t.Fatalf("Dial with token %q: %v; want ErrAuth", tok, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Dial with token %q took %v: ErrAuth must not be retried", tok, d)
		}
	}
	c := dial(t, srv.Addr(), "s3cret")
	ctx := withTimeout(t, 5*time.Second)
	if err := c.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
}

func TestNoTokenServerAcceptsAnyClient(t *testing.T) {
	srv := serve(t, "")
	for _, tok := range []string{"", "anything"} {
		c := dial(t, srv.Addr(), tok)
		if _, err := c.Add(withTimeout(t, 5*time.Second), "n", 1); err != nil {
			t.Fatalf("token %q: %v", tok, err)
		}
	}
}

func TestListenDefaultsToLoopback(t *testing.T) {
	for _, addr := range []string{"", ":0"} {
		srv, err := store.Listen(addr, "")
		if err != nil {
			t.Fatal(err)
		}
		host, _, err := net.SplitHostPort(srv.Addr())
		srv.Close()
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Errorf("Listen(%q) listens on %s, not loopback (%v)", addr, srv.Addr(), err)
		}
	}
	if _, err := store.Listen("no-port", ""); err == nil {
		t.Error("Listen(no-port) succeeded")
	}
	start := time.Now()
	if _, err := store.Dial(withTimeout(t, 5*time.Second), "no-port", ""); err == nil || time.Since(start) > time.Second {
		t.Errorf("Dial(no-port) = %v after %v; want an immediate error", err, time.Since(start))
	}
}

func TestServerCloseFailsClients(t *testing.T) {
	srv, err := store.Listen("", "")
	if err != nil {
		t.Fatal(err)
	}
	a, b := dial(t, srv.Addr(), ""), dial(t, srv.Addr(), "")
	ctx := withTimeout(t, 10*time.Second)
	got := make(chan error, 2)
	go func() { _, err := a.Get(ctx, "never"); got <- err }()
	go func() { got <- b.Wait(ctx, "never", "either") }()
	time.Sleep(50 * time.Millisecond) // let both park on the server
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 2 {
		select {
		case err := <-got:
			if !errors.Is(err, store.ErrClosed) || !strings.Contains(err.Error(), "lost") {
				t.Errorf("blocked call after server Close: %v; want ErrClosed saying the connection was lost", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("blocked call still blocked after server Close")
		}
	}
	if err := a.Set(ctx, "k", nil); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Set after server Close: %v; want ErrClosed", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	a.Close()
	b.Close()
	goleak.VerifyNone(t)
}

func TestDialRetriesUntilServerAppears(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens on addr now

	type dialed struct {
		c   *store.Client
		err error
	}
	got := make(chan dialed, 1)
	go func() {
		c, err := store.Dial(withTimeout(t, 10*time.Second), addr, "tok")
		got <- dialed{c, err}
	}()
	select {
	case d := <-got:
		t.Fatalf("Dial returned before the server started: %v", d.err)
	case <-time.After(150 * time.Millisecond):
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s was taken meanwhile: %v", addr, err)
	}
	srv := store.Serve(ln, "tok")
	defer srv.Close()
	select {
	case d := <-got:
		if d.err != nil {
			t.Fatalf("Dial: %v", d.err)
		}
		defer d.c.Close()
		if _, err := d.c.Add(withTimeout(t, 5*time.Second), "n", 1); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Dial did not connect after the server started")
	}
}

func TestDialTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	start := time.Now()
	_, err = store.Dial(withTimeout(t, 100*time.Millisecond), addr, "")
	if !errors.Is(err, store.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial to nothing: %v; want ErrTimeout wrapping DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Dial took %v past a 100ms deadline", d)
	}
}

// A Get parked by one client delays neither other clients nor the same
// client's other requests.
func TestBlockedGetDoesNotBlockOthers(t *testing.T) {
	srv := serve(t, "")
	a, b := dial(t, srv.Addr(), ""), dial(t, srv.Addr(), "")
	ctx := withTimeout(t, 10*time.Second)
	got := make(chan []byte, 1)
	go func() { v, _ := a.Get(ctx, "k"); got <- v }()
	time.Sleep(20 * time.Millisecond)
	for _, c := range []*store.Client{a, b} {
		start := time.Now()
		if _, err := c.Add(ctx, "n", 1); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Add took %v behind a blocked Get", d)
		}
	}
	if err := b.Set(ctx, "k", []byte("from b")); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if string(v) != "from b" {
			t.Fatalf("Get = %q", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Get not woken by another client's Set")
	}
}

func TestLargeValues(t *testing.T) {
	c := dial(t, serve(t, "").Addr(), "")
	ctx := withTimeout(t, 20*time.Second)
	big := make([]byte, 8<<20)
	rand.NewChaCha8([32]byte{1}).Read(big)
	if err := c.Set(ctx, "big", big); err != nil {
		t.Fatal(err)
	}
	v, err := c.Get(ctx, "big")
	if err != nil || !bytes.Equal(v, big) {
		t.Fatalf("8 MiB round trip: %d bytes, equal=%v, %v", len(v), bytes.Equal(v, big), err)
	}
	v, err = c.CompareSet(ctx, "big", big, []byte("small"))
	if err != nil || string(v) != "small" {
		t.Fatalf("CompareSet with 8 MiB expected = %.20q, %v", v, err)
	}
}
