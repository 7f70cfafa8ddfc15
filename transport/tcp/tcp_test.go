package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// store.Store is a Rendezvous.
var _ Rendezvous = store.Store(nil)

// recorder is a Rendezvous that remembers the keys written through it.
type recorder struct {
	Rendezvous
	mu   sync.Mutex
	keys []string
}

func (r *recorder) Set(ctx context.Context, key string, value []byte) error {
	r.mu.Lock()
	r.keys = append(r.keys, key)
	r.mu.Unlock()
	return r.Rendezvous.Set(ctx, key, value)
}

var prefixSeq atomic.Int64

func uniquePrefix(name string) string {
	return fmt.Sprintf("test/%s/%d", name, prefixSeq.Add(1))
}

// connectGroup connects w ranks concurrently through st under prefix.
func connectGroup(t testing.TB, st Rendezvous, prefix string, w int, opt Options) []*Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts := make([]*Transport, w)
	errs := make([]error, w)
	var wg sync.WaitGroup
	for r := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts[r], errs[r] = Connect(ctx, st, prefix, r, w, opt)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			for _, x := range ts {
				if x != nil {
					x.Close()
				}
			}
			t.Fatalf("connect: %v", err)
		}
	}
	return ts
}

func closeAll(ts []*Transport) {
	for _, x := range ts {
		x.Close()
	}
}

func TestConformance(t *testing.T) {
	for _, chunk := range []int{0, 4096, -1} {
		t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, w int) []transport.Transport {
				ts := connectGroup(t, store.NewMemory(), uniquePrefix("conf"), w, Options{ChunkSize: chunk})
				out := make([]transport.Transport, w)
				for i, x := range ts {
					out[i] = x
				}
				return out
			})
		})
	}
}

func pattern(n, salt int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + salt*7 + i>>8)
	}
	return b
}

// exchange sends buf from a to b and checks it arrives intact.
func exchange(t *testing.T, a, b *Transport, tag uint32, want []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- a.Send(ctx, b.Rank(), tg(tag), want) }()
	got := make([]byte, len(want))
	if err := b.Recv(ctx, a.Rank(), tg(tag), got); err != nil {
		t.Fatalf("recv %d bytes: %v", len(want), err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("send %d bytes: %v", len(want), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%d bytes: payload differs", len(want))
	}
}

func TestChunkBoundaries(t *testing.T) {
	// Sender chunk sizes differ per rank: receivers follow the frame header.
	st, prefix := store.NewMemory(), uniquePrefix("chunks")
	var ts [2]*Transport
	var errs [2]error
	var wg sync.WaitGroup
	for r, chunk := range []int{4096, 5000 /* rounds to 4096 */} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts[r], errs[r] = Connect(context.Background(), st, prefix, r, 2, Options{ChunkSize: chunk})
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	defer closeAll(ts[:])
	ts[1].shift = 0 // rank 1 sends single-checksum frames
	defer func() { parallelCRC = true }()
	for _, parallelCRC = range []bool{true, false} { // checksum helper or inline
		for _, n := range []int{0, 1, 4095, 4096, 4097, 2 * 4096, 3 * 4096, 3*4096 + 1, 1<<20 + 5} {
			exchange(t, ts[0], ts[1], uint32(n), pattern(n, 1))
			exchange(t, ts[1], ts[0], uint32(n), pattern(n, 2))
		}
	}
}

func TestOptionsDefaults(t *testing.T) {
	t.Setenv(EnvHost, "")
	o, shift := Options{}.withDefaults()
	if o.Host != "127.0.0.1" || o.DialTimeout != DefaultDialTimeout || 1<<shift != DefaultChunkSize {
		t.Fatalf("defaults: %+v shift %d", o, shift)
	}
	t.Setenv(EnvHost, "localhost")
	if o, _ := (Options{}).withDefaults(); o.Host != "localhost" {
		t.Fatalf("%s ignored: %q", EnvHost, o.Host)
	}
	if o, _ := (Options{Host: "::1"}).withDefaults(); o.Host != "::1" {
		t.Fatalf("Host overridden by env: %q", o.Host)
	}
	for in, want := range map[int]uint8{-1: 0, 1: minChunkShift, 5000: 12, 1 << 16: 16, 1<<16 + 1: 16, 1 << 40: maxChunkShift} {
		if _, s := (Options{ChunkSize: in}).withDefaults(); s != want {
			t.Errorf("ChunkSize %d: shift %d, want %d", in, s, want)
		}
	}
}

func TestUnspecifiedHostRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Connect(ctx, store.NewMemory(), uniquePrefix("unspec"), 0, 2, Options{Host: "0.0.0.0"})
	if err == nil || !strings.Contains(err.Error(), "not an address peers can dial") {
		t.Fatalf("want refusal of 0.0.0.0, got %v", err)
	}
}

