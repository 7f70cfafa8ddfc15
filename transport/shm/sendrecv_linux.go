package shm

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/detcoll/detcoll/transport"
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
	// shortSpin is the part of the spin before a waiter looks whether a
	// peer shares its CPU (sharerOn): most waits end sooner, and then cost
	// no getcpu(2) and no yield on a stale entry (W = 2, 4 KiB
	// ReduceScatter 2.1 → 2.9 µs with the look at the start of the spin).
	shortSpin = 3 * time.Microsecond
)

// closeWait bounds how long Close waits for window views to be released
// before it leaves the segment mapped (a variable for the tests).
var closeWait = 5 * time.Second

var clockStart = time.Now()

// yieldFor is how long a waiter of an oversubscribed group (more ranks than
// CPUs) yields its core with sched_yield before it sleeps, in ns:
// DETCOLL_SHM_YIELD_US µs, default 200 (W = 4 on 2 cores: a 4 KiB
// AllReduce took 51–55 µs with futex sleeps only, 25–28 µs with 50–200 µs
// of yielding; docs/shm.md). 0 turns it off.
var yieldFor = yieldDefault()

func yieldDefault() int64 {
	if v, ok := os.LookupEnv("DETCOLL_SHM_YIELD_US"); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
			return int64(n) * 1000
		}
	}
	return int64(200 * time.Microsecond)
}

