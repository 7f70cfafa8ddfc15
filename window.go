package detcoll

import (
	"context"
	"errors"
	"fmt"

	"github.com/detcoll/detcoll/internal/agree"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/tree"
)

// Collectives over a shared window (transport.Sharer: ranks of one host).
// Instead of copying every peer's block into this rank's workspace and then
// reducing, a rank stages its block in its window slot once, and the reduce
// reads all W blocks where they lie: one copy in, one pass. Messages larger
// than a slot run as pieces, each one publication; the arithmetic is
// elementwise, so pieces and shards change no bit (docs/shm.md).

// window returns the transport's window and the slot capacity, or nil when
// collectives must move messages instead.
func (c *Comm) window() (transport.Sharer, int) {
	if c.size < 2 {
		return nil, 0
	}
	sh, ok := c.t.(transport.Sharer)
	if !ok {
		return nil, 0
	}
	n := sh.WindowBytes()
	if n <= 0 {
		return nil, 0
	}
	return sh, n
}

// publish stages n bytes, lets fill write them, publishes under tg and checks
// that every rank's block has want(p) bytes. The caller must Release.
func publish(ctx context.Context, sh transport.Sharer, tg transport.Tag, n int, fill func(slot []byte), want func(p int) int) ([][]byte, error) {
	slot, err := sh.Stage(ctx, n)
	if err != nil {
		return nil, err
	}
	fill(slot)
	views, err := sh.Publish(ctx, tg)
	if err != nil {
		return nil, err
	}
	for p, v := range views {
		if len(v) != want(p) {
			sh.Release()
			return nil, &transport.Error{Op: "publish", Peer: p,
				Err: fmt.Errorf("%w: rank %d published %d bytes, want %d", transport.ErrSizeMismatch, p, len(v), want(p))}
		}
	}
	return views, nil
}

// pieces calls fn for every piece [off, off+n) of total bytes, each at most
// max bytes (a whole number of elements of size sz); a total of 0 is one
// empty piece, so that every call publishes and is checked.
func pieces(total, max, sz int, fn func(off, n int) error) error {
	max = max / sz * sz
	if max <= 0 {
		return fmt.Errorf("detcoll: a window slot of %d bytes holds no element of %d bytes", max, sz)
	}
	for off := 0; ; off += max {
		n := min(max, total-off)
		if err := fn(off, n); err != nil {
			return err
		}
		if off+n >= total {
			return nil
		}
	}
}

func sameLen(n int) func(int) int { return func(int) int { return n } }

// exposerFor returns the transport's Exposer when an AllReduce of n bytes
// per rank reads the peers' buffers instead of the window: at W = 2 from
// exposeBytes, unless the ranks have agreed not to. At W = 4 and 8 on a
// 16-core host the window's shards were as fast or faster up to 1 MiB
// (docs/shm.md, "AllReduce from exposed buffers").
func (c *Comm) exposerFor(sh transport.Sharer, n int) transport.Exposer {
	ex, ok := sh.(transport.Exposer)
	if !ok || c.noExpose || c.size != 2 || n < c.cfg.exposeBytes {
		return nil
	}
	return ex
}

// allReduceOneShot: every rank publishes its piece; every rank reduces all W
// pieces into its recv. At W = 2, large messages that are not in place read
// the peer's send buffer instead (allReduceExposed).
func (c *Comm) allReduceOneShot(ctx context.Context, sh transport.Sharer, slot int, call agree.Call, send, recv []byte, dt DType, acc Accumulate) error {
	if ex := c.exposerFor(sh, len(send)); ex != nil && !same(send, recv) {
		if done, err := c.allReduceExposed(ctx, ex, tag(phaseExpose, call), send, recv, dt, acc); done {
			return err
		}
	}
	tg := tag(phaseGather, call)
	return pieces(len(send), slot, dt.Size(), func(off, n int) error {
		views, err := publish(ctx, sh, tg, n, func(s []byte) { copyCached(s, send[off:off+n]) }, sameLen(n))
		if err != nil {
			return err
		}
		defer sh.Release()
		return c.reduceOut(len(recv), dt, acc, views, recv[off:off+n])
	})
}

