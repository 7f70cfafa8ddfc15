//go:build linux

package shm

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/detcoll/detcoll/store"
)

// TestMoveOff: the higher of two ranks that wait on one CPU moves its
// thread to another CPU and leaves the thread's affinity mask as it was;
// the lower one stays; a second move within moveEvery does not happen.
func TestMoveOff(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatalf("sched_getaffinity: %v", err)
	}
	if before.Count() < 2 {
		t.Skipf("this thread may run on %d CPU: nowhere to move to", before.Count())
	}
	if !moveOn {
		t.Skip("DETCOLL_SHM_MOVE=0 turns moving off")
	}
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("move"), 2, Options{})
	defer func() {
		for _, tr := range ts {
			tr.Close()
		}
	}()
	checkMask := func(when string) {
		t.Helper()
		var after unix.CPUSet
		if err := unix.SchedGetaffinity(0, &after); err != nil {
			t.Fatalf("sched_getaffinity: %v", err)
		}
		if after != before {
			t.Fatalf("%s: the thread's mask is %v CPUs, was %v: the move left it pinned", when, after.Count(), before.Count())
		}
	}
	cpu := currentCPU()
	if ts[0].sharerOn(cpu) >= 0 {
		t.Fatal("no peer waited yet, but rank 0 finds a sharer")
	}
	if ts[0].moveOff(cpu, 1) {
		t.Error("rank 0 moved away from rank 1: the lower rank must stay")
	}
	checkMask("rank 0 staying")
	// The kernel may put the thread back before getcpu(2) looks: a few tries.
	moved := false
	for try := 0; try < 5 && !moved; try++ {
		cpu = currentCPU()
		ts[0].sharerOn(cpu)
		ts[1].moved.Store(0)
		moved = ts[1].moveOff(cpu, 0)
		checkMask("rank 1 moving")
		if moved {
			if now := currentCPU(); now == cpu {
				t.Logf("try %d: moved, but the kernel put the thread back on CPU %d", try, cpu)
				moved = false
			}
		}
	}
	if !moved {
		t.Fatalf("rank 1, sharing CPU %d with rank 0, did not move in 5 tries", cpu)
	}
	if got := ts[1].seg.u32(ts[1].seg.rankOff(1) + rbCPU).Load(); got == uint32(cpu)+1 {
		t.Errorf("rank 1 moved off CPU %d but still records it", cpu)
	}
	if ts[1].moved.Load() == 0 {
		t.Error("rank 1 moved but did not record when")
	}
	// The rate limit, without depending on how long the checks above took
	// (under -race on a loaded machine they may exceed moveEvery): as if
	// rank 1 had moved just now.
	cpu = currentCPU()
	ts[0].sharerOn(cpu)
	ts[1].moved.Store(nanotime())
	if ts[1].moveOff(cpu, 0) {
		t.Errorf("rank 1 moved twice within %v", moveEvery)
	}
	checkMask("a second move")
}
