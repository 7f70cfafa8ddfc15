package shm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/detcoll/detcoll/transport"
)

// Message header (hdrBytes, little endian).
const (
	hdrBytes   = 48
	hdrMagic   = 0x48536364 // "dcSH"
	flagDirect = 1          // payload stays in the sender's memory at addr
)

// Waiting: spin, then yield, then futex sleeps from minSleep doubling to
// maxSleep (a sleeper is woken by the other side at once; the timeout only
// bounds how late it notices a context, a close or a dead peer).
const (
	spinLoads     = 64
	spinYields    = 8
	minSleep      = 500 * time.Microsecond
	maxSleep      = 8 * time.Millisecond
	livenessEvery = 16 * time.Millisecond
	// busySpin is how long a waiter spins before sleeping when the group
	// has no more ranks than this host has CPUs (otherwise it does not: a
	// spinning rank would take the core its peer needs).
	busySpin = 30 * time.Microsecond
)

var clockStart = time.Now()

func nanotime() int64 { return int64(time.Since(clockStart)) }

type ring struct {
	data     []byte
	size     uint64
	chunk    uint64
	head     *atomic.Uint64
	tail     *atomic.Uint64
	dataSeq  *atomic.Uint32
	recvWait *atomic.Uint32
	spaceSeq *atomic.Uint32
	sendWait *atomic.Uint32
	broken   *atomic.Uint32
	direct   *atomic.Uint32

	pos    uint64 // the owner side's position: head for the sender, tail for the receiver
	hdr    [hdrBytes]byte
	pinned []byte // a direct Send's buffer: reachable (and so on the heap) while the peer reads it
}

func (r *ring) put(pos uint64, b []byte) {
	off := pos & (r.size - 1)
	if n := copy(r.data[off:], b); n < len(b) {
		copy(r.data, b[n:])
	}
}

func (r *ring) get(pos uint64, b []byte) {
	off := pos & (r.size - 1)
	if n := copy(b, r.data[off:]); n < len(b) {
		copy(b[n:], r.data)
	}
}

func (r *ring) signalData() {
	r.dataSeq.Add(1)
	if r.recvWait.Load() != 0 {
		futexWake(r.dataSeq)
	}
}

func (r *ring) signalSpace() {
	r.spaceSeq.Add(1)
	if r.sendWait.Load() != 0 {
		futexWake(r.spaceSeq)
	}
}

func (r *ring) wakeAll() {
	futexWake(r.dataSeq)
	futexWake(r.spaceSeq)
	futexWake(r.direct)
}

func (r *ring) breakStream() {
	r.broken.Store(1)
	r.wakeAll()
}

type peerProc struct {
	pid   int
	start uint64
	next  time.Time // next liveness check
	dead  bool
}

// Transport is one rank's end of a shared-memory group. See the package doc.
type Transport struct {
	rank, size int
	prefix     string
	st         Rendezvous
	opt        Options
	seg        *segment
	out, in    []*ring // out[p]: this rank → p; in[p]: p → this rank
	probe      *uint64

	procMu sync.Mutex
	procs  []peerProc

	spin      int64        // ns of busy spinning before a sleep (0: none)
	life      sync.RWMutex // held shared by every Send/Recv; Close takes it to unmap
	closed    atomic.Bool
	closeOnce sync.Once

	mu       sync.Mutex
	children map[*Transport]struct{}
	subSeq   map[uint64]int
}

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Splitter  = (*Transport)(nil)
	_ transport.Namer     = (*Transport)(nil)
)

func (t *Transport) Rank() int    { return t.rank }
func (t *Transport) Size() int    { return t.size }
func (t *Transport) Name() string { return "shm" }

// Segment is the path the segment had in /dev/shm (unlinked once every rank
// mapped it; empty for a group of one).
func (t *Transport) Segment() string {
	if t.seg == nil {
		return ""
	}
	return t.seg.name
}

// Direct reports whether this rank reads peer's large messages straight from
// the peer's memory (single copy) rather than through the ring.
func (t *Transport) Direct(peer int) bool {
	if t.seg == nil || peer < 0 || peer >= t.size || peer == t.rank {
		return false
	}
	return t.seg.mem[t.seg.rankOff(t.rank)+rbCanRead+peer] != 0
}

func (t *Transport) fail(op string, peer int, err error) error {
	return &transport.Error{Op: op, Rank: t.rank, Peer: peer, Err: err}
}