func TestKeysUnderPrefix(t *testing.T) {
	st := &recorder{Rendezvous: store.NewMemory()}
	ts := connectGroup(t, st, "job7/tp", 3, Options{})
	defer closeAll(ts)
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, r := range []int{0, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := ts[r].Sub(ctx, 9, []int{2, 0})
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	if len(st.keys) != 3 { // ranks 0 and 1 of the group, rank 0 of the sub
		t.Errorf("keys written: %q", st.keys)
	}
	for _, k := range st.keys {
		if !strings.HasPrefix(k, "job7/tp/") {
			t.Errorf("key %q outside the prefix", k)
		}
	}
}

// rawPeer connects rank 0 of a group of 2 to a hand-driven rank 1: the test
// writes frames on the returned raw connection.
func rawPeer(t *testing.T, opt Options) (*Transport, *net.TCPConn) {
	t.Helper()
	st, prefix := store.NewMemory(), uniquePrefix("raw")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		tr  *Transport
		err error
	}
	ch := make(chan res, 1)
	go func() {
		tr, err := Connect(ctx, st, prefix, 0, 2, opt)
		ch <- res{tr, err}
	}()
	c, ans, err := rawHello(ctx, st, prefix, hello{version: protocolVersion, kind: kindHello,
		group: prefixHash(prefix), from: 1, to: 0, size: 2})
	if err != nil {
		t.Fatal(err)
	}
	if ans.kind != kindAccept {
		t.Fatalf("handshake answer %+v", ans)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() {
		r.tr.Close()
		c.Close()
	})
	return r.tr, c
}

// rawHello dials rank h.to's published address, sends h and reads the answer.
func rawHello(ctx context.Context, st Rendezvous, prefix string, h hello) (*net.TCPConn, hello, error) {
	addr, err := st.Get(ctx, addrKey(prefix, int(h.to)))
	if err != nil {
		return nil, hello{}, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", string(addr))
	if err != nil {
		return nil, hello{}, err
	}
	c := nc.(*net.TCPConn)
	var b [helloLen]byte
	encodeHello(&b, h)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(b[:]); err != nil {
		c.Close()
		return nil, hello{}, err
	}
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		return nil, hello{}, err
	}
	ans, err := decodeHello(b[:])
	if err != nil {
		c.Close()
	}
	return c, ans, err
}

func header(tag uint32, length uint64, shift uint8, crc uint32) []byte {
	var b [frameHeaderLen]byte
	encodeFrameHeader(&b, frameHeader{tag: tg(tag), length: length, shift: shift, crc: crc})
	return b[:]
}

func resealHeader(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[44:48], crc32c(b[0:44]))
	return b
}

func chunkedFrame(tag uint32, payload []byte, shift uint8, corruptChunk int) []byte {
	size := 1 << shift
	first := min(size, len(payload))
	crc0 := crc32c(payload[:first])
	if corruptChunk == 0 {
		crc0++
	}
	out := append(header(tag, uint64(len(payload)), shift, crc0), payload[:first]...)
	for off, k := first, 1; off < len(payload); k++ {
		end := min(off+size, len(payload))
		c := crc32c(payload[off:end])
		if k == corruptChunk {
			c ^= 0x80
		}
		out = binary.LittleEndian.AppendUint32(out, c)
		out = append(out, payload[off:end]...)
		off = end
	}
	return out
}

