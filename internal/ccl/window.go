package ccl

import "fmt"

// WinCollSymmetric is NCCL_WIN_COLL_SYMMETRIC: a window every rank
// registers with the same size, which NCCL's symmetric-memory kernels may
// use for collectives whose buffers lie in it (NCCL ≥ 2.27).
const WinCollSymmetric = 0x01

// HasWindows reports whether the library can register symmetric windows:
// it exports ncclMemAlloc, ncclMemFree, ncclCommWindowRegister and
// ncclCommWindowDeregister (NCCL ≥ 2.27; RCCL does not).
func (l *Lib) HasWindows() bool {
	return l != nil && l.syms != nil && l.syms.Have(ncclMemAlloc) && l.syms.Have(ncclMemFree) &&
		l.syms.Have(ncclCommWindowRegister) && l.syms.Have(ncclCommWindowDeregister)
}

// MemAlloc is ncclMemAlloc: size bytes of device memory on the calling
// thread's current device, allocated so that it can be registered in a
// window (CUDA's VMM API). Free it with MemFree.
func (l *Lib) MemAlloc(size int) (uint64, error) {
	if size <= 0 {
		return 0, &Error{Code: InvalidArgument, Name: ResultName(InvalidArgument), Call: "ncclMemAlloc",
			Message: fmt.Sprintf("size %d", size), Vendor: l.vendorName()}
	}
	var p uint64
	err := l.call(ncclMemAlloc, nil, func() Result { return l.rMemAlloc(&p, size) })
	if err != nil {
		return 0, err
	}
	return p, nil
}

// MemFree is ncclMemFree of memory from MemAlloc.
func (l *Lib) MemFree(ptr uint64) error {
	if ptr == 0 {
		return nil
	}
	return l.call(ncclMemFree, nil, func() Result { return l.rMemFree(ptr) })
}

// Window is an ncclWindow_t: a registered buffer of a communicator.
type Window struct {
	comm *Comm
	h    uintptr
	Buf  uint64
	Size int
}

// WindowRegister is ncclCommWindowRegister: it registers size bytes at buf
// (from MemAlloc) with the communicator. It is collective: every rank
// registers its buffer, in the same order, with the same size and flags
// (WinCollSymmetric for the symmetric kernels).
func (c *Comm) WindowRegister(buf uint64, size, flags int) (*Window, error) {
	if c == nil || c.h == 0 {
		return nil, &Error{Code: InvalidUsage, Name: ResultName(InvalidUsage), Call: "ncclCommWindowRegister", Message: "communicator destroyed"}
	}
	if buf == 0 || size <= 0 {
		return nil, &Error{Code: InvalidArgument, Name: ResultName(InvalidArgument), Call: "ncclCommWindowRegister",
			Message: fmt.Sprintf("buffer %#x, size %d", buf, size), Vendor: c.lib.vendorName()}
	}
	w := &Window{comm: c, Buf: buf, Size: size}
	err := c.lib.call(ncclCommWindowRegister, c, func() Result { return c.lib.rWindowRegister(c.h, buf, size, &w.h, flags) })
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Deregister is ncclCommWindowDeregister (collective, as the registration).
// It is idempotent.
func (w *Window) Deregister() error {
	if w == nil || w.h == 0 {
		return nil
	}
	c := w.comm
	if c == nil || c.h == 0 {
		return &Error{Code: InvalidUsage, Name: ResultName(InvalidUsage), Call: "ncclCommWindowDeregister", Message: "communicator destroyed"}
	}
	err := c.lib.call(ncclCommWindowDeregister, c, func() Result { return c.lib.rWindowDeregister(c.h, w.h) })
	w.h = 0
	return err
}
