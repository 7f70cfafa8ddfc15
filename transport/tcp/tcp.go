package tcp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/detcoll/detcoll/transport"
)

// ErrBroken is wrapped by the errors of calls on a peer connection that an
// earlier error left out of step (a frame cut off by a context, a corrupt or
// mismatched frame, a dead peer). The connection has been closed; the peer's
// calls fail too.
var ErrBroken = errors.New("tcp: connection broken by an earlier error")

// Transport is one rank's end of a fully connected TCP mesh. See the package
// doc for the contract.
type Transport struct {
	rank, size int
	prefix     string
	st         Rendezvous
	opt        Options
	shift      uint8   // chunk shift this rank sends with
	peers      []*peer // nil at index rank

	closed atomic.Bool
	life   context.Context // cancelled by Close; aborts Sub's rendezvous
	kill   context.CancelFunc
	parent *Transport

	// progressAll: Exchange uses the progress loop (every peer inlineAll
	// and read by polling); prog is its reusable state.
	progressAll bool
	prog        progressState

	mu       sync.Mutex
	children map[*Transport]struct{}
	subSeq   map[uint64]int
}

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Splitter  = (*Transport)(nil)
	_ transport.Namer     = (*Transport)(nil)
)

// peer is the connection to one other rank. Each direction has its own lock,
// buffers and deadline; the two directions run concurrently.
type peer struct {
	id int
	c  *net.TCPConn

	bmu   sync.Mutex
	cause error // why the connection broke; nil while healthy
	// rcause is why the incoming stream alone is out of step (a tag or size
	// mismatch): receives fail, sends stay in step and still work until the
	// connection closes.
	rcause error

	snd, rcv direction
	// inlineAll: Exchange moves every message with this peer on the calling
	// goroutine (loopback and one P: inlineAllFor).
	inlineAll bool
}

type direction struct {
	mu    sync.Mutex // serialises the calls of this direction
	write bool
	c     *net.TCPConn
	dl    time.Time      // deadline now set on the conn for this direction
	fired sync.WaitGroup // one count per armed context, released by its callback or by disarm
	fire  func()         // the context.AfterFunc callback: sets a past deadline
	// Receiving direction with a polling reader: arm only notes the
	// context (pending), and the reader arms it when it is about to park
	// (armPending), so a read that polling satisfies registers nothing.
	pr      *pollReader
	pending context.Context
	parked  func() bool // the AfterFunc's stop once armPending ran
	hdr     [frameHeaderLen]byte
	crc     [4]byte
	bufs    [2][]byte
	nb      net.Buffers
	br      *bufio.Reader // receiving direction: one read syscall brings a small frame's header and payload
	iw      inlineWrite   // Exchange's non-blocking writev (sending direction)
	noCRC   bool          // sending direction: frames go without payload checksum (Options.Checksum)

	// Sender's checksum helper (writeChunksParallel).
	crcLoopFn func()
	helper    sync.WaitGroup
	abort     atomic.Bool
	crcReady  chan struct{} // one token per checksummed chunk
	crcs      []uint32
	pbuf      []byte
	pshift    uint8
}

// aLongTimeAgo is a deadline in the past: it makes pending I/O return at once.
var aLongTimeAgo = time.Unix(1, 0)

func newPeer(id int, c *net.TCPConn, poll time.Duration) *peer {
	p := &peer{id: id, c: c}
	for _, d := range []*direction{&p.snd, &p.rcv} {
		d.c = c
		d.write = d == &p.snd
		d.fire = func() {
			defer d.fired.Done()
			d.setConnDeadline(aLongTimeAgo)
		}
	}
	p.snd.crcLoopFn = p.snd.crcLoop
	p.snd.crcReady = make(chan struct{}, crcTokens)
	r := newPollReader(c, poll)
	if pr, ok := r.(*pollReader); ok {
		p.rcv.pr = pr
		pr.beforePark = p.rcv.armPending
	}
	p.rcv.br = bufio.NewReaderSize(r, readBuffer)
	return p
}

func (d *direction) setConnDeadline(t time.Time) {
	if d.write {
		d.c.SetWriteDeadline(t)
	} else {
		d.c.SetReadDeadline(t)
	}
}