func nanotime() int64 { return int64(time.Since(clockStart)) }

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
func (t *Transport) wait(ctx context.Context, peer int, r *ring, word, waiting *atomic.Uint32, ready func() bool, check func() error) error {
	if ok, err := t.poll(ready, func() error { return t.waitCheck(ctx, peer, r, check) }); ok || err != nil {
		return err
	}
	sleep := minSleep
	for {
		// ready first: what a peer sent before it closed is still delivered.
		if ready() {
			return nil
		}
		if err := checked(ready, func() error { return t.waitCheck(ctx, peer, r, check) }); err != nil {
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
		if err := checked(ready, func() error { return t.peerDead(peer) }); err != nil {
			return err
		}
		sleep = min(2*sleep, maxSleep)
	}
}

// checked runs a wait's check and, when it fails, looks once more whether
// the wait is over. A peer may send (or publish) and then close between the
// wait's last look and the check of its closed flag; its stores come
// before the flag, so the look after the check sees them, and what it sent
// before it closed is delivered. Without it a rank whose core was taken at
// that moment failed with ErrPeerClosed with the message it waited for in
// its ring (capi's TestCHost in CI, 2026-12-06; docs/shm.md, "Not done,
// known issues").
func checked(ready func() bool, check func() error) error {
	if hook := waitHook.Load(); hook != nil {
		(*hook)()
	}
	if err := check(); err != nil && !ready() {
		return err
	}
	return nil
}

// waitHook, when set (tests only), runs right before a wait's check, where
// a peer's send and close may fall. Atomic: a wait of another test's
// transport may still be running when a test sets it.
var waitHook atomic.Pointer[func()]

// poll is every wait's phases before it sleeps: a few loads; when the
// group fits on the cores a busy spin (a running peer answers within
// microseconds, cheaper than a futex round trip); a few Go yields; and when
// it does not fit, sched_yield for yieldFor, giving the core to a peer that
// has work (as Open MPI's progress loop does), with interrupted checked
// between yields. It reports whether ready held, or the interruption.
func (t *Transport) poll(ready func() bool, interrupted func() error) (bool, error) {
	for i := 0; i < spinLoads; i++ {
		if ready() {
			return true, nil
		}
	}
	if t.spin > 0 {
		start := nanotime()
		if spinUntil(ready, start+min(t.spin, int64(shortSpin))) {
			return true, nil
		}
		cpu := currentCPU()
		if sharer := t.sharerOn(cpu); sharer >= 0 && !t.moveOff(cpu, sharer) {
			// Spinning on would hold the core the peer needs: yield it
			// for the rest of the spin instead.
			for deadline := start + t.spin; nanotime() < deadline; {
				schedYield()
				if ready() {
					return true, nil
				}
			}
		} else if spinUntil(ready, start+t.spin) {
			return true, nil
		}
	}
	for i := 0; i < spinYields && t.gosched; i++ {
		runtime.Gosched()
		if ready() {
			return true, nil
		}
	}
	if t.spin == 0 && yieldFor > 0 {
		for deadline := nanotime() + yieldFor; nanotime() < deadline; {
			schedYield()
			if ready() {
				return true, nil
			}
			if err := checked(ready, interrupted); err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

// spinUntil polls ready until it holds (true) or the clock passes deadline.
func spinUntil(ready func() bool, deadline int64) bool {
	for nanotime() < deadline {
		for i := 0; i < spinLoads; i++ {
			if ready() {
				return true
			}
		}
	}
	return false
}

// sharerOn (placement_linux.go) records the CPU this rank is about to
// busy-wait on and names a rank that last began a busy wait on the same
// one. After a pause the scheduler often places a woken rank on its
// waker's core, and the two then take turns on it, each spinning out its
// whole spin while the other waits to run (about 60 µs per step instead of
// 1–5; docs/shm.md, "Placement after a pause"). The higher rank of the two
// moves to another CPU (moveOff); a rank that cannot yields instead. A
// stale entry costs a move or a few yields where a spin would have done.

// waitCheck runs a wait's own check (a peer in another collective) before
// the interruptions: a peer that sent what shows the mismatch and then
// closed (or exited) is reported as the mismatch, not as a closed peer.
func (t *Transport) waitCheck(ctx context.Context, peer int, r *ring, check func() error) error {
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	return t.interrupted(ctx, peer, r)
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
	if err := t.wait(ctx, peer, r, r.spaceSeq, r.sendWait, func() bool { return r.size-(r.pos-r.tail.Load()) >= hdrBytes }, nil); err != nil {
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
		if err := t.wait(ctx, peer, r, r.spaceSeq, r.sendWait, func() bool { return r.size-(r.pos-r.tail.Load()) > 0 }, nil); err != nil {
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
	err := t.wait(ctx, peer, r, r.direct, nil, func() bool { return r.direct.Load() != directPosted }, nil)
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
	hdrReady := func() bool { return r.head.Load()-r.pos >= hdrBytes }
	if err := t.wait(ctx, peer, r, r.dataSeq, r.recvWait, hdrReady, func() error { return t.publishedAhead(peer, tag, hdrReady) }); err != nil {
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
		if err := t.wait(ctx, peer, r, r.dataSeq, r.recvWait, func() bool { return r.head.Load() > r.pos }, nil); err != nil {
			r.breakStream()
			return t.fail("recv", peer, err)
		}
	}
}

// goschedWaits reports whether a waiter calls runtime.Gosched between its
// spin and its sched_yield or sleep. It does unless the group is
// oversubscribed (more ranks than CPUs) and this process has more than one
// P. Gosched puts the waiter on the global run queue and wakes an idle
// P's thread (runtime.wakep), which takes the waiter over while the first
// thread parks: two futex calls and a thread switch per call. At W = 4 on
// two cores those were half of all futex calls of a 4 KiB ReduceScatter
// run, on cores the other ranks need, and without them its median went
// from 17 to 14 µs and 64 KiB from 33 to 22. With one P, Gosched is what
// lets the process's other goroutines run; in a group that fits the CPUs
// it costs nothing measurable and the waits without it were slower (W = 2,
// 4 KiB ReduceScatter 1.9 → 3.5 µs, median of 10). docs/shm.md, "Gosched
// in the waits".
func goschedWaits(size, cpus int) bool {
	return runtime.GOMAXPROCS(0) == 1 || size <= cpus
}