// allReduceShards: every rank publishes its piece, reduces its shard of the
// piece from all W into its next slot and publishes that; every rank then
// copies the W reduced shards into recv. Each rank reduces 1/W of the data
// (the bandwidth-optimal form, for large messages and W > 2). At W = 2,
// large messages read the peer's buffers instead: the shards so
// (allReduceExposedShards), or on a host of fewer than exposeShardsCPUs
// CPUs, when not in place, the whole input (allReduceExposed).
func (c *Comm) allReduceShards(ctx context.Context, sh transport.Sharer, slot int, call agree.Call, send, recv []byte, dt DType, acc Accumulate) error {
	if ex := c.exposerFor(sh, len(send)); ex != nil {
		var done bool
		var err error
		if hostCPUs() < exposeShardsCPUs && !same(send, recv) {
			done, err = c.allReduceExposed(ctx, ex, tag(phaseExpose, call), send, recv, dt, acc)
		} else {
			done, err = c.allReduceExposedShards(ctx, ex, call, send, recv, dt, acc)
		}
		if done {
			return err
		}
	}
	w, sz := c.size, dt.Size()
	tgIn, tgOut := tag(phaseA2A, call), tag(phaseShards, call)
	inputs := make([][]byte, w)
	return pieces(len(send), slot, sz, func(off, n int) error {
		shard := func(r int) (int, int) {
			o, k := tree.Shard(n/sz, w, r)
			return o * sz, (o + k) * sz
		}
		lo, hi := shard(c.rank)
		views, err := publish(ctx, sh, tgIn, n, func(s []byte) { copyCached(s, send[off:off+n]) }, sameLen(n))
		if err != nil {
			return err
		}
		out, err := sh.Stage(ctx, hi-lo)
		if err != nil {
			sh.Release()
			return err
		}
		for p, v := range views {
			inputs[p] = v[lo:hi]
		}
		err = c.reducer.Reduce(dt, acc, inputs, out)
		sh.Release()
		if err != nil {
			return err
		}
		shards, err := sh.Publish(ctx, tgOut)
		if err != nil {
			return err
		}
		defer sh.Release()
		for p, v := range shards {
			plo, phi := shard(p)
			if len(v) != phi-plo {
				return &transport.Error{Op: "publish", Peer: p,
					Err: fmt.Errorf("%w: rank %d published a shard of %d bytes, want %d", transport.ErrSizeMismatch, p, len(v), phi-plo)}
			}
			copyOut(len(recv), recv[off+plo:off+phi], v)
		}
		return nil
	})
}

// allGatherWindow: every rank publishes its piece and copies every rank's
// into recv. Large blocks go from the peers' send buffers straight into
// recv where the transport can (allGatherExposed).
func (c *Comm) allGatherWindow(ctx context.Context, sh transport.Sharer, slot int, call agree.Call, send, recv []byte, sz int) error {
	bn := len(send)
	if ex, ok := sh.(transport.Exposer); ok && !c.noExpose && bn >= c.cfg.exposeBytes {
		done, err := c.allGatherExposed(ctx, ex, tag(phaseExpose, call), send, recv)
		if done {
			return err
		}
	}
	tg := tag(phaseGather, call)
	return pieces(bn, slot, sz, func(off, n int) error {
		views, err := publish(ctx, sh, tg, n, func(s []byte) { copyCached(s, send[off:off+n]) }, sameLen(n))
		if err != nil {
			return err
		}
		defer sh.Release()
		for p, v := range views {
			if p != c.rank {
				copyOut(len(recv), recv[p*bn+off:], v)
			}
		}
		copyOut(len(recv), recv[c.rank*bn+off:], send[off:off+n]) // a no-op copy when in place
		return nil
	})
}

// exposeAll exposes buf under tg, runs meanwhile (if any) while the peers
// arrive, and waits for every rank's buffer, which must have buf's length.
// With exposed true and a nil error the caller reads and then Unexposes.
// exposed is false, with a nil error and nothing moved, when the ranks agreed
// not to expose (then the window is still usable, and no later call tries
// again); with an error the exposure is over.
func (c *Comm) exposeAll(ctx context.Context, ex transport.Exposer, tg transport.Tag, buf []byte, meanwhile func()) (exposed bool, err error) {
	if err := ex.Expose(ctx, tg, buf); err != nil {
		return true, err
	}
	if meanwhile != nil {
		meanwhile()
	}
	lens, err := ex.Exposed(ctx)
	switch {
	case errors.Is(err, transport.ErrNoExpose):
		c.noExpose = true
		return false, nil
	case err != nil:
		return true, err
	}
	for p, n := range lens {
		if n != len(buf) {
			ex.Unexpose(ctx)
			return true, &transport.Error{Op: "exposed", Rank: c.rank, Peer: p,
				Err: fmt.Errorf("%w: rank %d exposed %d bytes, want %d", transport.ErrSizeMismatch, p, n, len(buf))}
		}
	}
	return true, nil
}

