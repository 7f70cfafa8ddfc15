package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/detcoll/detcoll/transport"
)

// The window (transport.Sharer): every rank owns winSlots slots of
// layout.winBytes in the segment, a header line per slot, and a line with
// two counters, the publications it has published and the ones it has
// released. Publication k (1, 2, …) uses slot k % winSlots. Before writing a
// slot for publication k a rank waits until every rank has released
// k − winSlots, the last user of that slot; after publishing k it waits
// until every rank's header of that slot holds k, then checks their tags.
// So the ranks run in lockstep, a rank may hold the views of k while it
// fills k+1, and nobody overwrites a block a peer may still be reading.
//
// A publication is one line: the header holds the publication number
// (stored last), the tag, the block's length and offset, and how many
// publications the rank had released when it published. Waiting ranks poll
// that line and nothing else, and a peer's release count from it spares
// the next Stage a look at the peer's counters. On this machine a line
// that another core wrote takes about 0.5 µs to arrive, and a 4 KiB
// ReduceScatter at W = 2 waited for three such lines in a row before
// (docs/shm.md, "One line per publication").
//
// Every publish and release bumps one futex word of the segment (the
// bell); waiters spin, yield and then sleep on it, as the ring waits do.
//
// A publication smaller than the slot does not always start at the slot's
// first byte: each slot has a cursor that moves on by the staged bytes
// (rounded up to a page) and goes back to 0 when the next publication would
// pass rotateSpan, and the header records the offset. Lines the peers read
// a call ago are still in their caches, and a store to such a line must
// first take it back from every one of them: a 64 KiB AllGather at W = 2
// spent 70 % of its time so. Lines written 32 publications ago have left
// the peers' caches for the shared last level, where a store takes them at
// once (docs/shm.md, "Rotating offsets in the slots").

// rotateSpan bounds the bytes of a slot that publications rotate over, so
// that a large window does not spread small messages over more memory than
// the caches hold.
const rotateSpan = 1 << 20

// rotateAlign is the step of the cursors: whole pages keep a staged block
// as aligned as the slot.
const rotateAlign = pageSize

// window is this rank's side of the window. It is used by one goroutine at
// a time (transport.Sharer's rule), so its fields need no lock.
type window struct {
	staged int           // bytes staged in the next slot (valid when ok)
	at     int           // their offset in the slot (valid when ok)
	cursor [winSlots]int // where each slot's next publication starts
	ok     bool          // Stage has returned a slot that is not yet published
	pub    uint64
	rel    uint64
	// relSeen holds, per peer, a release count it has reached (from its
	// headers or its counter): Stage looks at the counter only when this
	// is too low.
	relSeen []uint64
	hold    int // stages and publications not yet released: the life lock is held while > 0
	broken  error
	views   [winSlots][][]byte
}

var errNoWindow = errors.New("shm: this transport has no window (a group of one, or WindowBytes < 0)")

// WindowBytes is the capacity of one window slot (0: no window).
func (t *Transport) WindowBytes() int {
	if t.seg == nil {
		return 0
	}
	return t.seg.l.winBytes
}

func (t *Transport) winWord(r, off int) int { return t.seg.rankOff(r) + t.seg.l.rbWin + off }

// ringBell wakes the ranks waiting on the window. It moves the bell on
// every publish and release, even with nobody asleep: moving it only for
// sleepers, which saves a contended line a call, made four ranks on two
// cores slower, twice (docs/shm.md, "Tried and not kept").
func (t *Transport) ringBell() {
	t.seg.u32(offBell).Add(1)
	if t.seg.u32(offBellWts).Load() != 0 {
		futexWake(t.seg.u32(offBell))
	}
}

// hold takes the life lock for the first outstanding stage (Close waits for
// the views to be released before it unmaps them).
func (t *Transport) hold() error {
	if t.win.hold == 0 {
		t.life.RLock()
		if t.closed.Load() {
			t.life.RUnlock()
			return transport.ErrClosed
		}
	}
	t.win.hold++
	return nil
}

func (t *Transport) unhold() {
	t.win.hold--
	if t.win.hold == 0 {
		t.life.RUnlock()
	}
}

