package tcp

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/detcoll/detcoll/transport"
)

// errWouldBlock is a progress read that found the socket empty.
var errWouldBlock = errors.New("tcp: no data yet")

// For tests: progressResumed counts frames the loop wrote with more than
// one writev (the socket was full), progressHandoffs the loops that handed
// their rest to the blocking path.
var progressResumed, progressHandoffs atomic.Int64

// The progress loop is how Exchange moves a step's frames when every peer is
// on loopback and this process runs Go on one P (peer.inlineAll) and reads
// by polling: one goroutine writes what each socket takes and reads what
// each socket holds, without waiting on any one of them, like Open MPI's
// progress engine. Goroutines could only take turns on the one P, and a
// writer parked in the netpoller stays parked while a polling reader holds
// the P (the scheduler looks at the netpoller only when it has nothing else
// to run), so the two directions did not overlap: a peer's data waited in
// the socket while this rank wrote, and this rank's waited while it read.
// With a socket buffer that keeps the bytes in flight within the cores'
// caches (LoopbackWriteBuffer), the loop took a 16 MiB AllGather at W = 2
// from 7.8 to 4.6 ms and a 1 MiB one at W = 4 from 2.2 to 1.3 ms on a
// 2-core host (docs/benchmarks/tcp-loopback.md, "Send buffer and one
// progress loop").
//
// A loop that moves nothing for the poll budget hands what is left to the
// blocking path: the rest of each send to a goroutine that waits in the
// netpoller under the call's context, and the rest of each receive to
// readRest on this goroutine, so a slow or dead peer costs what it costs
// without the loop.

// xsend is a frame the loop is writing: n bytes of its header and payload
// are in the socket.
type xsend struct {
	p   *peer
	buf []byte
	n   int
}

// xrecv is a frame the loop is reading: n bytes of its header and payload
// have arrived.
type xrecv struct {
	p   *peer
	buf []byte
	n   int
	h   frameHeader
	// wait: a frame with several checksummed chunks, which the blocking
	// path reads (readRest); the loop reads only up to its header.
	wait bool
}

// progressState is a transport's reusable lists, so that a step allocates
// nothing. A concurrent Exchange on the same transport (not a collective's
// use) gets its own.
type progressState struct {
	mu    sync.Mutex
	sends []xsend
	recvs []xrecv
}

// exchangeProgress is Exchange with the progress loop: every send and
// receive of the step is started here and moved by progress.
func (t *Transport) exchangeProgress(ctx context.Context, tag transport.Tag, sendBuf, recvBuf func(p int) ([]byte, bool), report func(error)) {
	x := &t.prog
	if x.mu.TryLock() {
		defer x.mu.Unlock()
	} else {
		x = new(progressState)
	}
	var wg *sync.WaitGroup
	sends, recvs := x.sends[:0], x.recvs[:0]
	for p := range t.size {
		if p == t.rank {
			continue
		}
		b, ok := sendBuf(p)
		if !ok {
			continue
		}
		pp := t.peers[p]
		if !pp.snd.noCRC && t.shift != 0 && len(b) > 1<<t.shift {
			wg = t.sendAsync(ctx, p, tag, b, wg, report) // writeFrame's chunked checksums
			continue
		}
		d := &pp.snd
		d.mu.Lock()
		if err := t.startable(ctx, pp, false); err != nil {
			d.mu.Unlock()
			report(t.fail("send", p, err))
			continue
		}
		d.clearDeadline()
		encodeFrameHeader(&d.hdr, d.frame(tag, b, t.shift))
		sends = append(sends, xsend{p: pp, buf: b})
	}
	for p := range t.size {
		if p == t.rank {
			continue
		}
		b, ok := recvBuf(p)
		if !ok {
			continue
		}
		pp := t.peers[p]
		d := &pp.rcv
		d.mu.Lock()
		if err := t.startable(ctx, pp, true); err != nil {
			d.mu.Unlock()
			report(t.fail("recv", p, err))
			continue
		}
		d.arm(ctx) // notes ctx for a park in readRest; clears a stale deadline
		d.pr.nonblock = true
		recvs = append(recvs, xrecv{p: pp, buf: b})
	}
	if !t.progress(ctx, tag, sends, recvs, report) {
		progressHandoffs.Add(1)
	}
	for i := range sends {
		if s := &sends[i]; s.p != nil {
			if s.n > 0 {
				inlinePartial.Add(1)
			}
			wg = t.finishSend(ctx, s.p, s.buf, s.n, wg, report)
		}
	}
	for i := range recvs {
		if r := &recvs[i]; r.p != nil {
			r.p.rcv.pr.nonblock = false
			moved, err := r.p.rcv.readRest(tag, r.buf, r.n)
			t.endRecv(ctx, r, moved || r.n > 0, err, report)
		}
	}
	clear(sends) // do not keep the callers' buffers
	clear(recvs)
	x.sends, x.recvs = sends[:0], recvs[:0]
	if wg != nil {
		wg.Wait()
	}
}

