package tcp

import (
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// pollParks counts reads whose poll budget ran out (for tests).
var pollParks atomic.Int64

// pollers is how many of this process's reads are polling now; pollGoscheds
// counts their runtime.Gosched calls (for tests).
var pollers, pollGoscheds atomic.Int64

// goschedEvery: a polling read that leaves a P free for this process's
// other goroutines calls runtime.Gosched only every goschedEvery attempts.
// With more than one P, Gosched puts the goroutine on the global run queue
// and wakes an idle P's thread (runtime.wakep), which takes it over while
// the first thread parks: two futex calls and a thread switch per attempt.
// At W = 8 on a 16-core host (GOMAXPROCS 2 per rank) a 4 KiB AllReduce took
// 79–184 µs so, and 75–78 with GOMAXPROCS 1, where Gosched is only a
// function call (docs/benchmarks/tcp-loopback.md, "W = 8 on a 16-core
// host"). The shm transport's waits made the same cut (docs/shm.md,
// "Gosched in the waits"). Every so often it still yields, so a goroutine
// of the application that holds the other Ps cannot keep a sender of this
// process waiting for the whole budget.
const goschedEvery = 16

// pollReader is the receiving direction's socket reader when Options.Poll
// is positive. A read that finds the socket empty tries again, giving the
// CPU away with sched_yield between attempts, until data comes or the
// budget is spent; only then does the runtime park the goroutine in the
// netpoller. On loopback the park and the wake-up cost more than the
// message (a 4 KiB exchange: 30–40 µs against 10–13 µs polled, at W = 2
// with GOMAXPROCS=1; docs/benchmarks/tcp-loopback.md, "Polling before the
// park"). Yielding instead of spinning lets a peer that shares the core run
// (more ranks than CPUs, or two ranks the scheduler put on one core), and
// this process's other goroutines too.
//
// A context or Close that ends the read while it polls is seen when the
// budget is spent: RawConn.Read keeps the descriptor open during the
// callback and reports the deadline or the close before it parks.
type pollReader struct {
	rc     syscall.RawConn
	fn     func(fd uintptr) bool
	budget time.Duration

	procs int64 // GOMAXPROCS when the reader was made

	p     []byte
	n     int
	err   error
	until time.Time // zero until the first empty read of this Read
	tries int       // empty reads of this Read
	// polling: this Read is counted in pollers (from its first empty read
	// until it parks or returns)
	polling bool
	// nonblock: a read that finds the socket empty returns errWouldBlock
	// at once (Exchange's progress loop, which waits itself).
	nonblock bool
	// beforePark, if set, runs when the budget is spent, before the park
	// (the receiving direction arms the call's context there).
	beforePark func()
}

// newPollReader returns c itself when budget is not positive.
func newPollReader(c *net.TCPConn, budget time.Duration) io.Reader {
	if budget <= 0 {
		return c
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return c
	}
	r := &pollReader{rc: rc, budget: budget, procs: int64(runtime.GOMAXPROCS(0))}
	r.fn = r.read
	return r
}

// read is the RawConn callback: true when a read returned data, EOF or an
// error; false (park until readable) once the budget is spent.
func (r *pollReader) read(fd uintptr) bool {
	for {
		n, err := rawRead(fd, r.p)
		switch err {
		case 0:
			r.n = n
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if r.nonblock {
				r.err = errWouldBlock
				return true
			}
		default:
			r.err = err
			return true
		}
		now := time.Now()
		switch {
		case r.until.IsZero():
			r.until = now.Add(r.budget)
			r.polling = true
			pollers.Add(1)
		case now.After(r.until):
			pollParks.Add(1)
			r.donePolling()
			if r.beforePark != nil {
				r.beforePark()
			}
			return false
		}
		// Let this process's other goroutines run first when polling reads
		// may hold every P: with one P (the launcher's GOMAXPROCS on a
		// small host) the goroutine sending this step's large frame would
		// otherwise wait for the whole budget, and so would the peer
		// reading it (256 KiB exchanges: ~300 µs without, ~90 with).
		// Otherwise only now and then (goschedEvery). Then let other
		// processes' threads run.
		r.tries++
		if pollers.Load() >= r.procs || r.tries%goschedEvery == 0 {
			pollGoscheds.Add(1)
			runtime.Gosched()
		}
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// rawRead is one read(2) of the non-blocking socket without telling the
// scheduler (RawSyscall): it cannot block, and a long copy (a large
// message's read takes up to a few hundred µs) would otherwise let the
// runtime's monitor hand this P to another thread, which then runs the
// process's other goroutines (polling readers, writers) beside the copy.
// On 2 cores shared by 4 ranks those extra threads cost more than they
// overlap: a Go probe of a 1 MiB W = 4 exchange took 3.2–3.5 ms per
// exchange with syscall.Syscall and 2.6–2.7 with RawSyscall, as the same
// loop in C (docs/benchmarks/tcp-loopback.md, "Raw syscalls and every
// message inline"). The P is held for at most one copy of what the socket
// holds.
func rawRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// yieldCPU lets other processes' threads run (sched_yield), without
// telling the scheduler: it returns at once.
func yieldCPU() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

func (r *pollReader) donePolling() {
	if r.polling {
		r.polling = false
		pollers.Add(-1)
	}
}

func (r *pollReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.err, r.until, r.tries = p, 0, nil, time.Time{}, 0
	err := r.rc.Read(r.fn)
	r.donePolling()
	r.p = nil // do not keep the caller's buffer
	switch {
	case r.err != nil:
		return 0, r.err
	case err != nil:
		return 0, err
	case r.n == 0:
		return 0, io.EOF
	}
	return r.n, nil
}
