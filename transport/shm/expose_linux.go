package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/detcoll/detcoll/transport"
)

// Exposed buffers (transport.Exposer). An exposure is a window publication
// of a descriptor instead of data: the buffer's address, its length and
// whether this rank can read every peer's memory. Peers copy from the buffer
// with process_vm_readv, as the rings' direct messages do, and release the
// publication when they are done; Unexpose waits for every release.
//
// The buffer stays the owner's: a peer that finishes a copy checks that the
// owner's exposure word (rwExp) still names the publication. The owner
// clears the word before it returns from a failed Unexpose or closes, so a
// copy that overlapped an owner giving up fails instead of keeping bytes the
// owner may already be overwriting; a copy that ended before the clear read
// a buffer the owner had not yet handed back.

// exposeDesc is the size of an exposure's descriptor: address, length,
// flags.
const exposeDesc = 24

// exposeWilling: the publishing rank can read every peer's memory and has
// a CPU for every rank of the group (willExpose).
const exposeWilling = 1

// exposure is this rank's side of the current exposure.
type exposure struct {
	k      uint64   // its publication (0: none)
	posted bool     // Expose has posted it, Exposed has not yet returned
	buf    []byte   // this rank's exposed buffer, kept alive until Unexpose
	addr   []uint64 // every rank's buffer address
	n      []int    // and length
	tag    transport.Tag
	count  uint64 // exposures that reached Exposed and succeeded (for tests)
}

// Expose implements transport.Exposer.
func (t *Transport) Expose(ctx context.Context, tag transport.Tag, buf []byte) error {
	const op = "expose"
	w, e := &t.win, &t.exp
	switch {
	case e.k != 0:
		return t.fail(op, -1, errors.New("shm: Expose twice without Unexpose"))
	case w.pub != w.rel:
		return t.fail(op, -1, fmt.Errorf("shm: Expose with %d publications unreleased", w.pub-w.rel))
	}
	slot, err := t.Stage(ctx, exposeDesc)
	if err != nil {
		return err
	}
	var addr uint64
	if len(buf) > 0 {
		addr = uint64(uintptr(unsafe.Pointer(&buf[0])))
	}
	var flags uint64
	if t.willExpose() {
		flags = exposeWilling
	}
	binary.LittleEndian.PutUint64(slot[0:], addr)
	binary.LittleEndian.PutUint64(slot[8:], uint64(len(buf)))
	binary.LittleEndian.PutUint64(slot[16:], flags)
	e.k, e.buf, e.posted = w.pub+1, buf, true
	t.seg.u64(t.winWord(t.rank, rwExp)).Store(e.k) // before post stores rwPub: no peer sees the descriptor without it
	if err := t.post(tag); err != nil {
		t.withdraw()
		return err
	}
	e.tag = tag
	return nil
}

// withdraw ends this rank's exposure: a peer's copy that ends after this
// fails (ReadExposed).
func (t *Transport) withdraw() {
	t.seg.u64(t.winWord(t.rank, rwExp)).Store(0)
	runtime.KeepAlive(t.exp.buf)
	t.exp.k, t.exp.buf, t.exp.posted = 0, nil, false
}

// Exposed implements transport.Exposer.
func (t *Transport) Exposed(ctx context.Context) ([]int, error) {
	const op = "exposed"
	w, e := &t.win, &t.exp
	if !e.posted {
		return nil, t.fail(op, -1, errors.New("shm: Exposed without Expose"))
	}
	e.posted = false
	views, err := t.collect(ctx, op, e.tag)
	if err != nil {
		t.withdraw()
		return nil, err
	}
	if len(e.n) != t.size {
		e.addr, e.n = make([]uint64, t.size), make([]int, t.size)
	}
	all := true
	for p, v := range views {
		if len(v) != exposeDesc {
			t.Release()
			t.withdraw()
			w.broken = fmt.Errorf("%w: rank %d published %d bytes under an exposure's tag, want a %d-byte descriptor",
				transport.ErrSizeMismatch, p, len(v), exposeDesc)
			return nil, t.fail(op, p, w.broken)
		}
		e.addr[p] = binary.LittleEndian.Uint64(v[0:])
		e.n[p] = int(binary.LittleEndian.Uint64(v[8:]))
		all = all && binary.LittleEndian.Uint64(v[16:])&exposeWilling != 0
	}
	if !all {
		// Every rank read the same descriptors: all fall back together.
		t.Release()
		t.withdraw()
		return nil, t.fail(op, -1, transport.ErrNoExpose)
	}
	e.count++
	return e.n, nil
}