// unexpose ends an exposure whatever happened in it (the buffer is the
// caller's again only once Unexpose returns) and returns err, or
// Unexpose's error when err is nil.
func unexpose(ctx context.Context, ex transport.Exposer, err error) error {
	if uerr := ex.Unexpose(ctx); err == nil {
		err = uerr
	}
	return err
}

// readPeers copies [off, off+len(dst(p))) of every peer p's exposed buffer
// into dst(p), starting with the next rank so that the W readers of a
// buffer do not all start with the same owner.
func (c *Comm) readPeers(ex transport.Exposer, off func(p int) int, dst func(i, p int) []byte) error {
	for i := 1; i < c.size; i++ {
		p := (c.rank + i) % c.size
		if err := ex.ReadExposed(p, off(p), dst(i, p)); err != nil {
			return err
		}
	}
	return nil
}

// allGatherExposed: every rank exposes send, copies its own block while the
// peers arrive, then copies every peer's straight from the peer's memory
// into recv. done is false, having moved no peer's bytes, when the ranks
// agreed not to expose (exposeAll).
func (c *Comm) allGatherExposed(ctx context.Context, ex transport.Exposer, tg transport.Tag, send, recv []byte) (done bool, err error) {
	bn, me := len(send), c.rank
	own := func() { copyOut(len(recv), recv[me*bn:(me+1)*bn], send) } // a no-op copy when in place
	if exposed, err := c.exposeAll(ctx, ex, tg, send, own); !exposed || err != nil {
		return exposed, err
	}
	err = c.readPeers(ex, func(int) int { return 0 }, func(_, p int) []byte { return recv[p*bn : (p+1)*bn] })
	return true, unexpose(ctx, ex, err)
}

// allReduceExposed is allReduceOneShot without the window: every rank
// exposes send and, piece by piece, copies every peer's piece out of the
// peer's memory into its workspace and reduces the W pieces into recv.
// Each piece is small enough to stay in the cache between its copy and its
// reduce. The peers' send buffers are read where they lie, not copied into
// a slot first, and recv is written where no peer reads it. recv must not
// be send (a peer may still read the piece that this rank would
// overwrite). done is as in allGatherExposed.
func (c *Comm) allReduceExposed(ctx context.Context, ex transport.Exposer, tg transport.Tag, send, recv []byte, dt DType, acc Accumulate) (done bool, err error) {
	if exposed, err := c.exposeAll(ctx, ex, tg, send, nil); !exposed || err != nil {
		return exposed, err
	}
	return true, unexpose(ctx, ex, c.reduceExposed(ex, send, recv, 0, len(send), dt, acc))
}

// reduceExposed reduces bytes [lo, hi) of every rank's exposed send into
// the same bytes of recv, in pieces of cachedPiece: each peer's piece is
// copied into the workspace and reduced with this rank's while it is still
// in the cache.
func (c *Comm) reduceExposed(ex transport.Exposer, send, recv []byte, lo, hi int, dt DType, acc Accumulate) error {
	piece := max(cachedPiece/dt.Size(), 1) * dt.Size()
	total := 0 // a shard of recv is read by the peers next: through the cache
	if lo == 0 && hi == len(recv) {
		total = len(recv)
	}
	ws := c.workspace((c.size - 1) * min(piece, hi-lo))
	inputs := c.inputs()
	defer clear(inputs) // keep no view past the call
	for off := lo; off < hi; off += piece {
		k := min(piece, hi-off)
		err := c.readPeers(ex, func(int) int { return off }, func(i, p int) []byte {
			inputs[p] = ws[(i-1)*k : i*k]
			return inputs[p]
		})
		if err != nil {
			return err
		}
		inputs[c.rank] = send[off : off+k]
		if err := c.reduceOut(total, dt, acc, inputs, recv[off:off+k]); err != nil {
			return err
		}
	}
	return nil
}

