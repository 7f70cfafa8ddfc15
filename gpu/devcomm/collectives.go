package devcomm

import (
	"context"
	"fmt"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/ccl"
)

// The collectives: each checks its arguments, builds its signature and
// dispatches to the algorithm that choose picked — the NCCL-transport
// algorithms (ccl_*.go) or the peer-memory kernels (ipc_run.go) — inside
// the frame of Comm.run.

// AllReduce writes the canonical tree reduction of every rank's count
// elements at send into recv on every rank. send and recv may be the same
// buffer (in place) but must not otherwise overlap.
func (c *Comm) AllReduce(ctx context.Context, send, recv Buffer, count int, dt dtype.DType, opts ...CallOption) error {
	sz := dt.Size()
	return c.run(ctx, call{name: "AllReduce", op: opAllReduce, opts: opts, bytes: count * sz,
		check: func(cc callConfig) (signature, error) {
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
		},
		body: func(cc callConfig, s Stream, capt bool) error {
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
		}})
}

// AllGather gathers every rank's count elements of dt (any element size)
// at send into recv (W*count elements), rank r's block at [r*count,
// (r+1)*count). In place when send is exactly rank r's block of recv. No
// arithmetic and no workspace: one ncclAllGather straight into recv, or
// one peer-memory kernel.
func (c *Comm) AllGather(ctx context.Context, send, recv Buffer, count int, dt dtype.DType, opts ...CallOption) error {
	sz := dt.Size()
	w, r := c.size, c.rank
	var n int
	return c.run(ctx, call{name: "AllGather", op: opAllGather, opts: opts, bytes: count * sz,
		check: func(cc callConfig) (signature, error) {
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
			if err := c.checkAllocs([]Buffer{send, recv}, []int{n, w * n}); err != nil {
				return signature{}, err
			}
			return signature{op: opAllGather, dt: uint8(dt), alg: uint8(cc.alg), gather: uint8(c.cfg.gather), count: uint64(count)}, nil
		},
		body: func(cc callConfig, s Stream, _ bool) error {
			switch {
			case n == 0:
				return nil
			case cc.alg == detcoll.OneShot:
				return c.allGatherIPC(s, send.Ptr, recv.Ptr, n)
			case w > 1 && c.cfg.gather != GatherP2P:
				return c.nc.AllGather(uint64(send.Ptr), uint64(recv.Ptr), n, ccl.Uint8, uintptr(s))
			}
			return c.allGatherP2P(s, []Buffer{send}, []Buffer{recv}, []int{count}, sz)
		}})
}

// AllGatherMany is AllGather over several independent lanes in one call
// (one NCCL group): lane l gathers counts[l] elements from sends[l] into
// recvs[l]. Every rank passes the same counts.
func (c *Comm) AllGatherMany(ctx context.Context, sends, recvs []Buffer, counts []int, dt dtype.DType, opts ...CallOption) error {
	sz := dt.Size()
	total := 0
	for _, n := range counts {
		total += n * sz
	}
	return c.run(ctx, call{name: "AllGatherMany", op: opAllGatherMany, opts: opts, bytes: total,
		check: func(cc callConfig) (signature, error) {
			if err := c.checkAGLanes(sends, recvs, counts, sz); err != nil {
				return signature{}, err
			}
			sig := signature{op: opAllGatherMany, dt: uint8(dt), alg: uint8(cc.alg), gather: uint8(c.cfg.gather), lanes: uint32(len(counts)), laneHash: laneHash(counts)}
			for _, n := range counts {
				sig.count += uint64(n)
			}
			return sig, nil
		},
		body: func(cc callConfig, s Stream, _ bool) error {
			switch {
			case cc.alg == detcoll.OneShot:
				// One peer-memory launch per lane, in lane order.
				for l, count := range counts {
					if count > 0 {
						if err := c.allGatherIPC(s, sends[l].Ptr, recvs[l].Ptr, count*sz); err != nil {
							return err
						}
					}
				}
				return nil
			case c.size == 1 || c.cfg.gather == GatherP2P:
				return c.allGatherP2P(s, sends, recvs, counts, sz)
			}
			return c.allGatherLanes(s, sends, recvs, counts, sz)
		}})
}

