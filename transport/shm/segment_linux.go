package shm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Segment layout (all offsets 64-byte aligned, the ring data page aligned):
//
//	[0, 4096)            global header: magic, version, size, ring bytes, total bytes
//	rank blocks          one per rank: pid, start time, probe address and value,
//	                     closed flag, then canRead[size] (1: this rank reads peer p directly)
//	ring controls        one per ordered pair, 256 bytes: writer line, reader line, shared line
//	ring data            one ring of ringBytes per ordered pair
//	windows              two slots of windowBytes per rank (window.go)
const (
	segMagic   = 0x31_4d_53_63_64 // "dcSM1"
	segVersion = 5                // 5: a window slot's header is its publication (number stored last, release count)
	ctlBytes   = 256
)

// Global header fields.
const (
	offMagic   = 0
	offVersion = 8
	offSize    = 12
	offRing    = 16
	offTotal   = 24
	offWindow  = 32  // window slot bytes (0: no window)
	offBell    = 64  // futex word bumped by every window publish and release
	offBellWts = 128 // how many ranks sleep on offBell (its own cache line)
)

// Rank block fields.
const (
	rbPid       = 0
	rbStart     = 8
	rbProbeAddr = 16
	rbProbeVal  = 24
	rbClosed    = 32
	rbCPU       = 40 // 1 + the CPU the rank last began a busy wait on (0: not known)
	rbCanRead   = 64
	// then, at layout.rbWin: the window line (published and released
	// counts), then one 64-byte header per window slot.
	rwPub   = 0
	rwRel   = 8
	rwExp   = 16 // the publication whose buffer this rank exposes (0: none; expose_linux.go)
	rwHdr   = 64 // + slot*64: the slot's header line (window_linux.go)
	rwBytes = rwHdr + winSlots*64
	// the header line of a window slot
	hdrPub   = 0  // the publication number, stored last
	hdrPhase = 8  // the tag's phase (u32)
	hdrLen   = 16 // the block's length
	hdrSeq   = 24 // the tag's call number
	hdrSig   = 32 // the tag's signature hash
	hdrAt    = 40 // the block's offset in the slot
	hdrRel   = 48 // how many publications the rank had released
)

// Ring control fields: the writer's line, the reader's line, then shared words.
const (
	rcHead        = 0   // bytes ever written (writer stores)
	rcDataSeq     = 8   // futex word bumped after every publish of head
	rcRecvWaiting = 12  // reader sleeps on rcDataSeq
	rcTail        = 64  // bytes ever consumed (reader stores)
	rcSpaceSeq    = 72  // futex word bumped after every publish of tail
	rcSendWaiting = 76  // writer sleeps on rcSpaceSeq
	rcBroken      = 128 // a message was abandoned half way: the stream is dead
	rcDirect      = 132 // state of a direct (single-copy) message, futex word
)

// Direct-message states (rcDirect).
const (
	directIdle uint32 = iota
	directPosted
	directDone
	directCancelled
)

type layout struct {
	size      int
	ringBytes int
	winBytes  int
	rbWin     int // offset of the window fields in a rank block
	rankBlock int
	ranksOff  int
	ctlOff    int
	dataOff   int
	winOff    int
	total     int
}

func roundUp(n, a int) int { return (n + a - 1) / a * a }

func newLayout(size, ringBytes, winBytes int) layout {
	l := layout{size: size, ringBytes: ringBytes, winBytes: winBytes}
	l.rbWin = roundUp(rbCanRead+size, 64)
	l.rankBlock = l.rbWin + rwBytes
	l.ranksOff = pageSize
	l.ctlOff = roundUp(l.ranksOff+size*l.rankBlock, pageSize)
	pairs := size * (size - 1)
	l.dataOff = roundUp(l.ctlOff+pairs*ctlBytes, pageSize)
	l.winOff = roundUp(l.dataOff+pairs*ringBytes, pageSize)
	l.total = l.winOff + size*winSlots*winBytes
	return l
}

// winSlot is the offset of rank r's window slot i.
func (l layout) winSlot(r, i int) int { return l.winOff + (r*winSlots+i)*l.winBytes }

// pair is the index of the ring from → to.
func (l layout) pair(from, to int) int {
	if to > from {
		to--
	}
	return from*(l.size-1) + to
}

// segment is one mapping of the shared file.
type segment struct {
	mem  []byte
	name string // path in /dev/shm
	l    layout
}

func (s *segment) u64(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&s.mem[off]))
}
func (s *segment) u32(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&s.mem[off]))
}
func (s *segment) rankOff(r int) int { return s.l.ranksOff + r*s.l.rankBlock }

// shmDir is where segments live; tests may point it elsewhere.
var shmDir = "/dev/shm"

func segmentName(prefix string) (string, error) {
	h := fnv.New32a()
	h.Write([]byte(prefix))
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", err
	}
	return filepath.Join(shmDir, fmt.Sprintf("detcoll-%08x-%x", h.Sum32(), rnd)), nil
}