func TestRecvRejectsBadFrames(t *testing.T) {
	p100 := pattern(100, 3)
	p10k := pattern(10000, 4)
	cases := []struct {
		name   string
		wire   []byte
		close  bool // close the raw connection after writing
		size   int  // the receiver's buffer
		want   error
		noHang bool
	}{
		{name: "garbage", wire: []byte("GET / HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n.........."), size: 8, want: transport.ErrCorrupt},
		{name: "header checksum", wire: func() []byte { b := header(7, 100, 0, crc32c(p100)); b[5] ^= 1; return append(b, p100...) }(), size: 100, want: transport.ErrCorrupt},
		{name: "reserved bytes", wire: func() []byte {
			b := header(7, 100, 0, crc32c(p100))
			b[36] = 1
			return append(resealHeader(b), p100...)
		}(), size: 100, want: transport.ErrCorrupt},
		{name: "chunk shift", wire: append(header(7, 100, 5, crc32c(p100)), p100...), size: 100, want: transport.ErrCorrupt},
		{name: "payload checksum", wire: chunkedFrame(7, p100, 0, 0), size: 100, want: transport.ErrCorrupt},
		{name: "third chunk checksum", wire: chunkedFrame(7, p10k, 12, 2), size: 10000, want: transport.ErrCorrupt},
		{name: "wrong tag", wire: chunkedFrame(8, p100, 0, -1), size: 100, want: transport.ErrTagMismatch},
		{name: "wrong sequence number", wire: func() []byte {
			b := chunkedFrame(7, p100, 0, -1)
			b[8] ^= 1
			resealHeader(b)
			return b
		}(), size: 100, want: transport.ErrTagMismatch},
		{name: "wrong signature hash", wire: func() []byte {
			b := chunkedFrame(7, p100, 0, -1)
			b[23] ^= 0x80
			resealHeader(b)
			return b
		}(), size: 100, want: transport.ErrTagMismatch},
		{name: "oversized length", wire: header(7, 1<<62, 0, 0), size: 100, want: transport.ErrSizeMismatch},
		{name: "max length", wire: header(7, ^uint64(0), 30, 0), size: 0, want: transport.ErrSizeMismatch},
		{name: "closed before a frame", close: true, size: 8, want: transport.ErrPeerClosed},
		{name: "short header", wire: header(7, 100, 0, 0)[:10], close: true, size: 100, want: transport.ErrPeerClosed},
		{name: "short payload", wire: chunkedFrame(7, p10k, 12, -1)[:6000], close: true, size: 10000, want: transport.ErrPeerClosed},
	}
	// Through Recv, and through Exchange's progress loop (which reads the
	// header and payload itself and leaves a frame of several checksummed
	// chunks to readRest).
	saved := inlineAllFor
	defer func() { inlineAllFor = saved }()
	for _, via := range []string{"Recv", "Exchange"} {
		for _, tc := range cases {
			t.Run(via+"/"+tc.name, func(t *testing.T) {
				inlineAllFor = func(*net.TCPConn) bool { return via == "Exchange" }
				testBadFrame(t, via, tc.wire, tc.close, tc.size, tc.want)
			})
		}
	}
}

// recvOne receives one frame from peer 1 with Recv, or with an Exchange
// that only receives.
func recvOne(ctx context.Context, tr *Transport, via string, tag transport.Tag, buf []byte) error {
	if via == "Recv" {
		return tr.Recv(ctx, 1, tag, buf)
	}
	var errs []error
	tr.Exchange(ctx, tag,
		func(int) ([]byte, bool) { return nil, false },
		func(int) ([]byte, bool) { return buf, true },
		func(err error) { errs = append(errs, err) })
	if len(errs) > 1 {
		return fmt.Errorf("Exchange reported %d errors for one receive: %v", len(errs), errs)
	}
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}

