package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/store"
)

const testToken = "job-secret-7f3a"

// rawDial dials rank to's published address.
func rawDial(t *testing.T, ctx context.Context, st Rendezvous, prefix string, to int) *net.TCPConn {
	t.Helper()
	addr, err := st.Get(ctx, addrKey(prefix, to))
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	c := nc.(*net.TCPConn)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return c
}

// expectDropped checks that the acceptor closes c without a (further) answer.
func expectDropped(t *testing.T, what string, c *net.TCPConn) {
	t.Helper()
	n, err := io.Copy(io.Discard, c)
	if n != 0 || (err != nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset")) {
		t.Fatalf("%s: got %d bytes back (err %v), want the connection dropped unanswered", what, n, err)
	}
}

func readMsg(t *testing.T, c *net.TCPConn) (hello, [helloLen]byte) {
	t.Helper()
	var b [helloLen]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("reading a handshake answer: %v", err)
	}
	h, err := decodeHello(b[:])
	if err != nil {
		t.Fatal(err)
	}
	return h, b
}

func sendMsg(c *net.TCPConn, h hello) [helloLen]byte {
	var b [helloLen]byte
	encodeHello(&b, h)
	c.Write(b[:])
	return b
}

// sumJob runs AllReduce(fp32 sum) on every rank and checks the raw bits of
// every element against the sum of the ranks' inputs: an injected
// contribution or a mixed-up peer would change them. The communicators are
// closed at the end, and with them ts.
func sumJob(t *testing.T, ts []*Transport) {
	t.Helper()
	const n = 1024
	w := len(ts)
	in := func(r, i int) float32 { return float32(r*n+i) * 0.25 }
	want := make([]uint32, n)
	for i := range want {
		var s float32
		for r := range w {
			s += in(r, i) // any order: these sums are exact in fp32
		}
		want[i] = math.Float32bits(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, w)
	outs := make([][]byte, w)
	for r := range w {
		wg.Go(func() {
			c, err := detcoll.New(ts[r])
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			send := make([]byte, 4*n)
			for i := range n {
				binary.LittleEndian.PutUint32(send[4*i:], math.Float32bits(in(r, i)))
			}
			outs[r] = make([]byte, 4*n)
			errs[r] = c.AllReduce(ctx, send, outs[r], detcoll.FP32)
		})
	}
	wg.Wait()
	for r := range w {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i := range n {
			if got := binary.LittleEndian.Uint32(outs[r][4*i:]); got != want[i] {
				t.Fatalf("rank %d element %d: bits %#08x, want %#08x", r, i, got, want[i])
			}
		}
	}
}

func TestTokenGroup(t *testing.T) {
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("token"), 4, Options{Token: testToken})
	defer closeAll(ts)
	exchange(t, ts[3], ts[0], 9, pattern(3<<20, 5))
	// Sub-groups authenticate with the parent's token too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subs := make([]*Transport, 2)
	var wg sync.WaitGroup
	for i, r := range []int{1, 3} {
		wg.Go(func() {
			s, err := ts[r].Sub(ctx, 7, []int{1, 3})
			if err != nil {
				t.Error(err)
				return
			}
			subs[i] = s.(*Transport)
		})
	}
	wg.Wait()
	if subs[0] == nil || subs[1] == nil {
		t.FailNow()
	}
	exchange(t, subs[1], subs[0], 1, pattern(5000, 1))
	sumJob(t, ts)
}

