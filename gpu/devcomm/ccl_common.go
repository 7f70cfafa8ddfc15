package devcomm

import (
	"github.com/detcoll/detcoll/internal/ccl"
)

// What the NCCL-transport algorithms (ccl_allreduce.go,
// ccl_reducescatter.go) share: NCCL groups and point-to-point transfers,
// workspace slots and the chunked pipeline. NCCL (or RCCL) only moves
// bytes; the reduce kernels do all the arithmetic.

// group runs fn between ncclGroupStart and ncclGroupEnd.
func (c *Comm) group(fn func() error) error {
	if err := c.lib.GroupStart(); err != nil {
		return err
	}
	ferr := fn()
	if err := c.lib.GroupEnd(); ferr == nil {
		ferr = err
	}
	return ferr
}

func (c *Comm) send(p DevicePtr, n, peer int, s Stream) error {
	if n == 0 {
		return nil
	}
	return c.nc.Send(uint64(p), n, ccl.Uint8, peer, uintptr(s))
}

func (c *Comm) recv(p DevicePtr, n, peer int, s Stream) error {
	if n == 0 {
		return nil
	}
	return c.nc.Recv(uint64(p), n, ccl.Uint8, peer, uintptr(s))
}

// slots lays out k equal slots of n bytes in the workspace, each at the
// same address modulo 16 as like (so that the reduce kernel's 16-byte
// vector path applies). need is the workspace they take from off.
func slots(off int, like DevicePtr, n, k int) (base, stride, need int) {
	stride = (n + 15) &^ 15
	base = (off+15)&^15 + int(uint64(like)%16)
	return base, stride, base - off + k*stride
}

// slotOf is peer p's slot when the own rank r has none.
func slotOf(p, r int) int {
	if p > r {
		return p - 1
	}
	return p
}

// AllReduce writes the canonical tree reduction of every rank's count
// elements at send into recv on every rank. send and recv may be the same

// chunks cuts n bytes into k pieces of size bytes (a multiple of 256, the
// last piece shorter) when n is at least two chunks, else one piece.
func chunks(n, chunk int) (k, size int) {
	if chunk <= 0 || n < 2*chunk {
		return 1, n
	}
	size = (chunk + 255) &^ 255
	return (n + size - 1) / size, size
}

// pipeline enqueues transfer(0), reduce(0), …, transfer(k-1), reduce(k-1):
// the transfers (NCCL, serialised by NCCL anyway) on s, each reduce on the
// side stream once its transfer has arrived, so that chunk i is reduced
// while chunk i+1 moves; s then waits for the last reduce. With k == 1
// everything runs on s. Called inside c.dev.Do; stream-ordered (events
// only), so it can be captured.
func (c *Comm) pipeline(s Stream, k int, transfer func(i int) error, reduce func(i int, rs Stream, side bool) error) error {
	if k <= 1 {
		if err := transfer(0); err != nil {
			return err
		}
		return reduce(0, s, false)
	}
	for i := 0; i < k; i++ {
		if err := transfer(i); err != nil {
			return err
		}
		if err := c.rt.EventRecord(c.evT, s); err != nil {
			return err
		}
		if err := c.rt.StreamWaitEvent(c.side, c.evT); err != nil {
			return err
		}
		if err := reduce(i, c.side, true); err != nil {
			return err
		}
	}
	if err := c.rt.EventRecord(c.evR, c.side); err != nil {
		return err
	}
	return c.rt.StreamWaitEvent(s, c.evR)
}
