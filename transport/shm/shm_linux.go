package shm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
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
	gosched   bool         // waits call runtime.Gosched (goschedWaits)
	moved     atomic.Int64 // nanotime of this rank's last moveOff (placement_linux.go)
	life      sync.RWMutex // held shared by every Send/Recv; Close takes it to unmap
	closed    atomic.Bool
	closeOnce sync.Once

	win  window   // the collective staging window (window_linux.go)
	exp  exposure // the exposed buffers (expose_linux.go)
	cpus int      // nodeCPUs() at Connect (tests raise it)
	// exposeOK: Options.Expose, or with ExposeAuto the calibration, lets
	// this rank take part in exposures (willExpose); calib is what the
	// calibration measured, if calibrated.
	exposeOK   bool
	calib      Calibration
	calibrated bool
	leaked     atomic.Bool // Close left the segment mapped (views never released)

	mu       sync.Mutex
	children map[*Transport]struct{}
	subSeq   map[uint64]int
}

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Splitter  = (*Transport)(nil)
	_ transport.Namer     = (*Transport)(nil)
	_ transport.Sharer    = (*Transport)(nil)
	_ transport.Exposer   = (*Transport)(nil)
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
	cpus, err := nodeCPUs()
	if err != nil {
		return nil, failc(err)
	}
	opt = opt.withDefaults(size, cpus)
	if err := opt.checkExpose(); err != nil {
		return nil, failc(err)
	}
	t := &Transport{rank: rank, size: size, prefix: prefix, st: st, opt: opt, cpus: cpus,
		children: map[*Transport]struct{}{}, subSeq: map[uint64]int{}}
	t.win.relSeen = make([]uint64, size)
	if size == 1 {
		return t, nil
	}
	if size <= cpus {
		t.spin = int64(busySpin)
	}
	t.gosched = goschedWaits(size, cpus)
	ctx, cancel := context.WithTimeout(ctx, opt.ConnectTimeout)
	defer cancel()
	if err := t.setup(ctx); err != nil {
		return nil, failc(err)
	}
	return t, nil
}

func nameKey(prefix string) string          { return prefix + "/shm/name" }
func mappedKey(prefix string, r int) string { return prefix + "/shm/mapped/" + strconv.Itoa(r) }

// setup gets the segment rank 0 created, has every rank agree that all of
// them mapped it, then records the peers and builds this rank's rings. A
// failure once the segment is in hand unlinks and unmaps it.
func (t *Transport) setup(ctx context.Context) (err error) {
	seg, mine, err := t.shareSegment(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil && seg != nil {
			seg.unlink() // harmless when already gone
			seg.unmap()
		}
	}()
	if seg != nil {
		t.publishProbe(seg)
		seg.touchPages(t.rank)
	}
	if err := t.agreeMapped(ctx, mine); err != nil {
		return err
	}
	if t.rank == 0 {
		seg.unlink() // every rank has it mapped: nothing is left behind from here on
	}
	t.seg = seg
	t.readPeerProcs()
	t.openRings()
	return t.chooseExposure(ctx)
}

// shareSegment has rank 0 create the segment and publish its name (or why it
// could not), and the other ranks open what rank 0 published. mine is this
// rank's own failure to get the segment, still to be agreed on; err ends setup
// at once.
func (t *Transport) shareSegment(ctx context.Context) (seg *segment, mine, err error) {
	if t.rank == 0 {
		return t.createAndPublish(ctx)
	}
	v, err := t.st.Get(ctx, nameKey(t.prefix))
	if err != nil {
		return nil, nil, fmt.Errorf("shm: waiting for rank 0's segment: %w", err)
	}
	s := string(v)
	switch {
	case strings.HasPrefix(s, "ok "):
		seg, mine = openSegment(s[3:], t.size)
	case strings.HasPrefix(s, "err "):
		// Every rank read this: all fail together, nobody waits for rank 0.
		return nil, nil, fmt.Errorf("%w: rank 0: %s", ErrUnavailable, s[4:])
	default:
		mine = fmt.Errorf("rank 0 published %q", s)
	}
	return seg, mine, nil
}

// createAndPublish is rank 0's part of shareSegment.
func (t *Transport) createAndPublish(ctx context.Context) (seg *segment, mine, err error) {
	win := t.opt.WindowBytes
	if t.opt.winFit {
		win = fitWindow(t.size, t.opt.RingBytes, win, shmFree())
	}
	seg, mine = createSegment(t.prefix, t.size, t.opt.RingBytes, win)
	v := "err " + fmt.Sprint(mine)
	if mine == nil {
		v = "ok " + seg.name
	}
	if err := t.st.Set(ctx, nameKey(t.prefix), []byte(v)); err != nil {
		if seg != nil {
			seg.unlink()
			seg.unmap()
		}
		return nil, nil, fmt.Errorf("shm: publishing the segment name: %w", err)
	}
	if mine != nil {
		return nil, nil, fmt.Errorf("%w: rank 0: %v", ErrUnavailable, mine)
	}
	return seg, nil, nil
}

// publishProbe writes this rank's process identity and a random probe word
// into its slot of seg, for peers' liveness checks and direct-read probing.
func (t *Transport) publishProbe(seg *segment) {
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

// agreeMapped publishes whether this rank mapped the segment (mine is why
// not) and reads every peer's outcome, so all ranks agree on success or
// failure.
func (t *Transport) agreeMapped(ctx context.Context, mine error) error {
	v := "ok"
	if mine != nil {
		v = "err " + mine.Error()
	}
	if err := t.st.Set(ctx, mappedKey(t.prefix, t.rank), []byte(v)); err != nil {
		return fmt.Errorf("shm: publishing that rank %d mapped the segment: %w", t.rank, err)
	}
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
	return nil
}

// readPeerProcs records every rank's pid and start time from t.seg.
func (t *Transport) readPeerProcs() {
	seg := t.seg
	t.procs = make([]peerProc, t.size)
	for p := range t.procs {
		ro := seg.rankOff(p)
		t.procs[p] = peerProc{pid: int(seg.u64(ro + rbPid).Load()), start: seg.u64(ro + rbStart).Load()}
	}
}

// openRings builds this rank's rings to and from every peer and, when direct
// transfers are on, marks the peers whose memory this rank can read.
func (t *Transport) openRings() {
	seg := t.seg
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
		t.seg.u64(t.winWord(t.rank, rwExp)).Store(0) // a peer mid-read fails (expose_linux.go)
		futexWake(t.seg.u32(offBell))                // window waiters see the closed flag now
		for p := range t.out {
			if p != t.rank {
				t.out[p].wakeAll()
				t.in[p].wakeAll()
			}
		}
		// Wait for this rank's calls to return (they notice the closed
		// flag at once) and for window views to be released. Views held
		// past closeWait (a caller that never releases them) keep the
		// mapping: leaked rather than unmapped under a reader.
		for deadline := time.Now().Add(closeWait); ; time.Sleep(time.Millisecond) {
			if t.life.TryLock() {
				t.seg.unmap()
				t.life.Unlock()
				break
			}
			if time.Now().After(deadline) {
				t.leaked.Store(true)
				break
			}
		}
	})
	return nil
}

// Sub connects a fresh segment among ranks (parent ranks; ranks[i] becomes
// sub-rank i) through the parent's store, under prefix+"/sub/<id>/<n>" where
// n counts earlier Subs with this id. Closing the parent closes it.
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
