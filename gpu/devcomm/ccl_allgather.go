package devcomm

import (
	"github.com/detcoll/detcoll/internal/ccl"
)

// The NCCL-transport AllGather: one ncclAllGather per lane (one group), or
// grouped sends and receives (GatherP2P).

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

// allGatherLanes is one ncclAllGather per non-empty lane in one group.
func (c *Comm) allGatherLanes(s Stream, sends, recvs []Buffer, counts []int, sz int) error {
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
}
