package devcomm

import (
	"context"
	"fmt"
	"math"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/ccl"
	"github.com/detcoll/detcoll/tree"
)

func argErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", detcoll.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// byteCount is count elements of sz bytes times mult, or an error when that
// is negative or overflows.
func byteCount(count, sz, mult int) (int, error) {
	if count < 0 {
		return 0, argErr("negative count %d", count)
	}
	if sz <= 0 || mult <= 0 {
		return 0, argErr("element size %d", sz)
	}
	if count > math.MaxInt/sz/mult {
		return 0, argErr("count %d of %d-byte elements overflows", count, sz)
	}
	return count * sz * mult, nil
}

// checkBuf checks that b can hold need bytes: declared size, nil pointer and
// element alignment.
func checkBuf(what string, b Buffer, need, align int) error {
	if b.Bytes < 0 {
		return argErr("%s declares %d bytes", what, b.Bytes)
	}
	if need > b.Bytes {
		return argErr("%s: the count needs %d bytes but the buffer declares %d", what, need, b.Bytes)
	}
	if need == 0 {
		return nil
	}
	if b.Ptr == 0 {
		return argErr("%s is a nil device pointer", what)
	}
	if align > 1 && uint64(b.Ptr)%uint64(align) != 0 {
		return argErr("%s at %#x is not aligned to the %d-byte element", what, uint64(b.Ptr), align)
	}
	return nil
}

// overlaps reports whether [a, a+an) and [b, b+bn) share a byte.
func overlaps(a DevicePtr, an int, b DevicePtr, bn int) bool {
	if an <= 0 || bn <= 0 {
		return false
	}
	return a < b.Add(bn) && b < a.Add(an)
}

func checkAlgAcc(alg detcoll.Algorithm, acc detcoll.Accumulate) error {
	if alg == detcoll.Auto || !alg.Valid() {
		return argErr("unknown algorithm %v", alg)
	}
	if !acc.Valid() {
		return argErr("unknown accumulate mode %v", acc)
	}
	return nil
}

func checkReducible(dt dtype.DType) error {
	if !dt.Valid() {
		return argErr("dtype %v is not reducible (want bf16, fp16, fp32 or fp64)", dt)
	}
	return nil
}

// checkAllocs checks, with cuMemGetAddressRange, that every buffer's used
// range lies inside one allocation. Runs with the context current.
func (c *Comm) checkAllocs(bufs []Buffer, need []int) error {
	if !c.cfg.checkAlloc {
		return nil
	}
	return c.dev.Do(func() error {
		for i, b := range bufs {
			if need[i] == 0 {
				continue
			}
			base, size, err := c.rt.MemGetAddressRange(b.Ptr)
			if err != nil {
				return argErr("buffer at %#x is not device memory of this GPU: %v", uint64(b.Ptr), err)
			}
			if uint64(b.Ptr)+uint64(need[i]) > uint64(base)+size {
				return argErr("buffer at %#x: %d bytes run past the end of its allocation [%#x, +%d)", uint64(b.Ptr), need[i], uint64(base), size)
			}
		}
		return nil
	})
}

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
// buffer (in place) but must not otherwise overlap.
func (c *Comm) AllReduce(ctx context.Context, send, recv Buffer, count int, dt dtype.DType, opts ...CallOption) error {
	const op = "AllReduce"
	sz := dt.Size()
	cc := c.resolve(opts, count*sz)
	return c.run(ctx, op, cc, true, func() (signature, error) {
		if err := checkReducible(dt); err != nil {
			return signature{}, err
		}
		if err := checkAlgAcc(cc.alg, cc.acc); err != nil {
			return signature{}, err
		}
		n, err := byteCount(count, sz, c.size)
		if err != nil {
			return signature{}, err
		}
		n /= c.size
		if err := checkBuf("send", send, n, sz); err != nil {
			return signature{}, err
		}
		if err := checkBuf("recv", recv, n, sz); err != nil {
			return signature{}, err
		}
		if overlaps(send.Ptr, n, recv.Ptr, n) && send.Ptr != recv.Ptr {
			return signature{}, argErr("send and recv overlap without being the same buffer")
		}
		if err := c.checkAllocs([]Buffer{send, recv}, []int{n, n}); err != nil {
			return signature{}, err
		}
		return signature{op: opAllReduce, dt: uint8(dt), acc: uint8(cc.acc), alg: uint8(cc.alg), gather: uint8(c.cfg.gather), chunk: uint64(c.cfg.chunk), count: uint64(count)}, nil
	}, func(s Stream, capt bool) error {
		switch {
		case count == 0:
			return nil
		case c.size == 1:
			return c.reduce(s, dt, cc.acc, recv.Ptr, []DevicePtr{send.Ptr}, count, false)
		case cc.alg == detcoll.OneShot || cc.alg == detcoll.TwoShot:
			return c.allReduceIPC(s, send.Ptr, recv.Ptr, count, dt, cc.acc, cc.alg == detcoll.TwoShot)
		case cc.alg == detcoll.GatherTree:
			return c.allReduceGather(s, capt, send.Ptr, recv.Ptr, count, dt, cc.acc)
		}
		return c.allReduceA2A(s, capt, send.Ptr, recv.Ptr, count, dt, cc.acc)
	})
}