// shmFree is how many bytes shmDir's file system has free for this user,
// or -1 when it cannot tell.
func shmFree() int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(shmDir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// fitWindow halves a window slot enlarged for oversubscription, down to
// DefaultWindowBytes, until a segment of size ranks takes at most half of
// free bytes (free < 0: unknown, left as it is). A container's /dev/shm
// is often small (64 MiB in Docker by default); a segment that does not fit
// would cost the job its shared-memory transport.
func fitWindow(size, ringBytes, winBytes int, free int64) int {
	if free < 0 {
		return winBytes
	}
	for winBytes > DefaultWindowBytes && int64(newLayout(size, ringBytes, winBytes).total) > free/2 {
		winBytes /= 2
	}
	return winBytes
}

// createSegment creates, sizes and maps a new segment and writes its header.
func createSegment(prefix string, size, ringBytes, winBytes int) (*segment, error) {
	name, err := segmentName(prefix)
	if err != nil {
		return nil, err
	}
	l := newLayout(size, ringBytes, winBytes)
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", name, err)
	}
	defer unix.Close(fd)
	fail := func(what string, err error) (*segment, error) {
		unix.Unlink(name)
		return nil, fmt.Errorf("%s %s (%d bytes): %w", what, name, l.total, err)
	}
	if err := unix.Ftruncate(fd, int64(l.total)); err != nil {
		return fail("sizing", err)
	}
	// Reserve the pages now: a full tmpfs must fail here, not as a SIGBUS
	// on the first touch of a ring page.
	if err := unix.Fallocate(fd, 0, 0, int64(l.total)); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		return fail("allocating", err)
	}
	mem, err := unix.Mmap(fd, 0, l.total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mapping", err)
	}
	s := &segment{mem: mem, name: name, l: l}
	binary.LittleEndian.PutUint32(mem[offVersion:], segVersion)
	binary.LittleEndian.PutUint32(mem[offSize:], uint32(size))
	binary.LittleEndian.PutUint64(mem[offRing:], uint64(ringBytes))
	binary.LittleEndian.PutUint64(mem[offTotal:], uint64(l.total))
	binary.LittleEndian.PutUint64(mem[offWindow:], uint64(winBytes))
	s.prefaultWindows()
	s.u64(offMagic).Store(segMagic) // last: the header is complete
	return s, nil
}

// openSegment maps an existing segment and checks that its header matches
// this rank's idea of the group.
func openSegment(name string, size int) (*segment, error) {
	if filepath.Dir(name) != filepath.Clean(shmDir) {
		return nil, fmt.Errorf("segment name %q is not in %s", name, shmDir)
	}
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", name, err)
	}
	if st.Size < pageSize {
		return nil, fmt.Errorf("segment %s has %d bytes", name, st.Size)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", name, err)
	}
	s := &segment{mem: mem, name: name}
	gotSize := int(binary.LittleEndian.Uint32(mem[offSize:]))
	ring := int(binary.LittleEndian.Uint64(mem[offRing:]))
	total := int(binary.LittleEndian.Uint64(mem[offTotal:]))
	win := int(binary.LittleEndian.Uint64(mem[offWindow:]))
	switch {
	case s.u64(offMagic).Load() != segMagic || binary.LittleEndian.Uint32(mem[offVersion:]) != segVersion:
		err = fmt.Errorf("segment %s has no detcoll header (version %d)", name, segVersion)
	case gotSize != size:
		err = fmt.Errorf("segment %s is for %d ranks, this rank expects %d", name, gotSize, size)
	case ring <= 0 || ring&(ring-1) != 0 || win < 0 || win%pageSize != 0 ||
		newLayout(size, ring, win).total != total || total != int(st.Size):
		err = fmt.Errorf("segment %s has an inconsistent layout", name)
	}
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	s.l = newLayout(size, ring, win)
	s.prefaultWindows()
	return s, nil
}

// prefaultWindows fills this mapping's page tables for every rank's window
// slots. Publications rotate over the slots (window.go), so without it a
// call would take a page fault for each new page it stages or reads until
// the cursors have gone round once: 512 calls of 4 KiB. The pages are
// already allocated (fallocate at creation); MADV_POPULATE_WRITE (Linux
// 5.14) maps them without touching their bytes. On an older kernel the
// faults are left to the first calls.
func (s *segment) prefaultWindows() {
	if s.l.winBytes == 0 || s.l.total <= s.l.winOff {
		return
	}
	_ = unix.Madvise(s.mem[s.l.winOff:s.l.total], unix.MADV_POPULATE_WRITE)
}

// touchPages reads one byte of every page this rank will read in the
// window slots and its rings, and adds 0 to a word of every page it will
// write (its own slots and outgoing rings): a store that changes nothing.
// MADV_POPULATE_WRITE fills this process's page tables, but under a hypervisor that shadows them (PVM, seen on this
// project's 2-core machine on 2026-12-06) each page still costs an exit on
// its first access from this process, and a first store after a read
// costs another: the first 512 calls of 4 KiB, whose publications rotate
// over new pages, ran at 15–16 µs per call instead of 2–3; 9–11 with the
// pages only read; 2.8–3.8 touched so (docs/shm.md, "The first calls").
func (s *segment) touchPages(rank int) {
	if s.l.size < 1 || rank < 0 || rank >= s.l.size {
		return
	}
	var sink byte
	read := func(off, n int) {
		for o := off; o < off+n; o += pageSize {
			sink += s.mem[o]
		}
	}
	write := func(off, n int) {
		for o := off; o < off+n; o += pageSize {
			s.u32(o).Add(0) // a locked add of 0: a store that changes nothing, even racing
		}
	}
	for r := 0; r < s.l.size; r++ {
		for i := 0; i < winSlots; i++ {
			if r == rank {
				write(s.l.winSlot(r, i), s.l.winBytes)
			} else {
				read(s.l.winSlot(r, i), s.l.winBytes)
			}
		}
		if r != rank {
			write(s.l.dataOff+s.l.pair(rank, r)*s.l.ringBytes, s.l.ringBytes)
			read(s.l.dataOff+s.l.pair(r, rank)*s.l.ringBytes, s.l.ringBytes)
		}
	}
	touchSink.Add(uint32(sink))
}

// touchSink keeps touchPages' reads from being optimised away.
var touchSink atomic.Uint32

func (s *segment) unmap() {
	if s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}

// unlink removes the name; the memory stays until the last mapping goes.
func (s *segment) unlink() { os.Remove(s.name) }
