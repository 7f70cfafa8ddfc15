package shm

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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

// procStart returns the start time (clock ticks since boot, field 22 of
// /proc/<pid>/stat) and the state letter of a process.
func procStart(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')') // the command name may contain spaces and parentheses
	if i < 0 || i+2 >= len(b) {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+2:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64)
	return start, f[0][0], err
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