// allReduceExposedShards is allReduceShards without the window: every rank
// exposes send and reduces its shard from every rank's, the peers' parts
// copied out of their memory piece by piece; then every rank exposes recv
// and copies every peer's reduced shard out of it. In place is safe: a
// rank writes only its own shard of recv while the peers read their shards
// of its send, and the second exposure begins after every rank has
// finished the first. done is as in allGatherExposed.
func (c *Comm) allReduceExposedShards(ctx context.Context, ex transport.Exposer, call agree.Call, send, recv []byte, dt DType, acc Accumulate) (done bool, err error) {
	sz, me, n := dt.Size(), c.rank, len(send)
	shard := func(r int) (int, int) {
		o, k := tree.Shard(n/sz, c.size, r)
		return o * sz, (o + k) * sz
	}
	lo, hi := shard(me)
	if exposed, err := c.exposeAll(ctx, ex, tag(phaseExpose, call), send, nil); !exposed || err != nil {
		return exposed, err
	}
	if err := unexpose(ctx, ex, c.reduceExposed(ex, send, recv, lo, hi, dt, acc)); err != nil {
		return true, err
	}
	exposed, err := c.exposeAll(ctx, ex, tag(phaseExposeShards, call), recv, nil)
	switch {
	case err != nil:
		return true, err
	case !exposed: // the ranks agreed to expose a moment ago
		return true, &Error{Op: "AllReduce", Rank: me, Peer: -1, Err: errors.New("detcoll: the ranks declined the second exposure of an AllReduce")}
	}
	err = c.readPeers(ex, func(p int) int { lo, _ := shard(p); return lo }, func(_, p int) []byte {
		plo, phi := shard(p)
		return recv[plo:phi]
	})
	return true, unexpose(ctx, ex, err)
}

// reduceScatterWindow: piece j of every block goes into the slot (block b's
// piece at b*n); rank r reduces block r's piece of every rank. A rank's own
// block is not copied: no peer reads it, and the rank reduces it from send
// (which may not overlap recv), 1/W less copying for the same bits.
func (c *Comm) reduceScatterWindow(ctx context.Context, sh transport.Sharer, slot int, tg transport.Tag, send, recv []byte, dt DType, acc Accumulate) error {
	w, bn, me := c.size, len(recv), c.rank
	inputs := c.inputs()
	defer clear(inputs) // keep no view past the call
	return pieces(bn, slot/w, dt.Size(), func(off, n int) error {
		views, err := publish(ctx, sh, tg, w*n, func(s []byte) {
			for b := 0; b < w; b++ {
				if b != me {
					copyCached(s[b*n:(b+1)*n], send[b*bn+off:b*bn+off+n])
				}
			}
		}, sameLen(w*n))
		if err != nil {
			return err
		}
		defer sh.Release()
		for p, v := range views {
			inputs[p] = v[me*n : (me+1)*n]
		}
		inputs[me] = send[me*bn+off : me*bn+off+n]
		return c.reduceOut(len(recv), dt, acc, inputs, recv[off:off+n])
	})
}

// inputs returns the communicator's W-long scratch slice of reducer inputs
// (held under c.mu, like the workspace), so that a call does not allocate
// one.
func (c *Comm) inputs() [][]byte {
	if len(c.scratch) != c.size {
		c.scratch = make([][]byte, c.size)
	}
	return c.scratch
}

// cachedPiece is below the size from which the Go runtime's memmove writes
// with non-temporal stores on amd64 (1 MiB, runtime/memmove_amd64.s), which
// bypass the cache. Bytes put in a window slot are read by every rank right
// after, and a slot's first MiB is reused within a few dozen calls, so they
// belong in the last-level cache the cores share: a 1 MiB AllGather at W = 2 took 230–250
// µs with one copy call per slot, 73–90 µs with these pieces (docs/shm.md,
// "Copies and the cache").
const cachedPiece = 256 << 10

// cachedOut bounds the receive buffers that are written through the cache
// too; a larger one would only push the window out of it.
const cachedOut = 8 << 20

// reduceOut reduces inputs into out, a piece of a receive buffer of total
// bytes that the call writes and nobody reads before it returns: above
// cachedOut with non-temporal stores (reduce.Reducer.ReduceUncached), so
// that no line of it is fetched before it is written and the window and
// the inputs keep the cache. Same bits either way.
func (c *Comm) reduceOut(total int, dt DType, acc Accumulate, inputs [][]byte, out []byte) error {
	if total > cachedOut {
		return c.reducer.ReduceUncached(dt, acc, inputs, out)
	}
	return c.reducer.Reduce(dt, acc, inputs, out)
}

// copyCached copies min(len(dst), len(src)) bytes through the cache.
func copyCached(dst, src []byte) {
	n := min(len(dst), len(src))
	for o := 0; o < n; o += cachedPiece {
		e := min(o+cachedPiece, n)
		copy(dst[o:e], src[o:e])
	}
}

// copyOut copies out of the window into a receive buffer of total bytes:
// through the cache when the buffer is at most cachedOut, else as one copy.
func copyOut(total int, dst, src []byte) {
	if total <= cachedOut {
		copyCached(dst, src)
		return
	}
	copy(dst, src)
}
