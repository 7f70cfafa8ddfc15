//go:build linux

package shm

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkSlotReuse isolates the access pattern of a W = 2 AllGather over
// the window, without the transport: two threads pinned to CPUs 0 and 1 each
// copy n bytes into a block of a MAP_SHARED mapping, publish a counter, wait
// for the other's, and copy the other's block and their own input out. The
// blocks of a thread rotate over span bytes (span = 2n: the two slots
// reused every other call, as before 2026-12-03; larger: the rotating
// offsets of window_linux.go). ns/op is one call of thread 0.
//
//	go test -run '^$' -bench SlotReuse ./transport/shm/
func BenchmarkSlotReuse(b *testing.B) {
	if runtime.NumCPU() < 2 {
		b.Skip("needs two CPUs: the pattern is two cores taking each other's lines")
	}
	for _, n := range []int{4 << 10, 16 << 10, 64 << 10, 256 << 10} {
		for _, span := range []int{2 * n, 2 << 20} {
			if span < 2*n {
				continue
			}
			b.Run(fmt.Sprintf("%dKiB/span=%dKiB", n>>10, span>>10), func(b *testing.B) { slotReuse(b, n, span) })
		}
	}
}

func slotReuse(b *testing.B, n, span int) {
	k := span / n
	mem, err := unix.Mmap(-1, 0, pageSize+2*span, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANON)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(mem)
	seq := [2]*atomic.Int64{(*atomic.Int64)(unsafe.Pointer(&mem[0])), (*atomic.Int64)(unsafe.Pointer(&mem[64]))}
	block := func(r, i int) []byte { o := pageSize + r*span + (i%k)*n; return mem[o : o+n] }
	var wg sync.WaitGroup
	var stop atomic.Bool // a thread that failed: the other stops waiting for it
	bad := make(chan string, 2)
	b.SetBytes(int64(n))
	b.ResetTimer()
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu unix.CPUSet
			cpu.Set(r)
			_ = unix.SchedSetaffinity(0, &cpu) // best effort: unpinned still runs
			in, out := make([]byte, n), make([]byte, 2*n)
			for i := range in {
				in[i] = byte(i + r)
			}
			peer := 1 - r
			for i := 1; i <= b.N; i++ {
				copy(block(r, i), in)
				seq[r].Store(int64(i))
				// The peer rewrites block(peer, i) at call i+k, after it has
				// seen this thread's counter reach i+k-1 ≥ i+1: k ≥ 2 keeps
				// the read below safe.
				for seq[peer].Load() < int64(i) {
					if stop.Load() {
						return
					}
				}
				copy(out[peer*n:], block(peer, i))
				copy(out[r*n:], in)
				if out[peer*n+5] != byte(5+peer) {
					bad <- "wrong bytes from the peer"
					stop.Store(true)
					return
				}
			}
		}(r)
	}
	wg.Wait()
	select {
	case s := <-bad:
		b.Fatal(s)
	default:
	}
}
