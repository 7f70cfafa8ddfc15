package tcp

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/detcoll/detcoll/transport"
)

// inlineMax is the largest message Exchange writes from the calling
// goroutine, and receives on it, over a connection that is not loopback:
// such a frame usually goes into the socket buffer with one writev. Up to
// 256 KiB the goroutines cost more than they overlap: with one P per rank
// (the launcher's GOMAXPROCS on a small host) they only take turns, and a
// goroutine per peer and direction adds threads that compete with the
// peers' ranks for the cores. Raising it from 64 KiB took 128 and 256 KiB
// AllGathers at W = 4 on 2 cores from 687 and 969 µs to 467 and 688, and
// was neutral or better in every other row (docs/benchmarks/tcp-loopback.md,
// "Inline up to 256 KiB"). Over loopback with one P every message is
// inline (peer.inlineAll, inlineAllFor).
const inlineMax = 256 << 10

// inlines reports whether Exchange moves a message of n bytes with p on the
// calling goroutine.
func (p *peer) inlines(n int) bool { return n <= inlineMax || p.inlineAll }

var _ transport.Exchanger = (*Transport)(nil)

// Exchange runs one step of a collective with every peer p: it sends
// sendBuf(p) to p and receives recvBuf(p) from p, skipping either when its
// ok result is false, and returns once all of them have finished. Every
// error is passed to report (from any goroutine; report may cancel ctx to
// stop the others) and Exchange returns nothing itself.
//
// It does what a goroutine per Send and Recv does, without them: a send is
// written with one non-blocking writev from the calling goroutine (only the
// rest of a frame the socket would not take at once goes to a goroutine),
// and the receives run one after another on the calling goroutine once
// every send has been started, so no rank waits on a peer that waits on it.
// Over a connection that is not loopback, or with more than one P, only
// messages of at most inlineMax (256 KiB) go so; larger ones get a
// goroutine per peer and direction, which keeps every link of a real
// network (or several cores) busy at once. On loopback with one P, where
// goroutines can only take turns, one goroutine per rank is what Open
// MPI's progress loop is: it removes the hand-offs that cost more than the
// transport itself per small message (docs/benchmarks/tcp-lean-2026-12-01.md)
// and the threads that compete with the peers for the cores on large ones
// (docs/benchmarks/tcp-loopback.md, "Raw syscalls and every message
// inline"). There, and where every peer is read by polling, the step runs
// as one progress loop (exchangeProgress) instead of sends that finish in
// goroutines and receives one after another.
func (t *Transport) Exchange(ctx context.Context, tag transport.Tag, sendBuf, recvBuf func(p int) ([]byte, bool), report func(error)) {
	if t.progressAll {
		t.exchangeProgress(ctx, tag, sendBuf, recvBuf, report)
		return
	}
	// wg is made only when a goroutine is needed: small exchanges allocate
	// nothing.
	var wg *sync.WaitGroup
	for p := range t.size {
		if p == t.rank {
			continue
		}
		if b, ok := sendBuf(p); ok {
			wg = t.sendStart(ctx, p, tag, b, wg, report)
		}
	}
	var small [8]int
	inline := small[:0]
	for p := range t.size {
		if p == t.rank {
			continue
		}
		b, ok := recvBuf(p)
		switch {
		case !ok:
		case t.peers[p].inlines(len(b)):
			inline = append(inline, p)
		default:
			wg = t.recvAsync(ctx, p, tag, b, wg, report)
		}
	}
	for _, p := range inline {
		b, _ := recvBuf(p)
		if err := t.Recv(ctx, p, tag, b); err != nil {
			report(err)
		}
	}
	if wg != nil {
		wg.Wait()
	}
}

func addOne(wg *sync.WaitGroup) *sync.WaitGroup {
	if wg == nil {
		wg = new(sync.WaitGroup)
	}
	wg.Add(1)
	return wg
}

func (t *Transport) recvAsync(ctx context.Context, peer int, tag transport.Tag, buf []byte, wg *sync.WaitGroup, report func(error)) *sync.WaitGroup {
	wg = addOne(wg)
	go func() {
		defer wg.Done()
		if err := t.Recv(ctx, peer, tag, buf); err != nil {
			report(err)
		}
	}()
	return wg
}

func (t *Transport) sendAsync(ctx context.Context, peer int, tag transport.Tag, buf []byte, wg *sync.WaitGroup, report func(error)) *sync.WaitGroup {
	wg = addOne(wg)
	go func() {
		defer wg.Done()
		if err := t.Send(ctx, peer, tag, buf); err != nil {
			report(err)
		}
	}()
	return wg
}

// inlinePartial counts frames whose first write the socket cut short, inline
// or in the progress loop, and that a goroutine finished (for tests: the
// rare path).
var inlinePartial atomic.Int64

// sendStart sends buf to peer: a small frame inline when the socket takes
// it at once, otherwise (or for what the socket did not take) in a
// goroutine counted by wg, which it returns (made if nil).
func (t *Transport) sendStart(ctx context.Context, peer int, tag transport.Tag, buf []byte, wg *sync.WaitGroup, report func(error)) *sync.WaitGroup {
	if err := transport.CheckPeer("send", t.rank, t.size, peer); err != nil {
		report(err)
		return wg
	}
	p := t.peers[peer]
	if !p.inlines(len(buf)) || !p.snd.noCRC && t.shift != 0 && len(buf) > 1<<t.shift {
		// A large frame where goroutines may overlap (see inlineMax), or a
		// checksummed frame of several chunks (writeFrame's job).
		return t.sendAsync(ctx, peer, tag, buf, wg, report)
	}
	d := &p.snd
	d.mu.Lock()
	if err := t.usable(p, false); err != nil {
		d.mu.Unlock()
		report(t.fail("send", peer, err))
		return wg
	}
	if err := ctx.Err(); err != nil {
		d.mu.Unlock()
		report(t.fail("send", peer, err))
		return wg
	}
	encodeFrameHeader(&d.hdr, d.frame(tag, buf, t.shift))
	n, err := d.tryWritev(d.hdr[:], buf)
	switch {
	case err != nil:
		err = t.fail("send", peer, t.classify(ctx, p, err, n > 0))
		d.mu.Unlock()
		report(err)
		return wg
	case n == frameHeaderLen+len(buf):
		d.mu.Unlock()
		return wg
	}
	inlinePartial.Add(1)
	return t.finishSend(ctx, p, buf, n, wg, report)
}

// finishSend writes the rest of a frame whose first n bytes the socket took
// (n may be 0) in a goroutine, which inherits p.snd.mu and unlocks it.
func (t *Transport) finishSend(ctx context.Context, p *peer, buf []byte, n int, wg *sync.WaitGroup, report func(error)) *sync.WaitGroup {
	wg = addOne(wg)
	d := &p.snd
	go func() {
		defer wg.Done()
		defer d.mu.Unlock()
		defer clear(d.bufs[:])
		stop := d.arm(ctx)
		if n < frameHeaderLen {
			d.bufs[0], d.bufs[1] = d.hdr[n:], buf
		} else {
			d.bufs[0], d.bufs[1] = nil, buf[n-frameHeaderLen:]
		}
		d.nb = d.bufs[:]
		w, err := d.nb.WriteTo(d.c)
		d.disarm(stop)
		if err != nil {
			report(t.fail("send", p.id, t.classify(ctx, p, err, n > 0 || w > 0)))
		}
	}()
	return wg
}