func testBadFrame(t *testing.T, via string, wire []byte, closeRaw bool, size int, want error) {
	tr, raw := rawPeer(t, Options{})
	if got := tr.progressAll; got != (via == "Exchange") {
		t.Fatalf("progressAll = %v", got)
	}
	if _, err := raw.Write(wire); err != nil {
		t.Fatal(err)
	}
	if closeRaw {
		raw.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	err := recvOne(ctx, tr, via, tg(7), make([]byte, size))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, want) {
		t.Fatalf("want %v, got %v", want, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("error took %v", d)
	}
	var te *transport.Error
	if !errors.As(err, &te) || te.Op != "recv" || te.Rank != 0 || te.Peer != 1 {
		t.Fatalf("error %#v lacks op/rank/peer", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("a bad frame made Recv allocate %d bytes", grew)
	}
	// The stream is out of step: later calls fail at once, and the
	// raw peer sees the connection closed.
	err = recvOne(ctx, tr, via, tg(7), make([]byte, size))
	if !errors.Is(err, ErrBroken) {
		t.Fatalf("second recv: want ErrBroken, got %v", err)
	}
	// A tag or size mismatch breaks only the incoming stream: sends
	// stay in step until the connection closes (mismatchLinger), so
	// the peer can read what this rank sent and see the mismatch too.
	// A corrupt frame breaks both directions at once.
	err = tr.Send(ctx, 1, tg(7), nil)
	if errors.Is(want, transport.ErrTagMismatch) || errors.Is(want, transport.ErrSizeMismatch) {
		if err != nil {
			t.Fatalf("send after a mismatch: want it to work during the linger, got %v", err)
		}
	} else if !errors.Is(err, ErrBroken) {
		t.Fatalf("send after a bad frame: want ErrBroken, got %v", err)
	}
	if !closeRaw {
		raw.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.Copy(io.Discard, raw); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("raw peer: %v", err)
		}
	}
}

func TestPeerKilledMidMessage(t *testing.T) {
	tr, raw := rawPeer(t, Options{})
	const n = 4 << 20
	payload := pattern(n, 5)
	frame := chunkedFrame(3, payload, 20, -1)
	errc := make(chan error, 1)
	go func() { errc <- tr.Recv(context.Background(), 1, tg(3), make([]byte, n)) }()
	if _, err := raw.Write(frame[:len(frame)/2]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	raw.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, transport.ErrPeerClosed) {
			t.Fatalf("want ErrPeerClosed, got %v", err)
		}
		t.Logf("%v after %v", err, time.Since(start))
	case <-time.After(3 * time.Second):
		t.Fatal("Recv still blocked 3s after the peer died")
	}
}

func TestContextMidFrameBreaksConnection(t *testing.T) {
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("midframe"), 2, Options{})
	defer closeAll(ts)
	const n = 64 << 20 // far more than the socket buffers hold
	buf := make([]byte, n)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- ts[0].Send(ctx, 1, tg(1), buf) }()
	// Cancel only once part of the frame is on the wire: a cancel that lands
	// before Send writes anything rightly leaves the connection intact (see
	// TestContextBeforeFrameKeepsConnection). Bytes waiting in the receiver's
	// queue prove the frame started; the rest cannot fit, so Send is still
	// blocked (or about to be) in the write.
	waitQueued(t, ts[1].peers[0].c, errc)
	cancel()
	var err error
	select {
	case err = <-errc:
	case <-time.After(3 * time.Second):
		t.Fatal("cancel did not stop Send")
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrBroken) {
		t.Fatalf("want Canceled and ErrBroken, got %v", err)
	}
	// The receiver gets what was buffered, then the closed connection.
	rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer rcancel()
	if err := ts[1].Recv(rctx, 0, tg(1), make([]byte, n)); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("receiver: want ErrPeerClosed, got %v", err)
	}
	if err := ts[0].Send(context.Background(), 1, tg(1), nil); !errors.Is(err, ErrBroken) {
		t.Fatalf("later send: want ErrBroken, got %v", err)
	}
	if err := ts[0].Recv(context.Background(), 1, tg(1), nil); !errors.Is(err, ErrBroken) {
		t.Fatalf("later recv: want ErrBroken, got %v", err)
	}
}

