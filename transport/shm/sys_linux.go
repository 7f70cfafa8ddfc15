package shm

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/detcoll/detcoll/internal/procstat"
)

// Futex operations (linux/futex.h); not FUTEX_PRIVATE_FLAG: the words are
// shared between processes.
const (
	futexOpWait = 0
	futexOpWake = 1
)

// futexWait sleeps while *w == val, at most d, and reports whether the
// whole d passed. Shared (not private) futex: the word is in memory mapped
// by several processes.
func futexWait(w *atomic.Uint32, val uint32, d time.Duration) (timedOut bool) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	_, _, e := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexOpWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
	return e == unix.ETIMEDOUT
}

// futexWake wakes every sleeper on w.
func futexWake(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexOpWake, uintptr(1<<30), 0, 0, 0)
}

// schedYield gives this thread's core to another runnable thread.
func schedYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// currentCPU is the CPU this thread runs on (getcpu(2)), or -1.
func currentCPU() int {
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return -1
	}
	return int(cpu)
}

// procStart returns the start time (clock ticks since boot) and the state
// letter of a process.
func procStart(pid int) (start uint64, state byte, err error) {
	state, start, err = procstat.Stat(pid)
	return start, state, err
}

// alive reports whether the process pid that started at start still runs:
// false once it is gone, a zombie, or its pid belongs to another process.
func alive(pid int, start uint64) bool {
	if pid <= 0 {
		return true // not joined yet
	}
	s, state, err := procStart(pid)
	if err != nil {
		// No /proc entry: gone (or /proc unreadable: ask the kernel).
		if os.IsNotExist(err) {
			return false
		}
		return unix.Kill(pid, 0) != unix.ESRCH
	}
	if state == 'Z' || state == 'X' {
		return false
	}
	return start == 0 || s == start
}

// readRemote copies len(dst) bytes from address src of process pid into
// dst (cross memory attach). It loops over short reads.
func readRemote(pid int, dst []byte, src uintptr) error {
	for len(dst) > 0 {
		n := min(len(dst), 1<<30)
		local := []unix.Iovec{{Base: &dst[0]}}
		local[0].SetLen(n)
		remote := []unix.RemoteIovec{{Base: src, Len: n}}
		got, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err != nil {
			return err
		}
		if got <= 0 {
			return fmt.Errorf("process_vm_readv read %d bytes", got)
		}
		dst = dst[got:]
		src += uintptr(got)
	}
	return nil
}
