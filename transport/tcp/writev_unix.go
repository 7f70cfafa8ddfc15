//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package tcp

import (
	"syscall"
	"unsafe"
)

// inlineWrite is the sending direction's state for tryWritev, kept in the
// direction so that a call allocates nothing (the callback is made once).
type inlineWrite struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool
	iov [2]syscall.Iovec
	cnt int
	n   int
	err error
}

// tryWritev writes a and b with one writev on the socket without waiting:
// it returns how many bytes the kernel took (0 when the socket is full).
func (d *direction) tryWritev(a, b []byte) (int, error) {
	w := &d.iw
	if w.rc == nil {
		rc, err := d.c.SyscallConn()
		if err != nil {
			return 0, err
		}
		w.rc = rc
		w.fn = w.writev
	}
	w.iov[0].Base, w.iov[1].Base = unsafe.SliceData(a), unsafe.SliceData(b)
	w.iov[0].SetLen(len(a))
	w.iov[1].SetLen(len(b))
	w.cnt, w.n, w.err = 2, 0, nil
	if len(b) == 0 {
		w.cnt = 1
	}
	err := w.rc.Write(w.fn)
	w.iov[0].Base, w.iov[1].Base = nil, nil // do not keep the caller's buffer
	if err != nil && w.err == nil {
		w.err = err
	}
	return w.n, w.err
}

// writev is the RawConn callback: one attempt, never a wait. It does not
// tell the scheduler (RawSyscall) for the reason rawRead gives: the socket
// is non-blocking, and a long copy into it must not hand this P to another
// thread.
func (w *inlineWrite) writev(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(w.cnt))
		switch e {
		case 0:
			w.n = int(r)
		case syscall.EINTR:
			continue
		case syscall.EAGAIN: // full: the caller finishes with a blocking write
		default:
			w.err = e
		}
		return true
	}
}