// Stage returns this rank's next slot, n bytes, once every rank has
// released the publication that used it last.
func (t *Transport) Stage(ctx context.Context, n int) ([]byte, error) {
	const op = "stage"
	w := &t.win
	switch {
	case t.WindowBytes() == 0:
		return nil, t.fail(op, -1, errNoWindow)
	case w.broken != nil:
		return nil, t.fail(op, -1, w.broken)
	case n < 0 || n > t.seg.l.winBytes:
		return nil, t.fail(op, -1, fmt.Errorf("%w: %d bytes for a %d-byte window slot", transport.ErrSizeMismatch, n, t.seg.l.winBytes))
	case w.ok:
		return nil, t.fail(op, -1, errors.New("shm: Stage twice without Publish"))
	case w.pub+1-w.rel > winSlots:
		return nil, t.fail(op, -1, fmt.Errorf("shm: Stage with %d publications unreleased (at most %d)", w.pub-w.rel, winSlots-1))
	}
	if err := t.hold(); err != nil {
		return nil, t.fail(op, -1, err)
	}
	k := w.pub + 1
	if k > winSlots {
		need := k - winSlots
		if p, err := t.winWait(ctx, func(p int) bool { return t.released(p, need) }, nil); err != nil {
			t.unhold()
			w.broken = err
			return nil, t.fail(op, p, err)
		}
	}
	slot := int(k % winSlots)
	w.at = rotate(&w.cursor[slot], n, min(t.seg.l.winBytes, rotateSpan))
	w.staged, w.ok = n, true
	off := t.seg.l.winSlot(t.rank, slot) + w.at
	return t.seg.mem[off : off+n : off+n], nil
}

// released reports whether peer has released publication need, from what
// this rank has seen of it when that is enough.
func (t *Transport) released(peer int, need uint64) bool {
	seen := t.win.relSeen
	if seen[peer] >= need {
		return true
	}
	seen[peer] = t.seg.u64(t.winWord(peer, rwRel)).Load()
	return seen[peer] >= need
}

// rotate returns the offset in a slot of span bytes for a publication of n
// bytes and moves the slot's cursor past it; a publication that does not fit
// between the cursor and the span starts at 0.
func rotate(cursor *int, n, span int) int {
	at := *cursor
	if at+n > span {
		at = 0
	}
	*cursor = at + (n+rotateAlign-1)/rotateAlign*rotateAlign
	return at
}

// Publish makes the staged slot visible under tag, waits for every rank's
// and returns their blocks.
func (t *Transport) Publish(ctx context.Context, tag transport.Tag) ([][]byte, error) {
	if err := t.post(tag); err != nil {
		return nil, err
	}
	return t.collect(ctx, "publish", tag)
}

// post is Publish up to the wait: it makes the staged slot visible under
// tag.
func (t *Transport) post(tag transport.Tag) error {
	w := &t.win
	if !w.ok {
		return t.fail("publish", -1, errors.New("shm: Publish without Stage"))
	}
	w.ok = false
	k := w.pub + 1
	slot := int(k % winSlots)
	h := t.winWord(t.rank, rwHdr+slot*64)
	t.seg.u32(h + hdrPhase).Store(tag.Phase)
	t.seg.u64(h + hdrLen).Store(uint64(w.staged))
	t.seg.u64(h + hdrSeq).Store(tag.Seq)
	t.seg.u64(h + hdrSig).Store(tag.Sig)
	t.seg.u64(h + hdrAt).Store(uint64(w.at))
	t.seg.u64(h + hdrRel).Store(w.rel)
	t.seg.u64(h + hdrPub).Store(k)               // after the rest of the header and the data
	t.seg.u64(t.winWord(t.rank, rwPub)).Store(k) // for the mismatch checks, after the header
	w.pub = k
	t.ringBell()
	return nil
}

// collect is the rest of Publish: it waits until every rank has published
// this rank's last post, checks their headers and returns their blocks.
func (t *Transport) collect(ctx context.Context, op string, tag transport.Tag) ([][]byte, error) {
	w := &t.win
	k := w.pub
	slot := int(k % winSlots)
	fail := func(p int, err error) ([][]byte, error) {
		w.broken = err
		t.unhold()
		return nil, t.fail(op, p, err)
	}
	if p, err := t.winWait(ctx, func(p int) bool { return t.seg.u64(t.winWord(p, rwHdr+slot*64+hdrPub)).Load() >= k },
		func(p int) error { return t.messageWaiting(p, tag, k) }); err != nil {
		return fail(p, err)
	}
	views := w.views[slot]
	if views == nil {
		views = make([][]byte, t.size)
		w.views[slot] = views
	}
	for p := 0; p < t.size; p++ {
		ph := t.winWord(p, rwHdr+slot*64)
		got := t.pubTag(p, slot)
		n, at := t.seg.u64(ph+hdrLen).Load(), t.seg.u64(ph+hdrAt).Load()
		switch {
		case t.seg.u64(ph+hdrPub).Load() != k || n > uint64(t.seg.l.winBytes) || at > uint64(t.seg.l.winBytes)-n:
			return fail(p, fmt.Errorf("%w: window slot of rank %d holds publication %d (%d bytes at %d), want %d",
				transport.ErrCorrupt, p, t.seg.u64(ph+hdrPub).Load(), n, at, k))
		case got != tag:
			return fail(p, &transport.TagError{Got: got, Want: tag})
		}
		if p != t.rank {
			// At most k-1: a rank publishing k has not released it, and
			// a bad count must not let Stage overwrite a block in use.
			w.relSeen[p] = max(w.relSeen[p], min(t.seg.u64(ph+hdrRel).Load(), k-1))
		}
		off := t.seg.l.winSlot(p, slot) + int(at)
		views[p] = t.seg.mem[off : off+int(n) : off+int(n)]
	}
	return views, nil
}