// arm maps ctx onto the connection: when ctx ends (cancelled, or its
// deadline passed: a context with a deadline has a Done channel that closes
// then) the callback sets a past deadline, which makes pending I/O return.
// The connection itself carries no deadline for a call, so a call costs no
// deadline update, only the AfterFunc registration. Only a context with a
// deadline but no Done channel (no standard one) gets the deadline set on
// the connection. disarm must follow.
//
// A receiving direction whose reader polls (pollReader) arms nothing here:
// it notes ctx, and the reader arms it once its budget is spent, right
// before it parks (armPending). A read that polling satisfies, which is
// every small message between ranks that keep up, so registers nothing on
// the caller's context: an AfterFunc is four allocations and a lock of the
// context. Together with the per-call context that withTimeout no longer
// derives, a 4 KiB collective over TCP ran 4–12 % faster
// (docs/benchmarks/tcp-loopback.md, "No context work per message").
func (d *direction) arm(ctx context.Context) (stop func() bool) {
	if d.pr != nil {
		if !d.dl.IsZero() { // an earlier callback left a past deadline
			d.dl = time.Time{}
			d.setConnDeadline(d.dl)
		}
		d.pending = ctx
		return nil
	}
	return d.armNow(ctx)
}

// armPending arms the context that arm noted, once per arm: the polling
// reader calls it before it parks. A context that ended while the reader
// polled is seen now, when the budget is spent, as before (the AfterFunc
// runs at once and the park returns).
func (d *direction) armPending() {
	if d.pending == nil || d.parked != nil {
		return
	}
	if stop := d.armNow(d.pending); stop != nil {
		d.parked = stop
	}
}

func (d *direction) armNow(ctx context.Context) (stop func() bool) {
	if ctx.Done() == nil {
		dl, _ := ctx.Deadline()
		if !dl.Equal(d.dl) {
			d.dl = dl
			d.setConnDeadline(dl)
		}
		return nil
	}
	if !d.dl.IsZero() { // an earlier callback left a past deadline
		d.dl = time.Time{}
		d.setConnDeadline(d.dl)
	}
	d.fired.Add(1)
	return context.AfterFunc(ctx, d.fire)
}

func (d *direction) disarm(stop func() bool) {
	if d.pending != nil {
		d.pending = nil
		stop, d.parked = d.parked, nil
	}
	if stop == nil {
		return
	}
	if stop() {
		d.fired.Done() // the callback will never run
		return
	}
	d.fired.Wait() // the callback ran or is running: let it finish
	d.dl = aLongTimeAgo
}

func (p *peer) brokenCause() error {
	p.bmu.Lock()
	defer p.bmu.Unlock()
	return p.cause
}

// breakConn records why the stream is out of step and closes the connection
// so the peer learns at once instead of waiting for the rest of a frame.
func (p *peer) breakConn(cause error) {
	p.bmu.Lock()
	if p.cause == nil {
		p.cause = cause
	}
	p.bmu.Unlock()
	p.c.Close()
}

// mismatchLinger is how long a connection stays open after a tag or size
// mismatch. The stream is out of step (later calls fail with ErrBroken), but
// closing at once would reset the connection and could destroy the frame
// this rank sent before the peer reads it; reading that frame is how the
// peer learns about the mismatch itself. Transport.Close still closes at once.
const mismatchLinger = 500 * time.Millisecond

// breakConnLater marks the incoming stream out of step now and closes the
// connection after mismatchLinger; sends keep working until then.
func (p *peer) breakConnLater(cause error) {
	p.bmu.Lock()
	if p.rcause == nil {
		p.rcause = cause
	}
	p.bmu.Unlock()
	time.AfterFunc(mismatchLinger, func() { p.c.Close() })
}

func brokenErr(cause error) error {
	if errors.Is(cause, transport.ErrPeerClosed) {
		return fmt.Errorf("%w: %w", ErrBroken, cause)
	}
	return fmt.Errorf("%w: %v", ErrBroken, cause)
}

// Rank returns this rank.
func (t *Transport) Rank() int { return t.rank }

// Size returns the group size.
func (t *Transport) Size() int { return t.size }

// Name returns "tcp".
func (t *Transport) Name() string { return "tcp" }

func (t *Transport) fail(op string, peer int, err error) error {
	return &transport.Error{Op: op, Rank: t.rank, Peer: peer, Err: err}
}

// usable reports why a call on p cannot start, or nil.
func (t *Transport) usable(p *peer, recv bool) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	if recv {
		p.bmu.Lock()
		rc := p.rcause
		p.bmu.Unlock()
		if rc != nil {
			return brokenErr(rc)
		}
	}
	if cause := p.brokenCause(); cause != nil {
		return brokenErr(cause)
	}
	return nil
}

// Send writes one frame to peer. It returns once the kernel has taken the
// whole frame, which for messages larger than the socket buffers means the
// peer is receiving it.
func (t *Transport) Send(ctx context.Context, peer int, tag transport.Tag, buf []byte) error {
	if err := transport.CheckPeer("send", t.rank, t.size, peer); err != nil {
		return err
	}
	p := t.peers[peer]
	d := &p.snd
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := t.usable(p, false); err != nil {
		return t.fail("send", peer, err)
	}
	if err := ctx.Err(); err != nil {
		return t.fail("send", peer, err)
	}
	stop := d.arm(ctx)
	moved, err := d.writeFrame(tag, buf, t.shift)
	d.disarm(stop)
	if err != nil {
		return t.fail("send", peer, t.classify(ctx, p, err, moved))
	}
	return nil
}

