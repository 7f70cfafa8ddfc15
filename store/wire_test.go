package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

func seedRequests() []request {
	return []request{
		{op: opSet, id: 1, key: "k", value: []byte("v")},
		{op: opSet, id: 2, key: "", value: nil},
		{op: opGet, id: 3, key: "rank/0/addr"},
		{op: opWait, id: 4, keys: []string{"a", "", "ccc"}},
		{op: opWait, id: 5},
		{op: opAdd, id: 6, key: "n", delta: -42},
		{op: opCAS, id: 7, key: "k", expected: []byte("old"), value: []byte("new")},
		{op: opCAS, id: 8, key: "k"},
		{op: opDelete, id: 9, key: "k"},
		{op: opCancel, id: 10},
	}
}

func TestRequestRoundTrip(t *testing.T) {
	for _, r := range seedRequests() {
		frame := r.frame()
		if n := binary.BigEndian.Uint32(frame); int(n) != len(frame)-4 {
			t.Fatalf("%s: frame length %d for %d bytes", opNames[r.op], n, len(frame)-4)
		}
		got, err := decodeRequest(frame[4:])
		if err != nil {
			t.Fatalf("%s: %v", opNames[r.op], err)
		}
		if got.op != r.op || got.id != r.id || got.key != r.key || !slices.Equal(got.keys, r.keys) ||
			!bytes.Equal(got.expected, r.expected) || !bytes.Equal(got.value, r.value) || got.delta != r.delta {
			t.Fatalf("%s: decoded %+v; want %+v", opNames[r.op], got, r)
		}
	}
}

// FuzzDecode: the server's decoder never panics, fails only with ErrProtocol,
// and accepts only canonical encodings.
func FuzzDecode(f *testing.F) {
	for _, r := range seedRequests() {
		body := r.frame()[4:]
		f.Add(body)
		f.Add(body[:len(body)/2])
		f.Add(append(slices.Clone(body), 0))
	}
	f.Add([]byte{})
	f.Add([]byte{opWait, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{opSet, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 'k'})
	f.Add([]byte{99, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(helloFrame("token")[4:])
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRequest(body)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("decode error %v does not wrap ErrProtocol", err)
			}
		} else if again := req.appendBody(nil); !bytes.Equal(again, body) {
			t.Fatalf("accepted a non-canonical body:\n got %x\nre-encoded %x", body, again)
		}
		// The other decoders face the network too.
		decodeHello(body)
		decodeWelcome(body)
		decodeResponse(body)
	})
}

func TestReadFrameDoesNotTrustHeader(t *testing.T) {
	in := binary.BigEndian.AppendUint32(nil, maxFrame) // claims ~128 MiB …
	in = append(in, "only this"...)                    // … delivers 9 bytes
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readFrame(bytes.NewReader(in), maxFrame)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("readFrame of a short frame: %v; want ErrUnexpectedEOF", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("readFrame allocated %d bytes for a 9-byte frame", n)
	}
	if _, err := readFrame(bytes.NewReader(binary.BigEndian.AppendUint32(nil, 11)), 10); !errors.Is(err, ErrProtocol) {
		t.Fatalf("readFrame over the limit: %v; want ErrProtocol", err)
	}
}

func testServer(t *testing.T, token string) *Server {
	srv, err := Listen("", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func testClient(t *testing.T, srv *Server, token string) *Client {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, srv.Addr(), token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func rawConn(t *testing.T, srv *Server) *net.TCPConn {
	nc, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	return nc.(*net.TCPConn)
}

// welcome reads the server's answer to a hello.
func welcome(t *testing.T, nc net.Conn) byte {
	t.Helper()
	body, err := readFrame(nc, maxHello)
	if err != nil {
		t.Fatalf("reading welcome: %v", err)
	}
	_, status, _, err := decodeWelcome(body)
	if err != nil {
		t.Fatal(err)
	}
	return status
}

// expectClosed asserts that the server closes nc (rather than waiting).
func expectClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	if _, err := io.Copy(io.Discard, nc); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("server kept the connection open")
		}
		// A reset is as good as a close.
	}
}

func frameOf(body []byte) []byte { return endFrame(append(make([]byte, 4), body...)) }

func parked(srv *Server) int {
	srv.mem.mu.Lock()
	defer srv.mem.mu.Unlock()
	n := 0
	for _, w := range srv.mem.waits {
		n += w.n
	}
	return n
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still not true after 5s: %s", what)
		}
	}
}