// Release marks the oldest unreleased publication as read.
func (t *Transport) Release() {
	w := &t.win
	if w.rel >= w.pub || w.hold == 0 {
		return
	}
	w.rel++
	if w.broken == nil {
		t.seg.u64(t.winWord(t.rank, rwRel)).Store(w.rel)
		t.ringBell()
	}
	t.unhold()
}

// winWakes counts window sleeps that ended before their timeout (for the
// test that a publication wakes a sleeper).
var winWakes atomic.Int64

// winWait blocks until ready(p) holds for every peer p, with the waits and
// interruption checks of the rings. On failure it names the peer waited for.
func (t *Transport) winWait(ctx context.Context, ready func(p int) bool, check func(p int) error) (int, error) {
	next := 0 // peers below next are ready: each condition only becomes true
	pending := func() int {
		for ; next < t.size; next++ {
			if next != t.rank && !ready(next) {
				return next
			}
		}
		return -1
	}
	failed := -1
	ok, err := t.poll(func() bool { return pending() < 0 }, func() error {
		if failed = pending(); failed < 0 {
			return nil
		}
		return t.winCheck(ctx, failed, check)
	})
	switch {
	case err != nil:
		return failed, err
	case ok:
		return -1, nil
	}
	bell, waiters := t.seg.u32(offBell), t.seg.u32(offBellWts)
	sleep := minSleep
	for {
		p := pending()
		if p < 0 {
			return -1, nil
		}
		done := func() bool { return pending() < 0 }
		if err := checked(done, func() error { return t.winCheck(ctx, p, check) }); err != nil {
			return p, err
		}
		seq := bell.Load()
		waiters.Add(1)
		if pending() < 0 {
			waiters.Add(^uint32(0))
			return -1, nil
		}
		if !futexWait(bell, seq, sleep) {
			winWakes.Add(1)
		}
		waiters.Add(^uint32(0))
		if pending() < 0 {
			return -1, nil
		}
		if err := checked(done, func() error { return t.peerDead(p) }); err != nil {
			return p, err
		}
		sleep = min(2*sleep, maxSleep)
	}
}

// A rank's messages to a peer are in the ring before its later
// publications, and ranks run the same steps: so a peer that has published
// more than this rank while this rank waits for its message, or that sent a
// message while this rank waits for its publication, is in another step of
// another collective. Both are reported as a tag mismatch (the peer's tag as
// Got), as a message with the wrong tag would be.

// publishedAhead is the check of a Recv from peer waiting for a header.
func (t *Transport) publishedAhead(peer int, want transport.Tag, ready func() bool) error {
	if t.seg.l.winBytes == 0 {
		return nil
	}
	k := t.seg.u64(t.winWord(peer, rwPub)).Load()
	if k <= t.seg.u64(t.winWord(t.rank, rwPub)).Load() || ready() {
		return nil
	}
	return &transport.TagError{Got: t.pubTag(peer, int(k%winSlots)), Want: want}
}

// messageWaiting is the check of a Publish of k waiting for peer. The
// peer's publication is re-read after its message is seen: a peer that
// published k, finished the step and sent the first message of the next
// one between this rank's readiness test and this check is not ahead.
func (t *Transport) messageWaiting(peer int, want transport.Tag, k uint64) error {
	r := t.in[peer]
	if r.head.Load()-r.pos < hdrBytes || t.seg.u64(t.winWord(peer, rwPub)).Load() >= k {
		return nil
	}
	var h [hdrBytes]byte
	r.get(r.pos, h[:])
	got := transport.Tag{Phase: binary.LittleEndian.Uint32(h[4:]), Seq: binary.LittleEndian.Uint64(h[8:]), Sig: binary.LittleEndian.Uint64(h[16:])}
	return &transport.TagError{Got: got, Want: want}
}

func (t *Transport) pubTag(p, slot int) transport.Tag {
	ph := t.winWord(p, rwHdr+slot*64)
	return transport.Tag{Phase: t.seg.u32(ph + hdrPhase).Load(), Seq: t.seg.u64(ph + hdrSeq).Load(), Sig: t.seg.u64(ph + hdrSig).Load()}
}

// winCheck is waitCheck for the window: the mismatch check first.
func (t *Transport) winCheck(ctx context.Context, peer int, check func(p int) error) error {
	if check != nil {
		if err := check(peer); err != nil {
			return err
		}
	}
	return t.winInterrupted(ctx, peer)
}

func (t *Transport) winInterrupted(ctx context.Context, peer int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.closed.Load() {
		return transport.ErrClosed
	}
	if t.seg.u32(t.seg.rankOff(peer)+rbClosed).Load() != 0 {
		return transport.ErrPeerClosed
	}
	return nil
}