func (c *Comm) ptrList() []DevicePtr {
	if cap(c.ptrs) < c.size {
		c.ptrs = make([]DevicePtr, c.size)
	}
	return c.ptrs[:c.size]
}

// p2pFor reports whether a gather of n bytes per rank uses send/receive
// pairs rather than ncclAllGather.
func (c *Comm) p2pFor(n int) bool {
	return c.cfg.gather == GatherP2P || (c.cfg.gather == GatherAuto && n >= AutoP2PBytes)
}

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

func (c *Comm) allReduceGather(s Stream, capt bool, send, recv DevicePtr, count int, dt dtype.DType, acc detcoll.Accumulate) error {
	w, r, sz := c.size, c.rank, dt.Size()
	n := count * sz
	if c.p2pFor(n) && w <= listLimit {
		// Every peer's whole input into a slot; chunked so that the reduce
		// of chunk i overlaps the transfer of chunk i+1.
		base, stride, need := slots(0, send, n, w-1)
		ws, err := c.workspace(need, capt)
		if err != nil {
			return err
		}
		slot := func(p int) DevicePtr { return ws.Add(base + slotOf(p, r)*stride) }
		k, size := chunks(n, c.cfg.chunk)
		return c.pipeline(s, k, func(i int) error {
			off := i * size
			m := min(size, n-off)
			return c.group(func() error {
				for p := 0; p < w; p++ {
					if p == r {
						continue
					}
					if err := c.send(send.Add(off), m, p, s); err != nil {
						return err
					}
					if err := c.recv(slot(p).Add(off), m, p, s); err != nil {
						return err
					}
				}
				return nil
			})
		}, func(i int, rs Stream, side bool) error {
			off := i * size
			m := min(size, n-off)
			ptrs := c.ptrList()
			for p := range ptrs {
				ptrs[p] = send.Add(off)
				if p != r {
					ptrs[p] = slot(p).Add(off)
				}
			}
			return c.reduce(rs, dt, acc, recv.Add(off), ptrs, m/sz, side)
		})
	}
	ws, err := c.workspace(w*n, capt)
	if err != nil {
		return err
	}
	if err := c.nc.AllGather(uint64(send), uint64(ws), n, ccl.Uint8, uintptr(s)); err != nil {
		return err
	}
	return c.reduceStrided(s, dt, acc, recv, ws, n, w, count)
}