// willExpose reports whether this rank takes part in exposures: it found
// every peer's memory readable at setup, the group does not oversubscribe
// its CPUs, and Options.Expose or the calibration at Connect chose them
// (calibrate_linux.go). With more ranks than CPUs a rank's copies from
// W-1 peers, each pinning the peer's pages in the kernel, lose to the
// window's shared copies: an AllGather of 1 MiB per rank at W = 4 on 2
// cores took 1053 µs exposed and 777 through the window, and at W = 4 on
// 16 cores 545 and 571 (docs/shm.md, "AllGather from exposed buffers").
func (t *Transport) willExpose() bool {
	return t.exposeOK && t.size <= t.cpus && t.readsAll()
}

// readsAll reports whether this rank found every peer's memory readable
// at setup.
func (t *Transport) readsAll() bool {
	for p := 0; p < t.size; p++ {
		if p != t.rank && !t.Direct(p) {
			return false
		}
	}
	return true
}

// ReadExposed implements transport.Exposer.
func (t *Transport) ReadExposed(p, off int, dst []byte) error {
	const op = "read exposed"
	e := &t.exp
	switch {
	case e.k == 0 || e.posted:
		return t.fail(op, p, errors.New("shm: ReadExposed outside an exposure (Expose, Exposed, …, Unexpose)"))
	case p < 0 || p >= t.size:
		return t.fail(op, p, transport.ErrInvalidPeer)
	case off < 0 || off > e.n[p] || len(dst) > e.n[p]-off:
		return t.fail(op, p, fmt.Errorf("%w: bytes [%d, %d) of rank %d's exposed %d", transport.ErrSizeMismatch, off, off+len(dst), p, e.n[p]))
	case len(dst) == 0:
		return nil
	case p == t.rank:
		copy(dst, e.buf[off:])
		return nil
	}
	pid, start := t.procs[p].pid, t.procs[p].start // set at Connect, never written again
	err := readRemote(pid, dst, uintptr(e.addr[p])+uintptr(off))
	if err != nil && !alive(pid, start) {
		err = fmt.Errorf("%w (pid %d): %v", ErrPeerDead, pid, err)
	}
	if err == nil && t.seg.u64(t.winWord(p, rwExp)).Load() != e.k {
		err = fmt.Errorf("%w: rank %d withdrew its exposed buffer during the copy", ErrBroken, p)
	}
	if err != nil {
		t.win.broken = err
		return t.fail(op, p, err)
	}
	return nil
}

// Unexpose implements transport.Exposer.
func (t *Transport) Unexpose(ctx context.Context) error {
	const op = "unexpose"
	w, e := &t.win, &t.exp
	if e.k == 0 || e.posted {
		return t.fail(op, -1, errors.New("shm: Unexpose without a successful Exposed"))
	}
	k := e.k
	if w.broken != nil { // a failed ReadExposed: no release, peers fail on their own
		t.withdraw()
		t.unhold()
		return t.fail(op, -1, w.broken)
	}
	if err := t.hold(); err != nil { // keeps the segment mapped while this waits
		t.withdraw()
		return t.fail(op, -1, err)
	}
	defer t.unhold()
	t.Release()
	p, err := t.winWait(ctx, func(p int) bool { return t.seg.u64(t.winWord(p, rwRel)).Load() >= k }, nil)
	t.withdraw() // either way no peer reads buf after this
	if err != nil {
		w.broken = err
		return t.fail(op, p, err)
	}
	return nil
}