// startable reports why a call on p cannot start, or nil.
func (t *Transport) startable(ctx context.Context, p *peer, recv bool) error {
	if err := t.usable(p, recv); err != nil {
		return err
	}
	return ctx.Err()
}

// clearDeadline undoes the past deadline an earlier context's callback
// left on the sending direction (disarm notes it in d.dl).
func (d *direction) clearDeadline() {
	if !d.dl.IsZero() {
		d.dl = time.Time{}
		d.setConnDeadline(d.dl)
	}
}

// progress moves sends and recvs until each is done, has failed, or waits
// for the blocking path (the entries left with a peer). It returns true
// when everything is done or waits for the blocking path by its nature
// (xrecv.wait), false when nothing moved for the poll budget or ctx ended.
func (t *Transport) progress(ctx context.Context, tag transport.Tag, sends []xsend, recvs []xrecv, report func(error)) bool {
	left := len(sends) + len(recvs)
	var until time.Time
	for left > 0 {
		moved := false
		for i := range sends {
			s := &sends[i]
			if s.p == nil {
				continue
			}
			m, done := t.stepSend(ctx, s, report)
			moved = moved || m
			if done {
				s.p.snd.mu.Unlock()
				*s = xsend{}
				left--
			}
		}
		for i := range recvs {
			r := &recvs[i]
			if r.p == nil || r.wait {
				continue
			}
			m, done, err := r.step(tag)
			moved = moved || m
			switch {
			case err != nil || done:
				t.endRecv(ctx, r, r.n > 0, err, report)
				left--
			case r.wait:
				left--
			}
		}
		if moved || left == 0 {
			until = time.Time{}
			continue
		}
		now := time.Now()
		if until.IsZero() {
			until = now.Add(t.peers[t.anyPeer()].rcv.pr.budget)
		} else if now.After(until) || ctx.Err() != nil {
			return false
		}
		// One P: let this process's other goroutines run, then the peers.
		runtime.Gosched()
		yieldCPU()
	}
	return true
}

// anyPeer is the index of some peer (the lowest rank other than this one).
func (t *Transport) anyPeer() int {
	if t.rank == 0 {
		return 1
	}
	return 0
}

// stepSend writes what the socket takes of s's frame without waiting.
func (t *Transport) stepSend(ctx context.Context, s *xsend, report func(error)) (moved, done bool) {
	d := &s.p.snd
	var a, b []byte
	if s.n < frameHeaderLen {
		a, b = d.hdr[s.n:], s.buf
	} else {
		b = s.buf[s.n-frameHeaderLen:]
	}
	w, err := d.tryWritev(a, b)
	if s.n > 0 && w > 0 && s.n+w == frameHeaderLen+len(s.buf) {
		progressResumed.Add(1)
	}
	s.n += w
	if err != nil {
		report(t.fail("send", s.p.id, t.classify(ctx, s.p, err, s.n > 0)))
		return w > 0, true
	}
	return w > 0, s.n == frameHeaderLen+len(s.buf)
}

// step reads what has arrived of r's frame without waiting: at most one
// read of payload, so that the loop goes on to the sends.
func (r *xrecv) step(tag transport.Tag) (moved, done bool, err error) {
	d := &r.p.rcv
	if r.n < frameHeaderLen {
		k, err := d.br.Read(d.hdr[r.n:])
		r.n += k
		if err != nil || r.n < frameHeaderLen {
			return k > 0, false, r.readErr(err)
		}
		moved = true
		if r.h, err = d.checkHeader(tag, len(r.buf)); err != nil {
			return true, false, err
		}
		if r.h.flags&flagNoPayloadCRC == 0 && !singleChunk(r.h) {
			r.wait = true
			return true, false, nil
		}
	}
	if off := r.n - frameHeaderLen; off < len(r.buf) {
		k, err := d.br.Read(r.buf[off:])
		r.n += k
		if err != nil {
			return moved || k > 0, false, r.readErr(err)
		}
		moved = moved || k > 0
	}
	if r.n-frameHeaderLen < len(r.buf) {
		return moved, false, nil
	}
	if r.h.flags&flagNoPayloadCRC == 0 {
		return moved, true, checkSingleChunk(r.h, r.buf)
	}
	return moved, true, nil
}

// readErr maps a progress read's error: nil for an empty socket, and an
// end of stream inside the frame to io.ErrUnexpectedEOF.
func (r *xrecv) readErr(err error) error {
	switch {
	case err == nil || errors.Is(err, errWouldBlock):
		return nil
	case r.n > 0 && errors.Is(err, io.EOF):
		return io.ErrUnexpectedEOF
	}
	return err
}

// endRecv releases r's direction and reports err, if any.
func (t *Transport) endRecv(ctx context.Context, r *xrecv, moved bool, err error, report func(error)) {
	d := &r.p.rcv
	d.pr.nonblock = false
	d.disarm(nil)
	if err != nil {
		err = t.fail("recv", r.p.id, t.classify(ctx, r.p, err, moved))
	}
	d.mu.Unlock()
	*r = xrecv{}
	if err != nil {
		report(err)
	}
}
