package devcomm

import (
	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/ccl"
	"github.com/detcoll/detcoll/tree"
)

// The NCCL-transport AllReduce algorithms: gather_tree (every rank's whole
// input gathered, the tree kernel over the W slabs) and a2a_tree (shard r
// of every rank to rank r, reduced there, the reduced shards gathered).

func (c *Comm) allReduceGather(s Stream, capt bool, send, recv DevicePtr, count int, dt dtype.DType, acc detcoll.Accumulate) error {
	w, r, sz := c.size, c.rank, dt.Size()
	n := count * sz
	if c.cfg.p2pFor(n) && w <= c.cfg.listInputs() {
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

// a2aShards is the shard layout of an a2a_tree AllReduce: package tree's
// Shard in bytes (the first count%W ranks get one element more).
type a2aShards struct{ count, w, sz int }

func (sh a2aShards) at(p int) (off, n int) {
	o, k := tree.Shard(sh.count, sh.w, p)
	return o * sh.sz, k * sh.sz
}

func (sh a2aShards) even() bool { return sh.count%sh.w == 0 }

func (c *Comm) allReduceA2A(s Stream, capt bool, send, recv DevicePtr, count int, dt dtype.DType, acc detcoll.Accumulate) error {
	sh := a2aShards{count: count, w: c.size, sz: dt.Size()}
	offR, _ := sh.at(c.rank)
	out := recv.Add(offR)
	var err error
	if c.size <= c.cfg.listInputs() {
		err = c.a2aReduceList(s, capt, send, out, sh, dt, acc)
	} else {
		err = c.a2aReduceStrided(s, capt, send, out, sh, dt, acc)
	}
	if err != nil {
		return err
	}
	return c.a2aGatherShards(s, out, recv, sh)
}

// a2aReduceList is phase 1 with the pointer-list kernel, pipelined when
// the shards are equal: shard p of this rank's input to rank p, shard r of
// every peer into a slot, reduced with the own shard (read in place) into
// out.
func (c *Comm) a2aReduceList(s Stream, capt bool, send, out DevicePtr, sh a2aShards, dt dtype.DType, acc detcoll.Accumulate) error {
	w, r, sz := c.size, c.rank, dt.Size()
	offR, nR := sh.at(r)
	own := send.Add(offR)
	base, stride, need := slots(0, own, nR, w-1)
	ws, err := c.workspace(need, capt)
	if err != nil {
		return err
	}
	slot := func(p int) DevicePtr { return ws.Add(base + slotOf(p, r)*stride) }
	k, size := 1, nR
	if sh.even() {
		k, size = chunks(nR, c.cfg.chunk)
	}
	return c.pipeline(s, k, func(i int) error {
		off := i * size
		return c.group(func() error {
			for p := 0; p < w; p++ {
				if p == r {
					continue
				}
				po, pn := sh.at(p)
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
}

// a2aReduceStrided is phase 1 above the pointer-list kernel's inputs: the
// own shard is copied into its slot and the strided kernel reduces the W
// slots into out.
func (c *Comm) a2aReduceStrided(s Stream, capt bool, send, out DevicePtr, sh a2aShards, dt dtype.DType, acc detcoll.Accumulate) error {
	w, r, sz := c.size, c.rank, dt.Size()
	offR, nR := sh.at(r)
	base, stride, need := slots(0, out, nR, w)
	ws, err := c.workspace(need, capt)
	if err != nil {
		return err
	}
	slot := func(p int) DevicePtr { return ws.Add(base + p*stride) }
	if err := c.rt.MemcpyDtoDAsync(slot(r), send.Add(offR), nR, s); err != nil {
		return err
	}
	err = c.group(func() error {
		for p := 0; p < w; p++ {
			if p == r {
				continue
			}
			po, pn := sh.at(p)
			if err := c.send(send.Add(po), pn, p, s); err != nil {
				return err
			}
			if err := c.recv(slot(p), nR, p, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || nR == 0 {
		return err
	}
	return c.reduceStrided(s, dt, acc, out, slot(0), stride, w, nR/sz)
}

// a2aGatherShards is phase 2: every rank's reduced shard to every rank, in
// place in recv (ncclAllGather for equal shards, else send/receive pairs).
func (c *Comm) a2aGatherShards(s Stream, out, recv DevicePtr, sh a2aShards) error {
	w, r := c.size, c.rank
	_, nR := sh.at(r)
	if sh.even() && !c.cfg.p2pFor(nR) {
		return c.nc.AllGather(uint64(out), uint64(recv), nR, ccl.Uint8, uintptr(s))
	}
	return c.group(func() error {
		for p := 0; p < w; p++ {
			if p == r {
				continue
			}
			off, n := sh.at(p)
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