func (c *Comm) allReduceA2A(s Stream, capt bool, send, recv DevicePtr, count int, dt dtype.DType, acc detcoll.Accumulate) error {
	w, r, sz := c.size, c.rank, dt.Size()
	shard := func(p int) (off, n int) {
		o, k := tree.Shard(count, w, p)
		return o * sz, k * sz
	}
	even := count%w == 0
	offR, nR := shard(r)
	own, out := send.Add(offR), recv.Add(offR)
	if w <= listLimit {
		// Phase 1, pipelined when the shards are equal: shard p of my input
		// to rank p, shard r of every peer into a slot, reduced into out.
		base, stride, need := slots(0, own, nR, w-1)
		ws, err := c.workspace(need, capt)
		if err != nil {
			return err
		}
		slot := func(p int) DevicePtr { return ws.Add(base + slotOf(p, r)*stride) }
		k, size := 1, nR
		if even {
			k, size = chunks(nR, c.cfg.chunk)
		}
		err = c.pipeline(s, k, func(i int) error {
			off := i * size
			return c.group(func() error {
				for p := 0; p < w; p++ {
					if p == r {
						continue
					}
					po, pn := shard(p)
					sm, rm := pn, nR
					if k > 1 {
						sm, rm = min(size, pn-off), min(size, nR-off)
					}
					if err := c.send(send.Add(po+off), sm, p, s); err != nil {
						return err
					}
					if err := c.recv(slot(p).Add(off), rm, p, s); err != nil {
						return err
					}
				}
				return nil
			})
		}, func(i int, rs Stream, side bool) error {
			off := i * size
			m := min(size, nR-off)
			if m == 0 {
				return nil
			}
			ptrs := c.ptrList()
			for p := range ptrs {
				ptrs[p] = own.Add(off)
				if p != r {
					ptrs[p] = slot(p).Add(off)
				}
			}
			return c.reduce(rs, dt, acc, out.Add(off), ptrs, m/sz, side)
		})
		if err != nil {
			return err
		}
	} else {
		// Above listLimit ranks: the own shard is copied into its slot and
		// the strided kernel reduces the W slots.
		base, stride, need := slots(0, out, nR, w)
		ws, err := c.workspace(need, capt)
		if err != nil {
			return err
		}
		slot := func(p int) DevicePtr { return ws.Add(base + p*stride) }
		if err := c.rt.MemcpyDtoDAsync(slot(r), own, nR, s); err != nil {
			return err
		}
		err = c.group(func() error {
			for p := 0; p < w; p++ {
				if p == r {
					continue
				}
				po, pn := shard(p)
				if err := c.send(send.Add(po), pn, p, s); err != nil {
					return err
				}
				if err := c.recv(slot(p), nR, p, s); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if nR > 0 {
			if err := c.reduceStrided(s, dt, acc, out, slot(0), stride, w, nR/sz); err != nil {
				return err
			}
		}
	}
	// Phase 2: every rank's reduced shard to every rank, in place in recv.
	if even && !c.p2pFor(nR) {
		return c.nc.AllGather(uint64(out), uint64(recv), nR, ccl.Uint8, uintptr(s))
	}
	return c.group(func() error {
		for p := 0; p < w; p++ {
			if p == r {
				continue
			}
			off, n := shard(p)
			if err := c.send(out, nR, p, s); err != nil {
				return err
			}
			if err := c.recv(recv.Add(off), n, p, s); err != nil {
				return err
			}
		}
		return nil
	})
}

// AllGather gathers every rank's count elements of dt (any element size)
// at send into recv (W*count elements), rank r's block at [r*count,
// (r+1)*count). In place when send is exactly rank r's block of recv. No
// arithmetic and no workspace: one ncclAllGather straight into recv.
func (c *Comm) AllGather(ctx context.Context, send, recv Buffer, count int, dt dtype.DType, opts ...CallOption) error {
	const op = "AllGather"
	sz := dt.Size()
	cc := c.resolveAG(opts, count*sz)
	w, r := c.size, c.rank
	ipc := cc.alg == detcoll.OneShot
	var n int
	return c.run(ctx, op, cc, ipc, func() (signature, error) {
		if sz == 0 {
			return signature{}, argErr("dtype %v has no element size", dt)
		}
		var err error
		if n, err = byteCount(count, sz, w); err != nil {
			return signature{}, err
		}
		n /= w
		if err := checkBuf("send", send, n, 1); err != nil {
			return signature{}, err
		}
		if err := checkBuf("recv", recv, w*n, 1); err != nil {
			return signature{}, err
		}
		if overlaps(send.Ptr, n, recv.Ptr, w*n) && send.Ptr != recv.Ptr.Add(r*n) {
			return signature{}, argErr("send overlaps recv but is not this rank's block (in place needs send == recv + rank*count*size)")
		}
		if c.cfg.checkAlloc {
			if err := c.checkAllocs([]Buffer{send, recv}, []int{n, w * n}); err != nil {
				return signature{}, err
			}
		}
		return signature{op: opAllGather, dt: uint8(dt), alg: uint8(cc.alg), gather: uint8(c.cfg.gather), count: uint64(count)}, nil
	}, func(s Stream, _ bool) error {
		if n == 0 {
			return nil
		}
		if ipc {
			return c.allGatherIPC(s, send.Ptr, recv.Ptr, n)
		}
		if w > 1 && c.cfg.gather != GatherP2P {
			return c.nc.AllGather(uint64(send.Ptr), uint64(recv.Ptr), n, ccl.Uint8, uintptr(s))
		}
		return c.allGatherP2P(s, []Buffer{send}, []Buffer{recv}, []int{count}, sz)
	})
}

// allGatherP2P copies every lane's own block into place and exchanges the
// blocks with grouped sends and receives (W == 1: the copies only).
func (c *Comm) allGatherP2P(s Stream, sends, recvs []Buffer, counts []int, sz int) error {
	w, r := c.size, c.rank
	for l, count := range counts {
		n := count * sz
		if dst := recvs[l].Ptr.Add(r * n); n > 0 && dst != sends[l].Ptr {
			if err := c.rt.MemcpyDtoDAsync(dst, sends[l].Ptr, n, s); err != nil {
				return err
			}
		}
	}
	if w == 1 {
		return nil
	}
	return c.group(func() error {
		for l, count := range counts {
			n := count * sz
			for p := 0; p < w; p++ {
				if p == r {
					continue
				}
				if err := c.send(sends[l].Ptr, n, p, s); err != nil {
					return err
				}
				if err := c.recv(recvs[l].Ptr.Add(p*n), n, p, s); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// AllGatherMany is AllGather over several independent lanes in one call
// (one NCCL group): lane l gathers counts[l] elements from sends[l] into
// recvs[l]. Every rank passes the same counts.
func (c *Comm) AllGatherMany(ctx context.Context, sends, recvs []Buffer, counts []int, dt dtype.DType, opts ...CallOption) error {
	const op = "AllGatherMany"
	sz := dt.Size()
	total := 0
	for _, n := range counts {
		total += n * sz
	}
	cc := c.resolveAG(opts, total)
	w, r := c.size, c.rank
	ipc := cc.alg == detcoll.OneShot
	return c.run(ctx, op, cc, ipc, func() (signature, error) {
		if sz == 0 {
			return signature{}, argErr("dtype %v has no element size", dt)
		}
		if len(sends) != len(counts) || len(recvs) != len(counts) {
			return signature{}, argErr("%d send lanes, %d recv lanes, %d counts", len(sends), len(recvs), len(counts))
		}
		bufs := make([]Buffer, 0, 2*len(counts))
		need := make([]int, 0, 2*len(counts))
		for l, count := range counts {
			n, err := byteCount(count, sz, w)
			if err != nil {
				return signature{}, fmt.Errorf("lane %d: %w", l, err)
			}
			n /= w
			if err := checkBuf(laneName("send", l, true), sends[l], n, 1); err != nil {
				return signature{}, err
			}
			if err := checkBuf(laneName("recv", l, true), recvs[l], w*n, 1); err != nil {
				return signature{}, err
			}
			if overlaps(sends[l].Ptr, n, recvs[l].Ptr, w*n) && sends[l].Ptr != recvs[l].Ptr.Add(r*n) {
				return signature{}, argErr("send lane %d overlaps recv lane %d but is not this rank's block (in place needs send == recv + rank*count*size)", l, l)
			}
			for m := 0; m < l; m++ {
				nm := counts[m] * sz
				if overlaps(recvs[l].Ptr, w*n, recvs[m].Ptr, w*nm) || overlaps(recvs[l].Ptr, w*n, sends[m].Ptr, nm) || overlaps(sends[l].Ptr, n, recvs[m].Ptr, w*nm) {
					return signature{}, argErr("lanes %d and %d overlap", m, l)
				}
			}
			bufs = append(bufs, sends[l], recvs[l])
			need = append(need, n, w*n)
		}
		if err := c.checkAllocs(bufs, need); err != nil {
			return signature{}, err
		}
		sig := signature{op: opAllGatherMany, dt: uint8(dt), alg: uint8(cc.alg), gather: uint8(c.cfg.gather), lanes: uint32(len(counts)), laneHash: laneHash(counts)}
		for _, n := range counts {
			sig.count += uint64(n)
		}
		return sig, nil
	}, func(s Stream, _ bool) error {
		if ipc {
			// One peer-memory launch per lane, in lane order.
			for l, count := range counts {
				if count > 0 {
					if err := c.allGatherIPC(s, sends[l].Ptr, recvs[l].Ptr, count*sz); err != nil {
						return err
					}
				}
			}
			return nil
		}
		if w == 1 || c.cfg.gather == GatherP2P {
			return c.allGatherP2P(s, sends, recvs, counts, sz)
		}
		return c.group(func() error {
			for l, count := range counts {
				if count == 0 {
					continue
				}
				if err := c.nc.AllGather(uint64(sends[l].Ptr), uint64(recvs[l].Ptr), count*sz, ccl.Uint8, uintptr(s)); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

func laneName(what string, l int, many bool) string {
	if many {
		return fmt.Sprintf("%s lane %d", what, l)
	}
	return what
}

// ReduceScatter reduces block r (elements [r*recvCount, (r+1)*recvCount))
// of every rank's send, which holds W*recvCount elements, into recv
// (recvCount elements) on rank r. send and recv must not overlap.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv Buffer, recvCount int, dt dtype.DType, opts ...CallOption) error {
	return c.reduceScatterMany(ctx, "ReduceScatter", []Buffer{send}, []Buffer{recv}, []int{recvCount}, dt, opts)
}

// ReduceScatterMany is ReduceScatter over several independent lanes in one
// call (one NCCL group for the data movement): lane l reduce-scatters
// sends[l] (W*recvCounts[l] elements) into recvs[l]. Every lane has its
// own tree; lanes are never added to each other.
func (c *Comm) ReduceScatterMany(ctx context.Context, sends, recvs []Buffer, recvCounts []int, dt dtype.DType, opts ...CallOption) error {
	return c.reduceScatterMany(ctx, "ReduceScatterMany", sends, recvs, recvCounts, dt, opts)
}

type rsLane struct {
	send, recv DevicePtr
	n          int // bytes of one block (recv)
}

func (c *Comm) reduceScatterMany(ctx context.Context, op string, sends, recvs []Buffer, counts []int, dt dtype.DType, opts []CallOption) error {
	sz := dt.Size()
	w := c.size
	total := 0
	for _, n := range counts {
		total += n * sz * w
	}
	cc := c.resolveRS(opts, total)
	many := op == "ReduceScatterMany"
	lanes := make([]rsLane, 0, len(counts))
	return c.run(ctx, op, cc, true, func() (signature, error) {
		if err := checkReducible(dt); err != nil {
			return signature{}, err
		}
		if err := checkAlgAcc(cc.alg, cc.acc); err != nil {
			return signature{}, err
		}
		if len(sends) != len(counts) || len(recvs) != len(counts) {
			return signature{}, argErr("%d send lanes, %d recv lanes, %d counts", len(sends), len(recvs), len(counts))
		}
		bufs := make([]Buffer, 0, 2*len(counts))
		need := make([]int, 0, 2*len(counts))
		for l, count := range counts {
			in, err := byteCount(count, sz, w)
			if err != nil {
				return signature{}, fmt.Errorf("lane %d: %w", l, err)
			}
			n := in / w
			if err := checkBuf(laneName("send", l, many), sends[l], in, sz); err != nil {
				return signature{}, err
			}
			if err := checkBuf(laneName("recv", l, many), recvs[l], n, sz); err != nil {
				return signature{}, err
			}
			for m := 0; m <= l; m++ {
				nm := counts[m] * sz
				if overlaps(recvs[l].Ptr, n, sends[m].Ptr, w*nm) || (m < l && (overlaps(recvs[l].Ptr, n, recvs[m].Ptr, nm) || overlaps(sends[l].Ptr, in, recvs[m].Ptr, nm))) {
					return signature{}, argErr("%s overlaps another buffer of the call", laneName("recv", l, many))
				}
			}
			bufs = append(bufs, sends[l], recvs[l])
			need = append(need, in, n)
			if n > 0 {
				lanes = append(lanes, rsLane{send: sends[l].Ptr, recv: recvs[l].Ptr, n: n})
			}
		}
		if err := c.checkAllocs(bufs, need); err != nil {
			return signature{}, err
		}
		s := signature{op: opReduceScatter, dt: uint8(dt), acc: uint8(cc.acc), alg: uint8(cc.alg), gather: uint8(c.cfg.gather), chunk: uint64(c.cfg.chunk)}
		if many {
			s.op, s.lanes, s.laneHash = opReduceScatterMany, uint32(len(counts)), laneHash(counts)
		}
		for _, n := range counts {
			s.count += uint64(n)
		}
		return s, nil
	}, func(s Stream, capt bool) error {
		switch {
		case len(lanes) == 0:
			return nil
		case w == 1:
			for _, ln := range lanes {
				if err := c.reduce(s, dt, cc.acc, ln.recv, []DevicePtr{ln.send}, ln.n/sz, false); err != nil {
					return err
				}
			}
			return nil
		case cc.alg == detcoll.TwoShot:
			for _, ln := range lanes {
				if err := c.reduceScatterIPC(s, ln.send, ln.recv, ln.n/sz, dt, cc.acc); err != nil {
					return err
				}
			}
			return nil
		case cc.alg == detcoll.GatherTree:
			return c.reduceScatterGather(s, capt, lanes, dt, cc.acc)
		}
		return c.reduceScatterA2A(s, capt, lanes, dt, cc.acc)
	})
}

// reduceScatterGather gathers every rank's whole input of every lane and
// reduces this rank's block.
func (c *Comm) reduceScatterGather(s Stream, capt bool, lanes []rsLane, dt dtype.DType, acc detcoll.Accumulate) error {
	w, r, sz := c.size, c.rank, dt.Size()
	largest := 0
	for _, ln := range lanes {
		largest = max(largest, w*ln.n)
	}
	p2p := c.p2pFor(largest) && w <= listLimit
	bases := make([]int, len(lanes))
	strides := make([]int, len(lanes))
	need := 0
	for i, ln := range lanes {
		in := w * ln.n
		if p2p {
			// Slots for the peers' whole inputs; block r of slot p is at the
			// same address mod 16 as block r of the own input.
			b, st, nd := slots(need, ln.send, in, w-1)
			bases[i], strides[i], need = b, st, need+nd
		} else {
			// ncclAllGather layout: rank p's input at base + p*in; block r of
			// it at the same address mod 16 as the output when possible.
			b := (need+15)&^15 + int((uint64(ln.recv)-uint64(r*ln.n))%16)
			bases[i], strides[i], need = b, in, b+w*in
		}
	}
	ws, err := c.workspace(need, capt)
	if err != nil {
		return err
	}
	err = c.group(func() error {
		for i, ln := range lanes {
			in := w * ln.n
			if !p2p {
				if err := c.nc.AllGather(uint64(ln.send), uint64(ws.Add(bases[i])), in, ccl.Uint8, uintptr(s)); err != nil {
					return err
				}
				continue
			}
			for p := 0; p < w; p++ {
				if p == r {
					continue
				}
				if err := c.send(ln.send, in, p, s); err != nil {
					return err
				}
				if err := c.recv(ws.Add(bases[i]+slotOf(p, r)*strides[i]), in, p, s); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, ln := range lanes {
		if !p2p {
			err = c.reduceStrided(s, dt, acc, ln.recv, ws.Add(bases[i]+r*ln.n), w*ln.n, w, ln.n/sz)
		} else {
			ptrs := c.ptrList()
			for p := range ptrs {
				ptrs[p] = ln.send.Add(r * ln.n)
				if p != r {
					ptrs[p] = ws.Add(bases[i] + slotOf(p, r)*strides[i] + r*ln.n)
				}
			}
			err = c.reduce(s, dt, acc, ln.recv, ptrs, ln.n/sz, false)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// reduceScatterA2A receives block r of every peer's lanes (one group) and
// reduces them with the own block.
func (c *Comm) reduceScatterA2A(s Stream, capt bool, lanes []rsLane, dt dtype.DType, acc detcoll.Accumulate) error {
	w, r, sz := c.size, c.rank, dt.Size()
	list := w <= listLimit
	if list && len(lanes) == 1 {
		// One lane: pipelined, chunk i reduced while chunk i+1 moves.
		ln := lanes[0]
		own := ln.send.Add(r * ln.n)
		base, stride, need := slots(0, own, ln.n, w-1)
		ws, err := c.workspace(need, capt)
		if err != nil {
			return err
		}
		slot := func(p int) DevicePtr { return ws.Add(base + slotOf(p, r)*stride) }
		k, size := chunks(ln.n, c.cfg.chunk)
		return c.pipeline(s, k, func(i int) error {
			off := i * size
			m := min(size, ln.n-off)
			return c.group(func() error {
				for p := 0; p < w; p++ {
					if p == r {
						continue
					}
					if err := c.send(ln.send.Add(p*ln.n+off), m, p, s); err != nil {
						return err
					}
					if err := c.recv(slot(p).Add(off), m, p, s); err != nil {
						return err
					}
				}
				return nil
			})
		}, func(i int, rs Stream, side bool) error {
			off := i * size
			m := min(size, ln.n-off)
			ptrs := c.ptrList()
			for p := range ptrs {
				ptrs[p] = own.Add(off)
				if p != r {
					ptrs[p] = slot(p).Add(off)
				}
			}
			return c.reduce(rs, dt, acc, ln.recv.Add(off), ptrs, m/sz, side)
		})
	}
	bases := make([]int, len(lanes))
	strides := make([]int, len(lanes))
	need := 0
	for i, ln := range lanes {
		var b, st, nd int
		if list {
			b, st, nd = slots(need, ln.send.Add(r*ln.n), ln.n, w-1)
		} else {
			b, st, nd = slots(need, ln.recv, ln.n, w)
		}
		bases[i], strides[i], need = b, st, need+nd
	}
	ws, err := c.workspace(need, capt)
	if err != nil {
		return err
	}
	slot := func(i, p int) DevicePtr {
		if list {
			return ws.Add(bases[i] + slotOf(p, r)*strides[i])
		}
		return ws.Add(bases[i] + p*strides[i])
	}
	if !list {
		for i, ln := range lanes {
			if err := c.rt.MemcpyDtoDAsync(slot(i, r), ln.send.Add(r*ln.n), ln.n, s); err != nil {
				return err
			}
		}
	}
	err = c.group(func() error {
		for i, ln := range lanes {
			for p := 0; p < w; p++ {
				if p == r {
					continue
				}
				if err := c.send(ln.send.Add(p*ln.n), ln.n, p, s); err != nil {
					return err
				}
				if err := c.recv(slot(i, p), ln.n, p, s); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, ln := range lanes {
		if list {
			ptrs := c.ptrList()
			for p := range ptrs {
				ptrs[p] = ln.send.Add(r * ln.n)
				if p != r {
					ptrs[p] = slot(i, p)
				}
			}
			err = c.reduce(s, dt, acc, ln.recv, ptrs, ln.n/sz, false)
		} else {
			err = c.reduceStrided(s, dt, acc, ln.recv, slot(i, 0), strides[i], w, ln.n/sz)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