// Connect joins the group of size ranks whose members all call Connect with
// the same st, prefix and size, and returns rank's end. See the package doc
// for the keys it uses and how the segment is created and removed.
func Connect(ctx context.Context, st Rendezvous, prefix string, rank, size int, opt Options) (*Transport, error) {
	failc := func(err error) error { return &transport.Error{Op: "connect", Rank: rank, Peer: -1, Err: err} }
	switch {
	case st == nil:
		return nil, failc(errors.New("shm: nil Rendezvous"))
	case size < 1 || size > MaxRanks:
		return nil, failc(fmt.Errorf("shm: invalid group size %d (1…%d)", size, MaxRanks))
	case rank < 0 || rank >= size:
		return nil, failc(fmt.Errorf("shm: invalid rank %d for a group of %d", rank, size))
	}
	opt = opt.withDefaults(size)
	t := &Transport{rank: rank, size: size, prefix: prefix, st: st, opt: opt,
		children: map[*Transport]struct{}{}, subSeq: map[uint64]int{}}
	if size == 1 {
		return t, nil
	}
	if size <= runtime.NumCPU() {
		t.spin = int64(busySpin)
	}
	ctx, cancel := context.WithTimeout(ctx, opt.ConnectTimeout)
	defer cancel()
	if err := t.setup(ctx); err != nil {
		return nil, failc(err)
	}
	return t, nil
}

func nameKey(prefix string) string          { return prefix + "/shm/name" }
func mappedKey(prefix string, r int) string { return prefix + "/shm/mapped/" + strconv.Itoa(r) }

func (t *Transport) setup(ctx context.Context) (err error) {
	var seg *segment
	var mine error
	if t.rank == 0 {
		seg, mine = createSegment(t.prefix, t.size, t.opt.RingBytes)
		v := "err " + fmt.Sprint(mine)
		if mine == nil {
			v = "ok " + seg.name
		}
		if err := t.st.Set(ctx, nameKey(t.prefix), []byte(v)); err != nil {
			if seg != nil {
				seg.unlink()
				seg.unmap()
			}
			return fmt.Errorf("shm: publishing the segment name: %w", err)
		}
		if mine != nil {
			return fmt.Errorf("%w: rank 0: %v", ErrUnavailable, mine)
		}
	} else {
		v, err := t.st.Get(ctx, nameKey(t.prefix))
		if err != nil {
			return fmt.Errorf("shm: waiting for rank 0's segment: %w", err)
		}
		s := string(v)
		switch {
		case strings.HasPrefix(s, "ok "):
			seg, mine = openSegment(s[3:], t.size)
		case strings.HasPrefix(s, "err "):
			// Every rank read this: all fail together, nobody waits for rank 0.
			return fmt.Errorf("%w: rank 0: %s", ErrUnavailable, s[4:])
		default:
			mine = fmt.Errorf("rank 0 published %q", s)
		}
	}
	defer func() {
		if err != nil && seg != nil {
			seg.unlink() // harmless when already gone
			seg.unmap()
		}
	}()
	if seg != nil {
		t.probe = new(uint64)
		var rnd [8]byte
		rand.Read(rnd[:])
		*t.probe = binary.LittleEndian.Uint64(rnd[:]) | 1
		start, _, _ := procStart(os.Getpid())
		ro := seg.rankOff(t.rank)
		seg.u64(ro + rbStart).Store(start)
		seg.u64(ro + rbProbeAddr).Store(uint64(uintptr(unsafe.Pointer(t.probe))))
		seg.u64(ro + rbProbeVal).Store(*t.probe)
		seg.u64(ro + rbPid).Store(uint64(os.Getpid()))
	}
	v := "ok"
	if mine != nil {
		v = "err " + mine.Error()
	}
	if err := t.st.Set(ctx, mappedKey(t.prefix, t.rank), []byte(v)); err != nil {
		return fmt.Errorf("shm: publishing that rank %d mapped the segment: %w", t.rank, err)
	}
	// Every rank reads every outcome, so all agree on success or failure.
	var failed []string
	if mine != nil {
		failed = append(failed, fmt.Sprintf("rank %d: %v", t.rank, mine))
	}
	for p := 0; p < t.size; p++ {
		if p == t.rank {
			continue
		}
		v, err := t.st.Get(ctx, mappedKey(t.prefix, p))
		if err != nil {
			return fmt.Errorf("shm: waiting for rank %d to map the segment: %w", p, err)
		}
		if s := string(v); s != "ok" {
			failed = append(failed, fmt.Sprintf("rank %d: %s", p, strings.TrimPrefix(s, "err ")))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: %s", ErrUnavailable, strings.Join(failed, "; "))
	}
	if t.rank == 0 {
		seg.unlink() // every rank has it mapped: nothing is left behind from here on
	}
	t.seg = seg
	t.procs = make([]peerProc, t.size)
	for p := range t.procs {
		ro := seg.rankOff(p)
		t.procs[p] = peerProc{pid: int(seg.u64(ro + rbPid).Load()), start: seg.u64(ro + rbStart).Load()}
	}
	t.out = make([]*ring, t.size)
	t.in = make([]*ring, t.size)
	for p := 0; p < t.size; p++ {
		if p == t.rank {
			continue
		}
		t.out[p] = t.ring(t.rank, p)
		t.in[p] = t.ring(p, t.rank)
		// Can this rank read p's memory? Probe the word p published.
		if t.opt.DirectBytes > 0 {
			ro := seg.rankOff(p)
			var got [8]byte
			if readRemote(t.procs[p].pid, got[:], uintptr(seg.u64(ro+rbProbeAddr).Load())) == nil &&
				binary.LittleEndian.Uint64(got[:]) == seg.u64(ro+rbProbeVal).Load() {
				seg.mem[seg.rankOff(t.rank)+rbCanRead+p] = 1
			}
		}
	}
	return nil
}

func (t *Transport) ring(from, to int) *ring {
	s := t.seg
	i := s.l.pair(from, to)
	c := s.l.ctlOff + i*ctlBytes
	d := s.l.dataOff + i*s.l.ringBytes
	rb := uint64(s.l.ringBytes)
	return &ring{
		data: s.mem[d : d+s.l.ringBytes], size: rb, chunk: max(rb/16, 16<<10),
		head: s.u64(c + rcHead), tail: s.u64(c + rcTail),
		dataSeq: s.u32(c + rcDataSeq), recvWait: s.u32(c + rcRecvWaiting),
		spaceSeq: s.u32(c + rcSpaceSeq), sendWait: s.u32(c + rcSendWaiting),
		broken: s.u32(c + rcBroken), direct: s.u32(c + rcDirect),
	}
}

// interrupted is the reason a wait on peer's ring r must stop, if any.
func (t *Transport) interrupted(ctx context.Context, peer int, r *ring) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.closed.Load() {
		return transport.ErrClosed
	}
	if r.broken.Load() != 0 {
		return ErrBroken
	}
	if t.seg.u32(t.seg.rankOff(peer)+rbClosed).Load() != 0 {
		return transport.ErrPeerClosed
	}
	return nil
}