// Recv reads one frame from peer straight into buf. The frame must carry tag
// and exactly len(buf) bytes.
func (t *Transport) Recv(ctx context.Context, peer int, tag transport.Tag, buf []byte) error {
	if err := transport.CheckPeer("recv", t.rank, t.size, peer); err != nil {
		return err
	}
	p := t.peers[peer]
	d := &p.rcv
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := t.usable(p, true); err != nil {
		return t.fail("recv", peer, err)
	}
	if err := ctx.Err(); err != nil {
		return t.fail("recv", peer, err)
	}
	stop := d.arm(ctx)
	moved, err := d.readFrame(tag, buf)
	d.disarm(stop)
	if err != nil {
		return t.fail("recv", peer, t.classify(ctx, p, err, moved))
	}
	return nil
}

// protoError is a frame the receiver refuses; it wraps ErrCorrupt,
// ErrTagMismatch or ErrSizeMismatch.
type protoError struct{ err error }

func (e *protoError) Error() string { return e.err.Error() }
func (e *protoError) Unwrap() error { return e.err }

// crcPiece caps one read of payload: every read's bytes are checksummed as
// soon as they arrive, while they are still in cache. 128 KiB measured best
// across 1 MiB and 64 MiB messages (64 KiB favours the large ones, 256 KiB
// the medium ones).
const crcPiece = 128 << 10

// readBuffer is the receiving direction's buffer. Reading through it, one
// read syscall takes a small frame's header and payload (and whatever
// follows) instead of one for each; a read of at least readBuffer bytes
// into an empty buffer goes straight to the caller's memory, so large
// payloads are not copied twice (bufio.Reader.Read). 32 KiB per peer.
const readBuffer = 32 << 10

// readSum reads exactly len(b) bytes into b and returns their CRC-32C.
func (d *direction) readSum(b []byte) (uint32, error) {
	var sum uint32
	for o := 0; o < len(b); {
		n, err := d.br.Read(b[o:min(o+crcPiece, len(b))])
		sum = crc32.Update(sum, castagnoli, b[o:o+n])
		o += n
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the header came: this is mid-frame
			}
			return sum, err
		}
	}
	return sum, nil
}

func (d *direction) readFrame(tag transport.Tag, buf []byte) (moved bool, err error) {
	if n, err := io.ReadFull(d.br, d.hdr[:]); err != nil {
		return n > 0, err
	}
	return d.readRest(tag, buf, frameHeaderLen)
}

// checkHeader decodes the frame header in d.hdr and checks it against the
// tag and the length the receiver expects.
func (d *direction) checkHeader(tag transport.Tag, want int) (frameHeader, error) {
	h, err := decodeFrameHeader(d.hdr[:])
	if err != nil {
		return h, &protoError{fmt.Errorf("%w: %w", transport.ErrCorrupt, err)}
	}
	if h.tag != tag {
		return h, &protoError{&transport.TagError{Got: h.tag, Want: tag}}
	}
	if h.length != uint64(want) {
		return h, &protoError{fmt.Errorf("%w: got %d bytes, want %d", transport.ErrSizeMismatch, h.length, want)}
	}
	return h, nil
}

// readRest finishes reading a frame into d.hdr and buf of which the first
// got bytes (header first) have arrived. A frame with payload checksums
// may have arrived past its header only when it has a single chunk
// (progress reads no further). moved: some of the frame has arrived.
func (d *direction) readRest(tag transport.Tag, buf []byte, got int) (moved bool, err error) {
	if got < frameHeaderLen {
		if n, err := io.ReadFull(d.br, d.hdr[got:]); err != nil {
			if got+n > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return got+n > 0, err
		}
		got = frameHeaderLen
	}
	return true, d.readPayload(tag, buf, got)
}

// readPayload is readRest once the header has arrived.
func (d *direction) readPayload(tag transport.Tag, buf []byte, got int) error {
	h, err := d.checkHeader(tag, len(buf))
	if err != nil {
		return err
	}
	off := got - frameHeaderLen
	if h.flags&flagNoPayloadCRC != 0 || off > 0 {
		if _, err := io.ReadFull(d.br, buf[off:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the header came: this is mid-frame
			}
			return err
		}
		if h.flags&flagNoPayloadCRC == 0 {
			return checkSingleChunk(h, buf)
		}
		return nil
	}
	first := int(h.firstChunk())
	want := h.crc
	for off, k := 0, 0; ; k++ {
		end := off + first
		if k > 0 {
			if _, err := io.ReadFull(d.br, d.crc[:]); err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
			want = binary.LittleEndian.Uint32(d.crc[:])
			end = min(off+1<<h.shift, len(buf))
		}
		got, err := d.readSum(buf[off:end])
		if err != nil {
			return err
		}
		if got != want {
			return checksumError(off, end, got, want)
		}
		off = end
		if off >= len(buf) {
			return nil
		}
	}
}