// TestImpostorsDropped starts ranks 0 and 1 of a 3-rank job with a token and
// throws every kind of impostor claiming rank 2 at them before the real rank
// 2 arrives: none gets in, none aborts the job, and the job's sum is exact.
func TestImpostorsDropped(t *testing.T) {
	st, prefix := store.NewMemory(), uniquePrefix("impostor")
	opt := Options{Token: testToken, DialTimeout: 20 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ts := make([]*Transport, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { ts[r], errs[r] = Connect(ctx, st, prefix, r, 3, opt) })
	}
	defer func() {
		for _, x := range ts {
			if x != nil {
				x.Close()
			}
		}
	}()

	// Both listeners are up before the impostors come.
	for r := range 2 {
		if _, err := st.Get(ctx, addrKey(prefix, r)); err != nil {
			t.Fatal(err)
		}
	}
	// Impostors that run the real protocol with a wrong token or none: they
	// fail (and time out retrying); ranks 0 and 1 keep waiting.
	for _, tok := range []string{"wrong-token", ""} {
		start := time.Now()
		tr, err := Connect(ctx, st, prefix, 2, 3, Options{Token: tok, DialTimeout: time.Second})
		if err == nil {
			tr.Close()
			t.Fatalf("impostor with token %q connected", tok)
		}
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
			t.Fatalf("impostor with token %q: want a DialTimeout, got %v", tok, err)
		}
		wantMsg := "authentication failed"
		if tok == "" {
			wantMsg = "authentication mismatch"
		}
		if !strings.Contains(err.Error(), wantMsg) {
			t.Fatalf("impostor with token %q: error %q does not say %q", tok, err, wantMsg)
		}
	}

	// Hand-made hellos, each on a fresh connection to rank 0.
	base := hello{version: protocolVersion, kind: kindHello, group: prefixHash(prefix), from: 2, to: 0, size: 3}

	// The 40-byte-era attack: a hello with a wrong group size, no token. It
	// is told authentication is required and nothing else happens.
	c := rawDial(t, ctx, st, prefix, 0)
	h := base
	h.size = 7
	sendMsg(c, h)
	if ans, _ := readMsg(t, c); ans.kind != kindReject || ans.reason != reasonAuth {
		t.Fatalf("unauthenticated wrong-size hello: answer %+v, want reject (auth)", ans)
	}
	c.Close()

	// Claims to authenticate, wrong size, forged MAC: dropped after the
	// challenge, without a reject (the size is never looked at).
	c = rawDial(t, ctx, st, prefix, 0)
	h.flags = flagAuth
	h.nonce[0] = 1
	sendMsg(c, h)
	if ch, _ := readMsg(t, c); ch.kind != kindChallenge {
		t.Fatalf("authenticating hello: answer %+v, want a challenge", ch)
	}
	sendMsg(c, hello{version: protocolVersion, kind: kindAuth, from: 2, size: 7})
	expectDropped(t, "forged MAC, wrong size", c)

	// Garbage after the magic, and garbage outright.
	c = rawDial(t, ctx, st, prefix, 0)
	c.Write(append([]byte(helloMagic), make([]byte, helloLen-len(helloMagic))...))
	expectDropped(t, "bad checksum", c)
	c = rawDial(t, ctx, st, prefix, 0)
	c.Write([]byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not a hello at all, not even close"))
	expectDropped(t, "garbage", c)

	// A replayed transcript: a dialer's valid auth message from one
	// handshake (as an eavesdropper would record it) sent in a second one
	// with the same hello. The acceptor's fresh nonce makes it worthless.
	h = base
	h.flags = flagAuth
	h.nonce[5] = 42
	c = rawDial(t, ctx, st, prefix, 0)
	hb := sendMsg(c, h)
	_, cb := readMsg(t, c)
	recorded := hello{version: protocolVersion, kind: kindAuth, from: 2, to: 0, size: 3,
		mac: handshakeMAC([]byte(testToken), labelDialer, prefix, &hb, &cb)}
	c.Close() // the recorded handshake never completes
	c = rawDial(t, ctx, st, prefix, 0)
	sendMsg(c, h)
	if ch, _ := readMsg(t, c); ch.kind != kindChallenge {
		t.Fatalf("replay: answer %+v, want a challenge", ch)
	}
	sendMsg(c, recorded)
	expectDropped(t, "replayed auth", c)

	// Nothing above ended ranks 0 and 1; the real rank 2 gets in.
	ts[2], errs[2] = Connect(ctx, st, prefix, 2, 3, opt)
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	sumJob(t, ts)
}