// waitQueued waits until bytes are queued for reading on c (a frame started
// moving), failing the test if the sender returned first or nothing arrives.
func waitQueued(t *testing.T, c *net.TCPConn, errc chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := queuedIn(c)
		if err != nil {
			// No SIOCINQ: fall back to time, which is what made this flaky.
			time.Sleep(200 * time.Millisecond)
			return
		}
		if n > 0 {
			return
		}
		select {
		case err := <-errc:
			t.Fatalf("Send returned before the frame started moving: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no byte of the frame reached the receiver within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestContextBeforeFrameKeepsConnection(t *testing.T) {
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("beforeframe"), 2, Options{})
	defer closeAll(ts)
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		err := ts[1].Recv(ctx, 0, tg(1), make([]byte, 8))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrBroken) {
			t.Fatalf("want a plain DeadlineExceeded, got %v", err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		cancel()
		if err := ts[0].Send(ctx, 1, tg(1), make([]byte, 8)); !errors.Is(err, context.Canceled) {
			t.Fatalf("send with a cancelled context: %v", err)
		}
		// Still usable, with and without deadlines.
		exchange(t, ts[0], ts[1], 1, pattern(8, 1))
		exchange(t, ts[1], ts[0], 2, pattern(1<<20, 2))
	}
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		errc := make(chan error, 1)
		go func() { errc <- ts[0].Send(ctx, 1, tg(3), make([]byte, 100)) }()
		err := ts[1].Recv(ctx, 0, tg(3), make([]byte, 100))
		cancel()
		if err != nil || <-errc != nil {
			t.Fatalf("exchange after a cancel: %v", err)
		}
	}
}

func TestCloseUnblocksPendingSend(t *testing.T) {
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("closesend"), 2, Options{})
	defer closeAll(ts)
	errc := make(chan error, 1)
	go func() { errc <- ts[0].Send(context.Background(), 1, tg(1), make([]byte, 64<<20)) }()
	time.Sleep(50 * time.Millisecond)
	ts[0].Close()
	select {
	case err := <-errc:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("want ErrClosed, got %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not unblock Send")
	}
	// The peer's later calls fail instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := ts[1].Recv(ctx, 0, tg(1), make([]byte, 64<<20)); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("peer recv: want ErrPeerClosed, got %v", err)
	}
}

func TestGroupsNeverMix(t *testing.T) {
	// Two groups of 3 in one process, on one store, busy at once with the
	// same tags and sizes but different payloads.
	st := store.NewMemory()
	var groups [2][]*Transport
	var wg sync.WaitGroup
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[g] = connectGroup(t, st, fmt.Sprintf("mix/%c", 'A'+g), 3, Options{})
		}()
	}
	wg.Wait()
	if groups[0] == nil || groups[1] == nil {
		t.FailNow()
	}
	defer closeAll(groups[0])
	defer closeAll(groups[1])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 50000
	var errs atomic.Int64
	for round := range 5 {
		for g, ts := range groups {
			for from := range 3 {
				for to := range 3 {
					if from == to {
						continue
					}
					salt := g*1000 + from*10 + to + round*100
					wg.Add(2)
					go func() {
						defer wg.Done()
						if err := ts[from].Send(ctx, to, tg(uint32(round)), pattern(n, salt)); err != nil {
							t.Error(err)
							errs.Add(1)
						}
					}()
					go func() {
						defer wg.Done()
						got := make([]byte, n)
						if err := ts[to].Recv(ctx, from, tg(uint32(round)), got); err != nil {
							t.Error(err)
							errs.Add(1)
						} else if !bytes.Equal(got, pattern(n, salt)) {
							t.Errorf("group %d %d→%d: payload from elsewhere", g, from, to)
						}
					}()
				}
			}
		}
		wg.Wait()
		if errs.Load() > 0 {
			t.FailNow()
		}
	}
}