func TestBadFrames(t *testing.T) {
	srv := testServer(t, "tok")
	hello := helloFrame("tok")
	get := (&request{op: opGet, id: 1, key: "k"}).frame()[4:]
	cases := []struct {
		name  string
		auth  bool   // send a good hello first
		send  []byte // then this, then half-close
		check func(t *testing.T)
	}{
		{name: "http", send: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{name: "short header", send: []byte{0, 0}},
		{name: "oversized hello", send: []byte{0xff, 0xff, 0xff, 0xff}},
		{name: "hello too big for a token", send: binary.BigEndian.AppendUint32(nil, uint32(maxHello+1))},
		{name: "bad magic", send: frameOf([]byte("xxxx\x01tok"))},
		{name: "request before hello", send: (&request{op: opSet, id: 1, key: "pre", value: []byte("v")}).frame(),
			check: func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				defer cancel()
				if v, err := srv.mem.Get(ctx, "pre"); err == nil {
					t.Fatalf("unauthenticated Set took effect: %q", v)
				}
			}},
		{name: "truncated hello", send: append(binary.BigEndian.AppendUint32(nil, 20), "dcst\x01"...)},
		{name: "unknown op", auth: true, send: frameOf([]byte{99, 0, 0, 0, 0, 0, 0, 0, 1})},
		{name: "empty frame", auth: true, send: frameOf(nil)},
		{name: "oversized frame", auth: true, send: binary.BigEndian.AppendUint32(nil, maxFrame+1)},
		{name: "huge frame header only", auth: true, send: binary.BigEndian.AppendUint32(nil, maxFrame)},
		{name: "oversized key", auth: true, send: frameOf(binary.BigEndian.AppendUint32([]byte{opGet, 0, 0, 0, 0, 0, 0, 0, 1}, MaxKeyLen+1))},
		{name: "truncated key", auth: true, send: frameOf(get[:len(get)-1])},
		{name: "trailing bytes", auth: true, send: frameOf(append(slices.Clone(get), 0))},
		{name: "wait count lies", auth: true, send: frameOf([]byte{opWait, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})},
		{name: "duplicate parked id", auth: true, send: append(frameOf(get), frameOf(get)...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc := rawConn(t, srv)
			if tc.auth {
				nc.Write(hello)
				if s := welcome(t, nc); s != statusOK {
					t.Fatalf("welcome status %d", s)
				}
			}
			nc.Write(tc.send)
			nc.CloseWrite()
			expectClosed(t, nc)
			if tc.check != nil {
				tc.check(t)
			}
		})
	}
	// The server survived all of that, keeps serving, and released every
	// request the bad connections had parked.
	c := testClient(t, srv, "tok")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := c.Add(ctx, "n", 1); err != nil || n != 1 {
		t.Fatalf("Add after bad frames = %d, %v", n, err)
	}
	eventually(t, "parked requests of closed connections released", func() bool { return parked(srv) == 0 })
}

func TestHandshakeRejections(t *testing.T) {
	srv := testServer(t, "tok")
	for _, tc := range []struct {
		name   string
		hello  []byte
		status byte
	}{
		{"wrong token", helloFrame("nope"), statusAuth},
		{"missing token", helloFrame(""), statusAuth},
		{"other version", frameOf([]byte("dcst\x02tok")), statusVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := rawConn(t, srv)
			nc.Write(tc.hello)
			if s := welcome(t, nc); s != tc.status {
				t.Fatalf("welcome status %d; want %d", s, tc.status)
			}
			// Whatever follows is not served: the server hangs up.
			nc.Write((&request{op: opSet, id: 1, key: "k", value: []byte("v")}).frame())
			expectClosed(t, nc)
		})
	}
	srv.mem.mu.Lock()
	_, ok := srv.mem.data["k"]
	srv.mem.mu.Unlock()
	if ok {
		t.Fatal("a rejected connection's Set took effect")
	}
}

func TestCancelWithdrawsParkedRequest(t *testing.T) {
	srv := testServer(t, "")
	c := testClient(t, srv, "")
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err := c.Get(ctx, "never")
		cancel()
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Get: %v", err)
		}
	}
	eventually(t, "server released cancelled Gets", func() bool { return parked(srv) == 0 })
	srv.mem.mu.Lock()
	n := len(srv.mem.waits)
	srv.mem.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d wait entries left behind", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("client unusable after cancellations: %v", err)
	}
}

func TestDisconnectReleasesParkedRequests(t *testing.T) {
	srv := testServer(t, "")
	nc := rawConn(t, srv)
	nc.Write(helloFrame(""))
	welcome(t, nc)
	for id := range uint64(5) {
		nc.Write((&request{op: opWait, id: id, keys: []string{"x", "y"}}).frame())
	}
	eventually(t, "requests parked", func() bool { return parked(srv) == 5 })
	nc.Close()
	eventually(t, "parked requests released", func() bool { return parked(srv) == 0 })
}

func TestParkedLimit(t *testing.T) {
	// One connection: past maxParkedPerConn blocked requests the server
	// answers "limit" and the Client polls; the request still completes.
	srv := testServer(t, "")
	c := testClient(t, srv, "")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range maxParkedPerConn {
		wg.Go(func() { c.Get(ctx, "never") })
	}
	eventually(t, "requests parked", func() bool { return parked(srv) == maxParkedPerConn })
	short, cancelShort := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShort()
	got := make(chan error, 1)
	go func() {
		v, err := c.Get(short, "soon")
		if err == nil && string(v) != "v" {
			err = fmt.Errorf("got %q", v)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond) // it is being refused and retried now
	if parked(srv) != maxParkedPerConn {
		t.Fatalf("%d parked, want the cap %d", parked(srv), maxParkedPerConn)
	}
	other := testClient(t, srv, "")
	if err := other.Set(short, "soon", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Get beyond the per-connection cap: %v; want it to complete once the key exists", err)
	}
	cancel()
	wg.Wait()
	if n, err := c.Add(short, "n", 1); err != nil || n != 1 {
		t.Fatalf("client after the limit: %d, %v", n, err)
	}

	// On the wire: the request over the cap gets status limit.
	srv2, err := ListenOptions("", ServerOptions{MaxParked: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	nc := rawConn(t, srv2)
	nc.Write(helloFrame(""))
	welcome(t, nc)
	for id := range uint64(3) {
		nc.Write((&request{op: opGet, id: id, key: "x"}).frame())
	}
	body, err := readFrame(nc, maxFrame)
	if err != nil {
		t.Fatal(err)
	}
	if id, status, _, err := decodeResponse(body); err != nil || id != 2 || status != statusLimit {
		t.Fatalf("third get: id %d status %d (%v); want id 2 status limit", id, status, err)
	}
}
