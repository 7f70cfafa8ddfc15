package devcomm

import (
	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/ccl"
)

// The NCCL-transport ReduceScatter algorithms over lanes: gather_tree
// (every rank's whole input of every lane gathered, block r reduced) and
// a2a_tree (block r of every peer's lanes received in one group, reduced
// with the own block).

// rsLane is one lane of a reduce-scatter.
type rsLane struct {
	send, recv DevicePtr
	n          int // bytes of one block (recv)
}

// reduceScatterGather gathers every rank's whole input of every lane and
// reduces this rank's block.
func (c *Comm) reduceScatterGather(s Stream, capt bool, lanes []rsLane, dt dtype.DType, acc detcoll.Accumulate) error {
	w, r, sz := c.size, c.rank, dt.Size()
	largest := 0
	for _, ln := range lanes {
		largest = max(largest, w*ln.n)
	}
	p2p := c.cfg.p2pFor(largest) && w <= c.cfg.listInputs()
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
	if c.size <= c.cfg.listInputs() && len(lanes) == 1 {
		return c.rsA2AOneLane(s, capt, lanes[0], dt, acc)
	}
	return c.rsA2ALanes(s, capt, lanes, dt, acc)
}

// rsA2AOneLane is a2a_tree for one lane, pipelined: chunk i is reduced
// while chunk i+1 moves.
func (c *Comm) rsA2AOneLane(s Stream, capt bool, ln rsLane, dt dtype.DType, acc detcoll.Accumulate) error {
	w, r, sz := c.size, c.rank, dt.Size()
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

// rsSlots is the workspace layout of a many-lane a2a_tree: per lane W-1
// slots (pointer-list kernel, the own block read in place) or W slots
// (strided kernel, the own block copied in).
type rsSlots struct {
	ws            DevicePtr
	list          bool
	rank          int
	bases, stride []int
}

func (l rsSlots) slot(i, p int) DevicePtr {
	if l.list {
		return l.ws.Add(l.bases[i] + slotOf(p, l.rank)*l.stride[i])
	}
	return l.ws.Add(l.bases[i] + p*l.stride[i])
}

// rsA2ALanes is a2a_tree for several lanes (or above the pointer-list
// kernel's inputs): lay out the slots, copy the own blocks when strided,
// exchange in one group, reduce every lane.
func (c *Comm) rsA2ALanes(s Stream, capt bool, lanes []rsLane, dt dtype.DType, acc detcoll.Accumulate) error {
	w, r := c.size, c.rank
	l := rsSlots{list: w <= c.cfg.listInputs(), rank: r, bases: make([]int, len(lanes)), stride: make([]int, len(lanes))}
	need := 0
	for i, ln := range lanes {
		var b, st, nd int
		if l.list {
			b, st, nd = slots(need, ln.send.Add(r*ln.n), ln.n, w-1)
		} else {
			b, st, nd = slots(need, ln.recv, ln.n, w)
		}
		l.bases[i], l.stride[i], need = b, st, need+nd
	}
	var err error
	if l.ws, err = c.workspace(need, capt); err != nil {
		return err
	}
	if !l.list {
		for i, ln := range lanes {
			if err := c.rt.MemcpyDtoDAsync(l.slot(i, r), ln.send.Add(r*ln.n), ln.n, s); err != nil {
				return err
			}
		}
	}
	if err := c.rsA2AExchange(s, lanes, l); err != nil {
		return err
	}
	return c.rsA2AReduce(s, lanes, l, dt, acc)
}

// rsA2AExchange sends block p of every lane to rank p and receives block r
// of every peer's lanes into the slots, in one NCCL group.
func (c *Comm) rsA2AExchange(s Stream, lanes []rsLane, l rsSlots) error {
	w, r := c.size, c.rank
	return c.group(func() error {
		for i, ln := range lanes {
			for p := 0; p < w; p++ {
				if p == r {
					continue
				}
				if err := c.send(ln.send.Add(p*ln.n), ln.n, p, s); err != nil {
					return err
				}
				if err := c.recv(l.slot(i, p), ln.n, p, s); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// rsA2AReduce reduces every lane's W blocks into its output.
func (c *Comm) rsA2AReduce(s Stream, lanes []rsLane, l rsSlots, dt dtype.DType, acc detcoll.Accumulate) error {
	w, r, sz := c.size, c.rank, dt.Size()
	for i, ln := range lanes {
		var err error
		if l.list {
			ptrs := c.ptrList()
			for p := range ptrs {
				ptrs[p] = ln.send.Add(r * ln.n)
				if p != r {
					ptrs[p] = l.slot(i, p)
				}
			}
			err = c.reduce(s, dt, acc, ln.recv, ptrs, ln.n/sz, false)
		} else {
			err = c.reduceStrided(s, dt, acc, ln.recv, l.slot(i, 0), l.stride[i], w, ln.n/sz)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
