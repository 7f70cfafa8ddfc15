package shm

import (
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Placement: two ranks that busy-wait on one core (docs/shm.md, "Placement
// after a pause") cost 17–60 µs per step instead of 1–2, and the kernel's
// load balancer takes milliseconds to part them. A waiter that finds a
// lower rank on its CPU moves itself to a CPU no peer waited on last: it
// narrows its thread's affinity to that CPU and restores the mask it had
// at once. The kernel migrates the thread on the first call and leaves it
// where it is on the second, so no thread stays pinned; the load balancer
// remains free to move it again.

// moveEvery bounds how often one rank moves, so ranks on a host whose other
// cores are busy do not chase each other.
const moveEvery = 2 * time.Millisecond

// moveOn is whether waiters move off a shared core: DETCOLL_SHM_MOVE=0
// turns it off (then they only yield it, as before 2026-12-03).
var moveOn = strings.TrimSpace(os.Getenv("DETCOLL_SHM_MOVE")) != "0"

// sharerOn records cpu as the CPU this rank is about to busy-wait on and
// returns the lowest other rank that last began a busy wait on it, or -1
// (also for an unknown cpu, -1).
func (t *Transport) sharerOn(cpu int) int {
	if cpu < 0 {
		return -1
	}
	t.seg.u32(t.seg.rankOff(t.rank) + rbCPU).Store(uint32(cpu) + 1)
	for p := 0; p < t.size; p++ {
		if p != t.rank && t.seg.u32(t.seg.rankOff(p)+rbCPU).Load() == uint32(cpu)+1 {
			return p
		}
	}
	return -1
}

// moveOff moves the calling thread off cpu, which rank sharer also waits
// on, when this rank is the higher of the two (the lower one stays, so two
// ranks never both leave for the same CPU), moving is on, and this rank has
// not moved within moveEvery. The target is a CPU of the thread's mask that
// no peer last waited on, chosen by rank among those so that several movers
// spread out. It reports whether the thread now runs elsewhere.
func (t *Transport) moveOff(cpu, sharer int) bool {
	if !moveOn || sharer < 0 || sharer > t.rank {
		return false
	}
	now := nanotime()
	if last := t.moved.Load(); last != 0 && now-last < int64(moveEvery) {
		return false
	}
	t.moved.Store(now)
	runtime.LockOSThread() // the masks below are this thread's
	defer runtime.UnlockOSThread()
	var mask unix.CPUSet
	if unix.SchedGetaffinity(0, &mask) != nil {
		return false
	}
	var free []int
	for c := 0; c < len(mask)*64; c++ {
		if c != cpu && mask.IsSet(c) && !t.cpuTaken(c) {
			free = append(free, c)
		}
	}
	if len(free) == 0 {
		return false
	}
	var one unix.CPUSet
	one.Set(free[t.rank%len(free)])
	if unix.SchedSetaffinity(0, &one) != nil {
		return false
	}
	if err := unix.SchedSetaffinity(0, &mask); err != nil {
		// The original mask could not be put back (a cpuset changed under
		// us): leave the thread where the kernel allows, never pinned.
		var all unix.CPUSet
		for c := 0; c < runtime.NumCPU(); c++ {
			all.Set(c)
		}
		unix.SchedSetaffinity(0, &all)
	}
	now2 := currentCPU()
	if now2 >= 0 {
		t.seg.u32(t.seg.rankOff(t.rank) + rbCPU).Store(uint32(now2) + 1)
	}
	return now2 != cpu
}

// cpuTaken reports whether a peer last began a busy wait on cpu.
func (t *Transport) cpuTaken(cpu int) bool {
	for p := 0; p < t.size; p++ {
		if p != t.rank && t.seg.u32(t.seg.rankOff(p)+rbCPU).Load() == uint32(cpu)+1 {
			return true
		}
	}
	return false
}