func TestBadHandshakesRejected(t *testing.T) {
	st, prefix := store.NewMemory(), uniquePrefix("hs")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		tr  *Transport
		err error
	}
	ch := make(chan res, 1)
	go func() {
		tr, err := Connect(ctx, st, prefix, 0, 2, Options{})
		ch <- res{tr, err}
	}()
	addr, err := st.Get(ctx, addrKey(prefix, 0))
	if err != nil {
		t.Fatal(err)
	}
	// A silent connection must not hold up the others.
	silent, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// Garbage is dropped without an answer.
	g, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	g.Write([]byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"))
	g.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.Copy(io.Discard, g); n != 0 || (err != nil && !errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("garbage got %d bytes back, err %v", n, err)
	}
	g.Close()

	good := hello{version: protocolVersion, kind: kindHello, group: prefixHash(prefix), from: 1, to: 0, size: 2}
	for _, tc := range []struct {
		name   string
		edit   func(*hello)
		reason uint8
	}{
		{"version", func(h *hello) { h.version = 99 }, reasonVersion},
		{"other group", func(h *hello) { h.group = prefixHash("someone/else") }, reasonGroup},
		{"addressed to another rank", func(h *hello) { h.to = 1; h.from = 2 }, reasonRank},
		{"from itself", func(h *hello) { h.from = 0 }, reasonRank},
		{"from a lower rank", func(h *hello) { h.from = 0; h.to = 0 }, reasonRank},
		{"rank out of range", func(h *hello) { h.from = 7 }, reasonRank},
	} {
		h := good
		tc.edit(&h)
		// rawHello looks up h.to's address: always dial rank 0 here.
		to := h.to
		h2 := h
		h2.to = 0
		c, ans, err := rawHello(ctx, st, prefix, h2)
		if to != 0 {
			// Re-send with the wrong destination on a fresh connection.
			c.Close()
			nc, err2 := net.Dial("tcp", string(addr))
			if err2 != nil {
				t.Fatal(err2)
			}
			c = nc.(*net.TCPConn)
			var b [helloLen]byte
			encodeHello(&b, h)
			c.Write(b[:])
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err = io.ReadFull(c, b[:]); err == nil {
				ans, err = decodeHello(b[:])
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c.Close()
		if ans.kind != kindReject || ans.reason != tc.reason {
			t.Fatalf("%s: answer %+v, want reject reason %d", tc.name, ans, tc.reason)
		}
	}
	// The real rank 1 still gets in, and the group works.
	tr1, err := Connect(ctx, st, prefix, 1, 2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.tr.Close()
	defer tr1.Close()
	exchange(t, tr1, r.tr, 4, pattern(1000, 1))
}

func TestDuplicateRankRejected(t *testing.T) {
	st, prefix := store.NewMemory(), uniquePrefix("dup")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		tr, err := Connect(ctx, st, prefix, 0, 3, Options{})
		if tr != nil {
			tr.Close()
		}
		errc <- err
	}()
	h := hello{version: protocolVersion, kind: kindHello, group: prefixHash(prefix), from: 2, to: 0, size: 3}
	c1, ans, err := rawHello(ctx, st, prefix, h)
	if err != nil || ans.kind != kindAccept {
		t.Fatalf("first: %+v %v", ans, err)
	}
	defer c1.Close()
	c2, ans, err := rawHello(ctx, st, prefix, h)
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	if ans.kind != kindReject || ans.reason != reasonDuplicate {
		t.Fatalf("duplicate: %+v", ans)
	}
	cancel() // rank 1 never comes
	select {
	case err := <-errc:
		// Rank 2 may be missing too: a cancel that lands just after the
		// accept was written drops that connection, rightly (Connect fails).
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "ranks [1") {
			t.Fatalf("want Canceled naming rank 1, got %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("cancel did not stop Connect")
	}
}

func TestDialerSeesRejection(t *testing.T) {
	// A fake rank 0 that rejects for a size mismatch: rank 1 fails at once.
	st, prefix := store.NewMemory(), uniquePrefix("dialreject")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	st.Set(context.Background(), addrKey(prefix, 0), []byte(ln.Addr().String()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var b [helloLen]byte
		io.ReadFull(c, b[:])
		encodeHello(&b, hello{version: protocolVersion, kind: kindReject, reason: reasonSize})
		c.Write(b[:])
	}()
	start := time.Now()
	_, err = Connect(context.Background(), st, prefix, 1, 2, Options{DialTimeout: 10 * time.Second})
	<-done
	if err == nil || !strings.Contains(err.Error(), "size mismatch") || time.Since(start) > 5*time.Second {
		t.Fatalf("want a prompt size-mismatch rejection, got %v after %v", err, time.Since(start))
	}

	// A listener that hangs up without answering: retried until DialTimeout.
	prefix = uniquePrefix("dialhangup")
	st.Set(context.Background(), addrKey(prefix, 0), []byte(ln.Addr().String()))
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, err = Connect(context.Background(), st, prefix, 1, 2, Options{DialTimeout: time.Second})
	ln.Close()
	<-stop
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "without answering") {
		t.Fatalf("want DeadlineExceeded after retries, got %v", err)
	}
}

func TestConnectTimesOut(t *testing.T) {
	for _, rank := range []int{0, 1} {
		start := time.Now()
		_, err := Connect(context.Background(), store.NewMemory(), uniquePrefix("alone"), rank, 2, Options{DialTimeout: 200 * time.Millisecond})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "DialTimeout") {
			t.Fatalf("rank %d: want DialTimeout, got %v", rank, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("rank %d: timed out after %v", rank, d)
		}
	}
}

func TestSizeMismatchBetweenRanks(t *testing.T) {
	st, prefix := store.NewMemory(), uniquePrefix("sizes")
	errc := make(chan error, 1)
	go func() {
		_, err := Connect(context.Background(), st, prefix, 0, 2, Options{DialTimeout: 5 * time.Second})
		errc <- err
	}()
	start := time.Now()
	_, err := Connect(context.Background(), st, prefix, 1, 3, Options{DialTimeout: 5 * time.Second})
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

func TestInvalidArguments(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ rank, size int }{{0, 0}, {-1, 2}, {2, 2}} {
		if _, err := Connect(ctx, store.NewMemory(), "x", c.rank, c.size, Options{}); err == nil {
			t.Errorf("Connect(rank %d, size %d) succeeded", c.rank, c.size)
		}
	}
	if _, err := Connect(ctx, nil, "x", 0, 1, Options{}); err == nil {
		t.Error("nil store accepted")
	}
	one, err := Connect(ctx, store.NewMemory(), "x", 0, 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if one.Name() != "tcp" || one.Size() != 1 {
		t.Fatalf("%s size %d", one.Name(), one.Size())
	}
	if err := one.Send(ctx, 0, tg(0), nil); !errors.Is(err, transport.ErrInvalidPeer) {
		t.Fatal(err)
	}
	s, err := one.Sub(ctx, 1, []int{0})
	if err != nil || s.Size() != 1 {
		t.Fatalf("sub of one: %v", err)
	}
	for _, ranks := range [][]int{{0, 0}, {1}, {-1}, {}} {
		if _, err := one.Sub(ctx, 2, ranks); err == nil {
			t.Errorf("Sub(%v) succeeded", ranks)
		}
	}
}

func TestSub(t *testing.T) {
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("sub"), 3, Options{})
	defer closeAll(ts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	split := func(id uint64, ranks []int) []transport.Transport {
		subs := make([]transport.Transport, len(ranks))
		var wg sync.WaitGroup
		for i, r := range ranks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := ts[r].Sub(ctx, id, ranks)
				if err != nil {
					t.Error(err)
					return
				}
				subs[i] = s
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		return subs
	}
	// The same id twice in a row, as after a re-split.
	for round := range 2 {
		subs := split(7, []int{2, 0})
		a, b := subs[0].(*Transport), subs[1].(*Transport)
		if a.Rank() != 0 || b.Rank() != 1 || a.Size() != 2 {
			t.Fatalf("round %d: sub ranks %d %d", round, a.Rank(), b.Rank())
		}
		exchange(t, a, b, 1, pattern(5000, round))
		a.Close()
		b.Close()
	}
	// Closing the parent closes its subs.
	subs := split(8, []int{0, 1, 2})
	ts[1].Close()
	if err := subs[1].Send(ctx, 0, tg(0), nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("sub send after parent close: %v", err)
	}
	if _, err := ts[1].Sub(ctx, 9, []int{1, 2}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Sub on a closed parent: %v", err)
	}
	for _, s := range subs {
		s.Close()
	}
	// A Sub waiting for members that never come ends when the parent closes.
	errc := make(chan error, 1)
	go func() {
		_, err := ts[0].Sub(ctx, 10, []int{0, 2})
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	ts[0].Close()
	select {
	case err := <-errc:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("want ErrClosed, got %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("parent Close did not abort Sub")
	}
}

func TestSubMembersMustAgree(t *testing.T) {
	// Ranks 0 and 2 disagree on the order of the list: 2 dials 0 as sub-rank
	// 1, which 0 expects to be parent rank 1. Both learn it at once; rank 1,
	// left waiting for a sub-rank 2 that never dials, only through its
	// context.
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("subagree"), 3, Options{})
	defer closeAll(ts)
	start := time.Now()
	errc := make(chan error, 3)
	for r, ranks := range [][]int{{0, 1, 2}, {0, 1, 2}, {0, 2, 1}} {
		go func() {
			d := 5 * time.Second
			if r == 1 {
				d = 300 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			s, err := ts[r].Sub(ctx, 1, ranks)
			if err == nil {
				s.Close()
				err = fmt.Errorf("rank %d connected", r)
			} else if r != 1 && !strings.Contains(err.Error(), "member list mismatch") {
				err = fmt.Errorf("rank %d: want a member-list mismatch, got %w", r, err)
			} else {
				err = nil
			}
			errc <- err
		}()
	}
	for range 3 {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("disagreement took %v to report", d)
	}
}

func TestNoGoroutineLeakAfterClose(t *testing.T) {
	before := runtime.NumGoroutine()
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("leak"), 4, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for from := range 4 {
		for to := range 4 {
			if from != to {
				wg.Add(2)
				go func() { defer wg.Done(); ts[from].Send(ctx, to, tg(1), pattern(100000, from)) }()
				go func() { defer wg.Done(); ts[to].Recv(ctx, from, tg(1), make([]byte, 100000)) }()
			}
		}
	}
	wg.Wait()
	// Leave calls pending, then close.
	wg.Add(2)
	go func() { defer wg.Done(); ts[1].Recv(context.Background(), 0, tg(1), make([]byte, 8)) }()
	go func() { defer wg.Done(); ts[2].Send(context.Background(), 3, tg(1), make([]byte, 32<<20)) }()
	time.Sleep(20 * time.Millisecond)
	closeAll(ts)
	wg.Wait()
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
	if after := runtime.NumGoroutine(); after > before {
		t.Logf("goroutines: %d before, %d after", before, after)
	}
}

func TestSendRecvDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("alloc"), 2, Options{})
	defer closeAll(ts)
	ctx := context.Background()
	for _, n := range []int{64, 3 << 20} {
		src, dst := pattern(n, 1), make([]byte, n)
		go1 := make(chan struct{})
		done := make(chan error)
		go func() {
			for range go1 {
				done <- ts[0].Send(ctx, 1, tg(9), src)
			}
		}()
		allocs := testing.AllocsPerRun(50, func() {
			go1 <- struct{}{}
			if err := ts[1].Recv(ctx, 0, tg(9), dst); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
		close(go1)
		if allocs > 0 {
			t.Errorf("%d bytes: %.1f allocations per Send+Recv", n, allocs)
		}
	}
}