// checkAGLanes checks the lanes of AllGatherMany.
func (c *Comm) checkAGLanes(sends, recvs []Buffer, counts []int, sz int) error {
	w, r := c.size, c.rank
	if sz == 0 {
		return argErr("dtype has no element size")
	}
	if len(sends) != len(counts) || len(recvs) != len(counts) {
		return argErr("%d send lanes, %d recv lanes, %d counts", len(sends), len(recvs), len(counts))
	}
	bufs := make([]Buffer, 0, 2*len(counts))
	need := make([]int, 0, 2*len(counts))
	for l, count := range counts {
		n, err := byteCount(count, sz, w)
		if err != nil {
			return fmt.Errorf("lane %d: %w", l, err)
		}
		n /= w
		if err := checkBuf(laneName("send", l, true), sends[l], n, 1); err != nil {
			return err
		}
		if err := checkBuf(laneName("recv", l, true), recvs[l], w*n, 1); err != nil {
			return err
		}
		if overlaps(sends[l].Ptr, n, recvs[l].Ptr, w*n) && sends[l].Ptr != recvs[l].Ptr.Add(r*n) {
			return argErr("send lane %d overlaps recv lane %d but is not this rank's block (in place needs send == recv + rank*count*size)", l, l)
		}
		for m := 0; m < l; m++ {
			nm := counts[m] * sz
			if overlaps(recvs[l].Ptr, w*n, recvs[m].Ptr, w*nm) || overlaps(recvs[l].Ptr, w*n, sends[m].Ptr, nm) || overlaps(sends[l].Ptr, n, recvs[m].Ptr, w*nm) {
				return argErr("lanes %d and %d overlap", m, l)
			}
		}
		bufs = append(bufs, sends[l], recvs[l])
		need = append(need, n, w*n)
	}
	return c.checkAllocs(bufs, need)
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
	return c.reduceScatterMany(ctx, opReduceScatter, []Buffer{send}, []Buffer{recv}, []int{recvCount}, dt, opts)
}

// ReduceScatterMany is ReduceScatter over several independent lanes in one
// call (one NCCL group for the data movement): lane l reduce-scatters
// sends[l] (W*recvCounts[l] elements) into recvs[l]. Every lane has its
// own tree; lanes are never added to each other.
func (c *Comm) ReduceScatterMany(ctx context.Context, sends, recvs []Buffer, recvCounts []int, dt dtype.DType, opts ...CallOption) error {
	return c.reduceScatterMany(ctx, opReduceScatterMany, sends, recvs, recvCounts, dt, opts)
}

func (c *Comm) reduceScatterMany(ctx context.Context, op collOp, sends, recvs []Buffer, counts []int, dt dtype.DType, opts []CallOption) error {
	sz := dt.Size()
	w := c.size
	total := 0
	for _, n := range counts {
		total += n * sz * w
	}
	var lanes []rsLane
	return c.run(ctx, call{name: op.String(), op: op, opts: opts, bytes: total,
		check: func(cc callConfig) (signature, error) {
			if err := checkReducible(dt); err != nil {
				return signature{}, err
			}
			if err := checkAlgAcc(cc.alg, cc.acc); err != nil {
				return signature{}, err
			}
			var err error
			if lanes, err = c.checkRSLanes(sends, recvs, counts, sz, op == opReduceScatterMany); err != nil {
				return signature{}, err
			}
			s := signature{op: op, dt: uint8(dt), acc: uint8(cc.acc), alg: uint8(cc.alg), gather: uint8(c.cfg.gather), chunk: uint64(c.cfg.chunk)}
			if op == opReduceScatterMany {
				s.lanes, s.laneHash = uint32(len(counts)), laneHash(counts)
			}
			for _, n := range counts {
				s.count += uint64(n)
			}
			return s, nil
		},
		body: func(cc callConfig, s Stream, capt bool) error {
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
		}})
}

// checkRSLanes checks the lanes of a reduce-scatter and returns the
// non-empty ones.
func (c *Comm) checkRSLanes(sends, recvs []Buffer, counts []int, sz int, many bool) ([]rsLane, error) {
	w := c.size
	if len(sends) != len(counts) || len(recvs) != len(counts) {
		return nil, argErr("%d send lanes, %d recv lanes, %d counts", len(sends), len(recvs), len(counts))
	}
	lanes := make([]rsLane, 0, len(counts))
	bufs := make([]Buffer, 0, 2*len(counts))
	need := make([]int, 0, 2*len(counts))
	for l, count := range counts {
		in, err := byteCount(count, sz, w)
		if err != nil {
			return nil, fmt.Errorf("lane %d: %w", l, err)
		}
		n := in / w
		if err := checkBuf(laneName("send", l, many), sends[l], in, sz); err != nil {
			return nil, err
		}
		if err := checkBuf(laneName("recv", l, many), recvs[l], n, sz); err != nil {
			return nil, err
		}
		for m := 0; m <= l; m++ {
			nm := counts[m] * sz
			if overlaps(recvs[l].Ptr, n, sends[m].Ptr, w*nm) || (m < l && (overlaps(recvs[l].Ptr, n, recvs[m].Ptr, nm) || overlaps(sends[l].Ptr, in, recvs[m].Ptr, nm))) {
				return nil, argErr("%s overlaps another buffer of the call", laneName("recv", l, many))
			}
		}
		bufs = append(bufs, sends[l], recvs[l])
		need = append(need, in, n)
		if n > 0 {
			lanes = append(lanes, rsLane{send: sends[l].Ptr, recv: recvs[l].Ptr, n: n})
		}
	}
	return lanes, c.checkAllocs(bufs, need)
}