// TestDialerAuthenticatesAcceptor: a listener at rank 0's address that does
// not hold the token answers with a challenge whose MAC is wrong; the dialer
// never proves anything to it and retries until DialTimeout.
func TestDialerAuthenticatesAcceptor(t *testing.T) {
	st, prefix := store.NewMemory(), uniquePrefix("fakeacceptor")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	st.Set(context.Background(), addrKey(prefix, 0), []byte(ln.Addr().String()))
	got := make(chan int64, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var b [helloLen]byte
			if _, err := io.ReadFull(c, b[:]); err == nil {
				h, _ := decodeHello(b[:])
				var fake [helloLen]byte
				encodeHello(&fake, hello{version: protocolVersion, kind: kindChallenge, group: h.group, from: 0, to: h.from,
					size: h.size, flags: flagAuth, mac: handshakeMAC([]byte("not the token"), labelAcceptor, prefix, &b, &fake)})
				c.Write(fake[:])
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				n, _ := io.Copy(io.Discard, c)
				got <- n
			}
			c.Close()
		}
	}()
	_, err = Connect(context.Background(), st, prefix, 1, 2, Options{Token: testToken, DialTimeout: time.Second})
	ln.Close()
	<-done
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("want DeadlineExceeded after failed authentication, got %v", err)
	}
	close(got)
	tries := 0
	for n := range got {
		tries++
		if n != 0 {
			t.Fatalf("the dialer sent %d bytes to an acceptor that failed authentication", n)
		}
	}
	if tries == 0 {
		t.Fatal("the fake acceptor was never dialed")
	}
}

// TestTokenSizeMismatchStillReported: with a token, two genuine ranks that
// disagree on the group size still fail at once, after authenticating.
func TestTokenSizeMismatchStillReported(t *testing.T) {
	st, prefix := store.NewMemory(), uniquePrefix("tokensizes")
	errc := make(chan error, 1)
	go func() {
		_, err := Connect(context.Background(), st, prefix, 0, 2, Options{Token: testToken, DialTimeout: 5 * time.Second})
		errc <- err
	}()
	start := time.Now()
	_, err := Connect(context.Background(), st, prefix, 1, 3, Options{Token: testToken, DialTimeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "size mismatch") {
		t.Fatalf("rank 1: %v", err)
	}
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "size mismatch") {
		t.Fatalf("rank 0: want size mismatch, got %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("disagreement took %v to report", d)
	}
}

// TestHandshakeFloodDoesNotLockOut: 300 silent connections to rank 0's
// listener (more than maxPendingHandshakes) are closed oldest first, and
// the real rank 1 still connects.
func TestHandshakeFloodDoesNotLockOut(t *testing.T) {
	st, prefix := store.NewMemory(), uniquePrefix("flood")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opt := Options{Token: testToken}
	type res struct {
		tr  *Transport
		err error
	}
	ch := make(chan res, 1)
	go func() {
		tr, err := Connect(ctx, st, prefix, 0, 2, opt)
		ch <- res{tr, err}
	}()
	var flood []*net.TCPConn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range 300 {
		flood = append(flood, rawDial(t, ctx, st, prefix, 0))
	}
	closed := 0
	for _, c := range flood[:300-maxPendingHandshakes] {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n == 0 && err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
	}
	if closed != 300-maxPendingHandshakes {
		t.Fatalf("%d of the oldest %d silent connections closed, want all", closed, 300-maxPendingHandshakes)
	}
	tr1, err := Connect(ctx, st, prefix, 1, 2, opt)
	if err != nil {
		t.Fatalf("real rank 1 during the flood: %v", err)
	}
	defer tr1.Close()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.tr.Close()
	exchange(t, tr1, r.tr, 1, pattern(10000, 3))
}