// peerDead checks (at most every livenessEvery) whether peer's process is gone.
func (t *Transport) peerDead(peer int) error {
	t.procMu.Lock()
	defer t.procMu.Unlock()
	p := &t.procs[peer]
	if !p.dead {
		now := time.Now()
		if now.Before(p.next) {
			return nil
		}
		p.next = now.Add(livenessEvery)
		if alive(p.pid, p.start) {
			return nil
		}
		p.dead = true
		t.seg.unlink() // rank 0 may have died before unlinking
	}
	return fmt.Errorf("%w (pid %d)", ErrPeerDead, p.pid)
}

// wait blocks until ready holds: a short spin, a few yields, then futex
// sleeps on word (announced through waiting, when not nil) with the
// interruption checks between them.
func (t *Transport) wait(ctx context.Context, peer int, r *ring, word, waiting *atomic.Uint32, ready func() bool) error {
	for i := 0; i < spinLoads; i++ {
		if ready() {
			return nil
		}
	}
	if t.spin > 0 {
		// Ranks fit on the cores: a peer that is running answers within
		// microseconds, cheaper than a futex round trip.
		for deadline := nanotime() + t.spin; nanotime() < deadline; {
			for i := 0; i < spinLoads; i++ {
				if ready() {
					return nil
				}
			}
		}
	}
	for i := 0; i < spinYields; i++ {
		runtime.Gosched()
		if ready() {
			return nil
		}
	}
	sleep := minSleep
	for {
		// ready first: what a peer sent before it closed is still delivered.
		if ready() {
			return nil
		}
		if err := t.interrupted(ctx, peer, r); err != nil {
			return err
		}
		seq := word.Load()
		if waiting != nil {
			waiting.Store(1)
		}
		if ready() {
			if waiting != nil {
				waiting.Store(0)
			}
			return nil
		}
		futexWait(word, seq, sleep)
		if waiting != nil {
			waiting.Store(0)
		}
		if ready() {
			return nil
		}
		if err := t.peerDead(peer); err != nil {
			return err
		}
		sleep = min(2*sleep, maxSleep)
	}
}

