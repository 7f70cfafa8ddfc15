package detcoll

import (
	"context"
	"errors"
	"fmt"

	"github.com/detcoll/detcoll/internal/agree"
	"github.com/detcoll/detcoll/transport"
)

// This file adds the data-movement operations a torch.distributed process
// group needs besides the reductions: AllToAll (MoE dispatch), Gather and
// point-to-point Send/Recv. None of them does arithmetic, so every bit
// arrives as sent. They use the frame of comm.go (run, begin, fail) and the
// message tags of their own phases below (built by tag, and by p2pTag for
// Send/Recv).

// Tag phases and signature op codes of this file, kept clear of comm.go's
// (which count up from 1).
const (
	phaseAllToAll uint32 = 0x40 + iota
	phaseGatherRoot
	phaseP2P
)

const (
	opAllToAll uint8 = 0x40 + iota
	opGather
)

// p2pTag is the tag of a Send/Recv message: the caller's tag and the
// length go into Sig, so that a Recv expecting another tag or size from
// that peer is ErrMismatch rather than garbage. Point-to-point calls are not
// numbered by the communicator's agreement (only two ranks take part, and
// each numbers only its own calls), so Seq is 0.
func p2pTag(userTag uint32, n int) transport.Tag {
	h := uint64(userTag)*0x9E3779B97F4A7C15 ^ uint64(n)*0xC2B2AE3D27D4EB4F
	return transport.Tag{Phase: phaseP2P, Sig: h}
}

// AllToAll sends sends[p] to rank p and receives rank p's message for this
// rank into recvs[p]; recvs[rank] receives a copy of sends[rank]. Both
// slices have W entries. Lengths may differ per pair (alltoallv), but
// len(sends[q]) on rank p must equal len(recvs[p]) on rank q: a
// disagreement is ErrMismatch on the receiving rank (the sender may only
// see its peer go away). No recv entry may overlap any send entry or
// another recv entry.
func (c *Comm) AllToAll(ctx context.Context, sends, recvs [][]byte) error {
	const op = "AllToAll"
	return c.run(ctx, op, func() (signature, error) {
		if len(sends) != c.size || len(recvs) != c.size {
			return signature{}, c.argErr(op, "%d send and %d recv entries, want W = %d of each", len(sends), len(recvs), c.size)
		}
		if len(sends[c.rank]) != len(recvs[c.rank]) {
			return signature{}, c.argErr(op, "this rank's own block: send %d bytes, recv %d", len(sends[c.rank]), len(recvs[c.rank]))
		}
		for p, r := range recvs {
			for q := range sends {
				if overlap(r, sends[q]) {
					return signature{}, c.argErr(op, "recv block %d overlaps send block %d", p, q)
				}
				if q != p && overlap(r, recvs[q]) {
					return signature{}, c.argErr(op, "recv blocks %d and %d overlap", p, q)
				}
			}
		}
		return signature{op: opAllToAll}, nil
	}, func(ctx context.Context, call agree.Call) error {
		copy(recvs[c.rank], sends[c.rank])
		return c.exchange(ctx, tag(phaseAllToAll, call),
			func(p int) ([]byte, bool) { return sends[p], true },
			func(p int) ([]byte, bool) { return recvs[p], true })
	})
}

// Gather collects every rank's send (the same length n on every rank) into
// root's recv (W*n bytes, rank r's block at [r*n, (r+1)*n)); recv is
// ignored on the other ranks and may be nil there.
func (c *Comm) Gather(ctx context.Context, send, recv []byte, root int) error {
	const op = "Gather"
	n := len(send)
	return c.run(ctx, op, func() (signature, error) {
		if root < 0 || root >= c.size {
			return signature{}, c.argErr(op, "root %d out of range [0,%d)", root, c.size)
		}
		if c.rank == root {
			if len(recv) != c.size*n {
				return signature{}, c.argErr(op, "root's recv has %d bytes, want W*len(send) = %d", len(recv), c.size*n)
			}
			if overlap(send, recv) && !same(send, recv[root*n:(root+1)*n]) {
				return signature{}, c.argErr(op, "send overlaps recv but is not the root's block")
			}
		}
		return signature{op: opGather, root: int32(root), count: uint64(n)}, nil
	}, func(ctx context.Context, call agree.Call) error {
		tg := tag(phaseGatherRoot, call)
		if c.rank == root {
			copy(recv[root*n:], send)
			return c.exchange(ctx, tg, func(int) ([]byte, bool) { return nil, false },
				func(p int) ([]byte, bool) { return recv[p*n : (p+1)*n], true })
		}
		return c.exchange(ctx, tg, func(p int) ([]byte, bool) { return send, p == root },
			func(int) ([]byte, bool) { return nil, false })
	})
}

// Send sends buf to peer, to be matched by peer's Recv from this rank with
// the same tag and length. Between two ranks, Sends and Recvs match in call
// order, interleaved with their collectives in call order. Send may block
// until the peer has posted the matching Recv (like MPI_Ssend): two ranks
// must not both Send to each other first. A Recv that finds another tag or
// length is ErrMismatch. Send and Recv are not validated like collectives
// (only the two ranks take part), and a failure poisons the Comm like any
// other.
func (c *Comm) Send(ctx context.Context, buf []byte, peer int, tag uint32) error {
	return c.p2p(ctx, "Send", buf, peer, tag, true)
}

// Recv receives peer's matching Send into buf; see Send.
func (c *Comm) Recv(ctx context.Context, buf []byte, peer int, tag uint32) error {
	return c.p2p(ctx, "Recv", buf, peer, tag, false)
}

func (c *Comm) p2p(ctx context.Context, op string, buf []byte, peer int, utag uint32, send bool) error {
	if err := c.begin(op); err != nil {
		c.mu.Unlock()
		return err
	}
	defer c.mu.Unlock()
	if peer < 0 || peer >= c.size || peer == c.rank {
		return c.argErr(op, "peer %d is not another rank of [0,%d) (this is rank %d)", peer, c.size, c.rank)
	}
	if ctx != nil && ctx.Err() != nil {
		return &Error{Op: op, Rank: c.rank, Peer: peer, Err: ctx.Err()}
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	tg := p2pTag(utag, len(buf))
	var err error
	if send {
		err = c.t.Send(ctx, peer, tg, buf)
	} else {
		err = c.t.Recv(ctx, peer, tg, buf)
	}
	if err != nil {
		if errors.Is(err, transport.ErrTagMismatch) || errors.Is(err, transport.ErrSizeMismatch) {
			err = fmt.Errorf("%w: rank %d's %s(peer %d, tag %d, %d bytes) met a message of another tag or size: %w", ErrMismatch, c.rank, op, peer, utag, len(buf), err)
		}
		return c.fail(op, err)
	}
	c.stats.Collectives++
	return nil
}