// singleChunk reports whether a frame with payload checksums has one chunk
// (and so one checksum, in its header).
func singleChunk(h frameHeader) bool { return h.firstChunk() == h.length }

// checkSingleChunk checks the payload of a one-chunk frame that arrived
// whole against the header's checksum.
func checkSingleChunk(h frameHeader, buf []byte) error {
	if got := crc32c(buf); got != h.crc {
		return checksumError(0, len(buf), got, h.crc)
	}
	return nil
}

func checksumError(off, end int, got, want uint32) error {
	return &protoError{fmt.Errorf("%w: payload checksum mismatch in bytes %d…%d (%#08x, frame says %#08x)",
		transport.ErrCorrupt, off, end, got, want)}
}

// classify turns the error of a call on p into the error it returns, and
// breaks the connection when the stream may be out of step.
func (t *Transport) classify(ctx context.Context, p *peer, err error, moved bool) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	if cause := p.brokenCause(); cause != nil {
		// The other direction broke (and closed) the connection meanwhile.
		return brokenErr(cause)
	}
	var out error
	var pe *protoError
	switch {
	case errors.As(err, &pe):
		out = pe.err
	case errors.Is(err, os.ErrDeadlineExceeded) && ctxDone(ctx):
		cerr := ctxErr(ctx)
		if !moved {
			return cerr // nothing moved: the stream is intact
		}
		out = fmt.Errorf("%w in the middle of a frame; %w", cerr, ErrBroken)
	case errors.Is(err, io.ErrUnexpectedEOF):
		out = fmt.Errorf("%w in the middle of a frame", transport.ErrPeerClosed)
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		out = fmt.Errorf("%w: %w", transport.ErrPeerClosed, err)
	default:
		out = err
	}
	if errors.Is(out, transport.ErrTagMismatch) || errors.Is(out, transport.ErrSizeMismatch) {
		p.breakConnLater(out)
		return out
	}
	p.breakConn(out)
	return out
}

func ctxDone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// ctxErr is ctx.Err(), or DeadlineExceeded when the connection's deadline
// fired a moment before the context's own timer.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// Close closes every connection and sub-transport. It is idempotent; pending
// calls of this rank fail with transport.ErrClosed, peers' calls involving
// this rank with transport.ErrPeerClosed.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.kill()
	for _, p := range t.peers {
		if p != nil {
			p.c.Close()
		}
	}
	t.mu.Lock()
	kids := t.children
	t.children = nil
	t.mu.Unlock()
	for k := range kids {
		k.Close()
	}
	if t.parent != nil {
		t.parent.mu.Lock()
		delete(t.parent.children, t)
		t.parent.mu.Unlock()
	}
	return nil
}

// Sub connects a fresh mesh among ranks (parent ranks; ranks[i] becomes
// sub-rank i) through the parent's Rendezvous under the key prefix
// prefix+"/sub/<id>" (prefix+"/sub/<id>#<n>" the n-th time this rank reuses
// id). Every member must call it with the same id and ranks; the handshake
// rejects members that disagree on the list. Closing the parent closes the
// sub-transport and aborts a Sub in progress.
func (t *Transport) Sub(ctx context.Context, id uint64, ranks []int) (transport.Transport, error) {
	me, err := transport.SubRank(t.rank, t.size, ranks)
	if err != nil {
		return nil, t.fail("sub", -1, err)
	}
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return nil, t.fail("sub", -1, transport.ErrClosed)
	}
	n := t.subSeq[id]
	t.subSeq[id] = n + 1
	t.mu.Unlock()

	prefix := t.prefix + "/sub/" + strconv.FormatUint(id, 10)
	if n > 0 {
		prefix += "#" + strconv.Itoa(n)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(t.life, func() { cancel(transport.ErrClosed) })
	s, err := connect(cctx, t.st, prefix, me, len(ranks), t.opt, append([]int{}, ranks...))
	stop()
	cancel(nil)
	if err != nil {
		return nil, err
	}
	s.parent = t
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		s.Close()
		return nil, t.fail("sub", -1, transport.ErrClosed)
	}
	t.children[s] = struct{}{}
	t.mu.Unlock()
	return s, nil
}