func (t *Transport) begin(op string, peer int) error {
	if err := transport.CheckPeer(op, t.rank, t.size, peer); err != nil {
		return err
	}
	t.life.RLock()
	if t.closed.Load() {
		t.life.RUnlock()
		return t.fail(op, peer, transport.ErrClosed)
	}
	return nil
}

// Send writes buf to peer: through the ring, or for a large buffer that the
// peer can read directly, by handing it the address and waiting until it
// has copied.
func (t *Transport) Send(ctx context.Context, peer int, tag transport.Tag, buf []byte) error {
	if err := t.begin("send", peer); err != nil {
		return err
	}
	defer t.life.RUnlock()
	r := t.out[peer]
	if err := t.interrupted(ctx, peer, r); err != nil {
		return t.fail("send", peer, err)
	}
	direct := t.opt.DirectBytes > 0 && len(buf) >= t.opt.DirectBytes &&
		t.seg.mem[t.seg.rankOff(peer)+rbCanRead+t.rank] != 0
	// Room for the header: nothing has moved if this fails.
	if err := t.wait(ctx, peer, r, r.spaceSeq, r.sendWait, func() bool { return r.size-(r.pos-r.tail.Load()) >= hdrBytes }); err != nil {
		return t.fail("send", peer, err)
	}
	h := r.hdr[:]
	binary.LittleEndian.PutUint32(h[0:], hdrMagic)
	binary.LittleEndian.PutUint32(h[4:], tag.Phase)
	binary.LittleEndian.PutUint64(h[8:], tag.Seq)
	binary.LittleEndian.PutUint64(h[16:], tag.Sig)
	binary.LittleEndian.PutUint64(h[24:], uint64(len(buf)))
	binary.LittleEndian.PutUint64(h[32:], 0)
	binary.LittleEndian.PutUint64(h[40:], 0)
	if direct {
		return t.sendDirect(ctx, peer, r, buf)
	}
	r.put(r.pos, h)
	r.pos += hdrBytes
	for rest := buf; ; {
		free := r.size - (r.pos - r.tail.Load())
		n := min(uint64(len(rest)), free, r.chunk)
		r.put(r.pos, rest[:n])
		r.pos += n
		rest = rest[n:]
		r.head.Store(r.pos) // release: the bytes above are visible with it
		r.signalData()
		if len(rest) == 0 {
			return nil
		}
		if err := t.wait(ctx, peer, r, r.spaceSeq, r.sendWait, func() bool { return r.size-(r.pos-r.tail.Load()) > 0 }); err != nil {
			r.breakStream() // half a message is in the ring
			return t.fail("send", peer, err)
		}
	}
}

func (t *Transport) sendDirect(ctx context.Context, peer int, r *ring, buf []byte) error {
	binary.LittleEndian.PutUint32(r.hdr[32:], flagDirect)
	binary.LittleEndian.PutUint64(r.hdr[40:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))))
	r.pinned = buf
	defer func() { r.pinned = nil }()
	r.direct.Store(directPosted)
	r.put(r.pos, r.hdr[:])
	r.pos += hdrBytes
	r.head.Store(r.pos)
	r.signalData()
	err := t.wait(ctx, peer, r, r.direct, nil, func() bool { return r.direct.Load() != directPosted })
	if err != nil && r.direct.CompareAndSwap(directPosted, directCancelled) {
		// The peer has not finished reading and now never reports the data.
		r.breakStream()
		return t.fail("send", peer, err)
	}
	st := r.direct.Swap(directIdle)
	runtime.KeepAlive(buf)
	if st != directDone {
		r.breakStream()
		return t.fail("send", peer, fmt.Errorf("%w: the peer could not read the message", ErrBroken))
	}
	return nil
}

