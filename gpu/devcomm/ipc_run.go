package devcomm

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/internal/agree"
)

// Running the peer-memory path: one launch per piece of a collective, the
// error word the kernels record, and the close handshake.

// launch enqueues one kernel. Called inside c.dev.Do with c.mu held.
func (st *ipcState) launch(s Stream, name string, grid int) error {
	fn, ok := st.fns[name]
	if !ok {
		return fmt.Errorf("no IPC kernel %s", name)
	}
	st.a.encode(st.argBuf[:])
	st.args.Reset()
	st.args.Raw(st.argBuf[:], 8)
	return st.rt.Launch(fn, devrt.Dim3{X: uint32(grid), Y: 1, Z: 1}, devrt.Dim3{X: ipcThreads, Y: 1, Z: 1}, 0, s, st.args)
}

// ipcRun enqueues op over total elements of esz bytes (AG: bytes, esz 1)
// in pieces; inStride and outStride are the RS input and AG output block
// strides in bytes. Every launch carries the call's identity (the low 32
// bits of its number and agree.Fold32 of its signature hash), which the
// kernels compare with every peer's. Called inside c.dev.Do with c.mu held.
func (c *Comm) ipcRun(s Stream, op ipcOp, dt dtype.DType, acc detcoll.Accumulate, send, recv DevicePtr, total, esz, inStride, outStride int) error {
	st := c.ipc
	name := ipcKernelName(op, dt, acc)
	st.a.sig, st.a.call = agree.Fold32(c.call.Hash), uint32(c.call.Seq)
	for i, k := 0, st.geom.pieces(op, esz, total); i < k; i++ {
		p := st.geom.piece(op, esz, total, i)
		st.a.in, st.a.out = send.Add(p.off*esz), recv.Add(p.off*esz)
		st.a.count, st.a.slot, st.a.base = int64(p.count), int64(p.slot), int64(p.base)
		st.a.inStride, st.a.outStride = int64(inStride), int64(outStride)
		if err := st.launch(s, name, p.grid); err != nil {
			return err
		}
	}
	return nil
}

// useLL reports whether a message of n bytes per rank goes through the LL
// kernels.
func (c *Comm) useLL(n int) bool { return n <= c.ipc.geom.llBytes && n <= c.ipc.geom.llMax() }

// allReduceIPC enqueues a one-shot (LL for small messages) or a two-shot
// AllReduce.
func (c *Comm) allReduceIPC(s Stream, send, recv DevicePtr, count int, dt dtype.DType, acc detcoll.Accumulate, two bool) error {
	op := ipcAR1
	switch {
	case two:
		op = ipcAR2
	case c.useLL(count * dt.Size()):
		op = ipcAR1LL
	}
	return c.ipcRun(s, op, dt, acc, send, recv, count, dt.Size(), 0, 0)
}

// reduceScatterIPC enqueues the ReduceScatter of one lane: m elements per
// block.
func (c *Comm) reduceScatterIPC(s Stream, send, recv DevicePtr, m int, dt dtype.DType, acc detcoll.Accumulate) error {
	op := ipcRS
	if c.useLL(m * dt.Size()) {
		op = ipcRSLL
	}
	return c.ipcRun(s, op, dt, acc, send, recv, m, dt.Size(), m*dt.Size(), 0)
}

// allGatherIPC enqueues the AllGather of one lane: n bytes per rank.
func (c *Comm) allGatherIPC(s Stream, send, recv DevicePtr, n int) error {
	op := ipcAG
	if c.useLL(n) {
		op = ipcAGLL
	}
	return c.ipcRun(s, op, 0, 0, send, recv, n, 1, 0, n)
}

// IPC reports whether the peer-memory path is on and, when it is not, why.
func (c *Comm) IPC() (on bool, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ipc != nil, c.ipcWhy
}

// IPCStagingBytes is the device memory of this rank's staging buffer (two
// halves of the capacity plus IPCHeaderBytes), 0 when the path is off.
func (c *Comm) IPCStagingBytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ipc == nil {
		return 0
	}
	return c.ipc.bytes
}

// closeIPC is the close handshake. With drained (Close waited for this
// rank's streams) no kernel of this rank still runs; once every rank has
// reached the barrier no kernel of any rank can still write into any
// staging buffer, and each rank unmaps its peers and frees its own. When
// the barrier fails (a peer died or did not close) a peer's kernel may
// still write into this rank's staging, so it is leaked, logged and counted
// in Stats.LeakedBytes instead of freed; when the stream did not drain,
// this rank's kernels may still write into the peers', so their mappings
// stay too. Called with c.mu held.
func (c *Comm) closeIPC(drained bool) error {
	st := c.ipc
	if st == nil {
		return nil
	}
	c.abortMu.Lock()
	c.ipc = nil
	c.abortMu.Unlock()
	if !drained {
		c.stats.LeakedBytes += st.bytes
		log.Printf("devcomm: rank %d: Close: the stream did not drain; leaking %d bytes of IPC staging and the peers' mappings", c.rank, st.bytes)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.timeout)
	berr := c.host.Barrier(ctx)
	cancel()
	if berr != nil {
		c.stats.LeakedBytes += st.bytes
		log.Printf("devcomm: rank %d: Close: the IPC close handshake failed (%v); leaking %d bytes of staging a peer may still write", c.rank, berr, st.bytes)
		ferr := c.dev.Do(func() error { return st.release(false) })
		if c.poison == nil {
			return fmt.Errorf("devcomm: Close: the IPC close handshake failed (staging leaked, not freed): %w", berr)
		}
		return ferr
	}
	return c.dev.Do(func() error { return st.free() })
}

// ipcCheck returns the error a kernel recorded as a poisoning error: a
// mismatch as an *agree.MismatchError naming both calls. Called with c.mu
// held.
func (c *Comm) ipcCheck(op string) error {
	if err := c.ipcError(); err != nil {
		return c.fail(op, err)
	}
	return nil
}

// ipcError is the error a kernel recorded, with a mismatch's calls named
// from the agreement. Called with c.mu held.
func (c *Comm) ipcError() error {
	err := c.ipc.failed()
	if errors.Is(err, ErrIPCMismatch) {
		return c.ipcMismatchError(c.ipc.mismatch())
	}
	return err
}