// Recv reads the next message from peer into buf after checking its tag and
// length.
func (t *Transport) Recv(ctx context.Context, peer int, tag transport.Tag, buf []byte) error {
	if err := t.begin("recv", peer); err != nil {
		return err
	}
	defer t.life.RUnlock()
	r := t.in[peer]
	if err := t.wait(ctx, peer, r, r.dataSeq, r.recvWait, func() bool { return r.head.Load()-r.pos >= hdrBytes }); err != nil {
		return t.fail("recv", peer, err)
	}
	h := r.hdr[:]
	r.get(r.pos, h)
	if binary.LittleEndian.Uint32(h[0:]) != hdrMagic {
		r.breakStream()
		return t.fail("recv", peer, fmt.Errorf("%w: bad message magic %#x", transport.ErrCorrupt, binary.LittleEndian.Uint32(h[0:])))
	}
	got := transport.Tag{Phase: binary.LittleEndian.Uint32(h[4:]), Seq: binary.LittleEndian.Uint64(h[8:]), Sig: binary.LittleEndian.Uint64(h[16:])}
	if got != tag {
		return t.fail("recv", peer, &transport.TagError{Got: got, Want: tag})
	}
	n := binary.LittleEndian.Uint64(h[24:])
	if n != uint64(len(buf)) {
		return t.fail("recv", peer, fmt.Errorf("%w: got %d bytes, want %d", transport.ErrSizeMismatch, n, len(buf)))
	}
	flags := binary.LittleEndian.Uint32(h[32:])
	addr := uintptr(binary.LittleEndian.Uint64(h[40:]))
	r.pos += hdrBytes
	if flags&flagDirect != 0 {
		r.tail.Store(r.pos)
		r.signalSpace()
		err := readRemote(t.procs[peer].pid, buf, addr)
		if err == nil && r.direct.CompareAndSwap(directPosted, directDone) {
			futexWake(r.direct)
			return nil
		}
		r.direct.CompareAndSwap(directPosted, directCancelled)
		r.breakStream()
		if err == nil {
			err = fmt.Errorf("%w: the sender gave up during the copy", ErrBroken)
		}
		return t.fail("recv", peer, err)
	}
	for rest := buf; ; {
		avail := r.head.Load() - r.pos
		k := min(uint64(len(rest)), avail, r.chunk)
		r.get(r.pos, rest[:k])
		r.pos += k
		rest = rest[k:]
		if k > 0 || len(rest) == 0 {
			r.tail.Store(r.pos)
			r.signalSpace()
		}
		if len(rest) == 0 {
			return nil
		}
		if err := t.wait(ctx, peer, r, r.dataSeq, r.recvWait, func() bool { return r.head.Load() > r.pos }); err != nil {
			r.breakStream()
			return t.fail("recv", peer, err)
		}
	}
}

// Close is idempotent: it marks this rank closed in the segment (peers'
// waits on it fail with ErrPeerClosed), wakes every waiter, waits for this
// rank's calls to return and unmaps the segment.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.closed.Store(true)
		t.mu.Lock()
		kids := t.children
		t.children = nil
		t.mu.Unlock()
		for c := range kids {
			c.Close()
		}
		if t.seg == nil {
			return
		}
		t.seg.u32(t.seg.rankOff(t.rank) + rbClosed).Store(1)
		for p := range t.out {
			if p != t.rank {
				t.out[p].wakeAll()
				t.in[p].wakeAll()
			}
		}
		t.life.Lock()
		t.seg.unmap()
		t.life.Unlock()
	})
	return nil
}

// Sub connects a fresh segment among ranks (parent ranks; ranks[i] becomes
// sub-rank i) through the parent's store, under prefix+"/sub/<id>/<n>" where
// n counts earlier Subs with this id. Closing the parent closes it.
func (t *Transport) Sub(ctx context.Context, id uint64, ranks []int) (transport.Transport, error) {
	me := -1
	seen := make(map[int]bool, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= t.size || seen[r] {
			return nil, t.fail("sub", -1, fmt.Errorf("shm: invalid sub-group ranks %v", ranks))
		}
		seen[r] = true
		if r == t.rank {
			me = i
		}
	}
	if me < 0 {
		return nil, t.fail("sub", -1, fmt.Errorf("shm: rank %d not in sub-group %v", t.rank, ranks))
	}
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return nil, t.fail("sub", -1, transport.ErrClosed)
	}
	k := t.subSeq[id]
	t.subSeq[id]++
	t.mu.Unlock()
	prefix := fmt.Sprintf("%s/sub/%x/%d", t.prefix, id, k)
	sub, err := Connect(ctx, t.st, prefix, me, len(ranks), t.opt)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.children == nil { // closed meanwhile
		sub.Close()
		return sub, nil
	}
	t.children[sub] = struct{}{}
	return sub, nil
}
