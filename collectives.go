package detcoll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"time"

	"github.com/detcoll/detcoll/internal/agree"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/tree"
)

func (c *Comm) checkReducible(op string, dt DType) error {
	if !dt.Valid() {
		return c.argErr(op, "dtype %v is not reducible (want bf16, fp16, fp32 or fp64)", dt)
	}
	return nil
}

func (c *Comm) checkElems(op, what string, b []byte, dt DType) error {
	if sz := dt.Size(); sz == 0 || len(b)%sz != 0 {
		return c.argErr(op, "%s of %d bytes is not a whole number of %v elements", what, len(b), dt)
	}
	return nil
}

func (c *Comm) checkAlgAcc(op string, alg Algorithm, acc Accumulate) error {
	if alg != GatherTree && alg != A2ATree && alg != RecursiveDoubling && alg != HalvingDoubling {
		return c.argErr(op, "unknown algorithm %v", alg)
	}
	if !acc.Valid() {
		return c.argErr(op, "unknown accumulate mode %v", acc)
	}
	return nil
}

// AllReduce writes the canonical tree reduction of every rank's send into
// recv on every rank. len(send) == len(recv); send and recv may be the same
// slice (in place) but must not otherwise overlap.
func (c *Comm) AllReduce(ctx context.Context, send, recv []byte, dt DType, opts ...Option) error {
	const op = "AllReduce"
	alg, acc := c.resolve(opts, false, len(send), elemsOf(len(send), dt))
	var count int
	return c.run(ctx, op, func() (signature, error) {
		if err := c.checkReducible(op, dt); err != nil {
			return signature{}, err
		}
		if err := c.checkElems(op, "send", send, dt); err != nil {
			return signature{}, err
		}
		if len(recv) != len(send) {
			return signature{}, c.argErr(op, "recv has %d bytes, send %d", len(recv), len(send))
		}
		if overlap(send, recv) && !same(send, recv) {
			return signature{}, c.argErr(op, "send and recv overlap without being the same buffer")
		}
		if err := c.checkAlgAcc(op, alg, acc); err != nil {
			return signature{}, err
		}
		count = len(send) / dt.Size()
		alg = c.runsAs(alg, dt, acc)
		return signature{op: opAllReduce, dt: uint8(dt), acc: uint8(acc), alg: uint8(alg), count: uint64(count)}, nil
	}, func(ctx context.Context, call agree.Call) error {
		switch alg {
		case GatherTree:
			return c.allReduceGather(ctx, call, send, recv, dt, acc)
		case RecursiveDoubling:
			return c.allReduceDoubling(ctx, call, send, recv, c.workspace(len(send)), dt, acc)
		case HalvingDoubling:
			return c.allReduceHalving(ctx, call, send, recv, dt, acc)
		}
		return c.allReduceA2A(ctx, call, send, recv, dt, acc, count)
	})
}

func (c *Comm) allReduceGather(ctx context.Context, call agree.Call, send, recv []byte, dt DType, acc Accumulate) error {
	if sh, slot := c.window(); sh != nil {
		return c.allReduceOneShot(ctx, sh, slot, call, send, recv, dt, acc)
	}
	n := len(send)
	w := c.size
	ws := c.workspace((w - 1) * n)
	inputs := c.inputs()
	defer clear(inputs) // keep no view past the call
	for p := 0; p < w; p++ {
		switch {
		case p < c.rank:
			inputs[p] = ws[p*n : (p+1)*n]
		case p > c.rank:
			inputs[p] = ws[(p-1)*n : p*n]
		}
	}
	inputs[c.rank] = send
	if err := c.allGatherList(ctx, tag(phaseGather, call), send, inputs); err != nil {
		return err
	}
	return c.reducer.Reduce(dt, acc, inputs, recv)
}

// allReduceDoubling evaluates the tree level by level on every rank
// (tree.DoublingSteps): at each level a rank sends its block's value to the
// sibling block and adds the sibling's value it receives, log2(W) steps of
// one message each instead of gather_tree's one step of W-1 messages.
// The partials it sends are rounded to the dtype, as every node of the tree
// is in the native accumulation; fp16 and bf16 with f32 accumulation would
// need float32 partials and run as gather_tree instead (runsAs).
func (c *Comm) allReduceDoubling(ctx context.Context, call agree.Call, send, recv, tmp []byte, dt DType, acc Accumulate) error {
	steps := c.doublingSteps()
	cur := send
	tg := tag(phaseDoubling, call)
	for i, st := range steps {
		if st.From < 0 {
			continue
		}
		if err := c.doublingStep(ctx, tg, st, cur, tmp); err != nil {
			c.relayMismatch(ctx, err, call, laterTo(steps[i+1:]))
			return err
		}
		in := [][]byte{tmp, cur}
		if st.Left {
			in[0], in[1] = cur, tmp
		}
		if err := c.reducer.Reduce(dt, acc, in, recv); err != nil {
			return err
		}
		cur = recv
	}
	if same(cur, send) {
		return c.reducer.Reduce(dt, acc, [][]byte{send}, recv)
	}
	return nil
}

// allReduceHalving is halving and doubling in the tree's order
// (tree.HalvingSteps, W = 2^k): log2 W levels in which a rank sends half
// of what it holds to its peer and adds the other half's partials, then
// the same levels backwards all-gathering the reduced ranges. a2a_tree's
// bytes, 2(W-1)/W·N, in 2·log2 W messages instead of 2(W-1).
func (c *Comm) allReduceHalving(ctx context.Context, call agree.Call, send, recv []byte, dt DType, acc Accumulate) error {
	sz := dt.Size()
	steps := tree.HalvingSteps(len(send)/sz, c.size, c.rank)
	b := func(buf []byte, r [2]int) []byte { return buf[r[0]*sz : r[1]*sz] }
	var tmp []byte
	if len(steps) > 0 {
		tmp = c.workspace(len(b(send, steps[0].Keep)))
	}
	tg := tag(phaseHalving, call)
	cur := send
	for _, st := range steps {
		mine := b(cur, st.Keep)
		theirs := tmp[:len(mine)]
		err := c.exchange(ctx, tg,
			func(p int) ([]byte, bool) { return b(cur, st.Give), p == st.Peer },
			func(p int) ([]byte, bool) { return theirs, p == st.Peer })
		if err != nil {
			c.relayMismatch(ctx, err, call, halvingPeers(steps, st.Peer))
			return err
		}
		in := [][]byte{theirs, mine}
		if st.Left {
			in[0], in[1] = mine, theirs
		}
		if err := c.reducer.Reduce(dt, acc, in, b(recv, st.Keep)); err != nil {
			return err
		}
		cur = recv
	}
	if len(steps) == 0 {
		return c.reducer.Reduce(dt, acc, [][]byte{send}, recv)
	}
	tg = tag(phaseShards, call)
	for l := len(steps) - 1; l >= 0; l-- {
		st := steps[l]
		err := c.exchange(ctx, tg,
			func(p int) ([]byte, bool) { return b(recv, st.Keep), p == st.Peer },
			func(p int) ([]byte, bool) { return b(recv, st.Give), p == st.Peer })
		if err != nil {
			c.relayMismatch(ctx, err, call, halvingPeers(steps, st.Peer))
			return err
		}
	}
	return nil
}

// allGatherDoubling gathers in the steps of tree.DoublingSteps: at each
// level a rank sends the blocks its tree block has gathered so far and
// receives the sibling block's, log2(W) steps instead of one step of W-1
// messages. This rank's block is already in place in recv.
func (c *Comm) allGatherDoubling(ctx context.Context, tg transport.Tag, recv []byte, n int) error {
	w := c.size
	steps := c.doublingSteps()
	for l, st := range steps {
		if st.From < 0 {
			continue
		}
		lo := c.rank >> l << l
		sib := lo ^ (1 << l)
		mine := recv[lo*n : min(lo+1<<l, w)*n]
		theirs := recv[sib*n : min(sib+1<<l, w)*n]
		if err := c.doublingStep(ctx, tg, st, mine, theirs); err != nil {
			c.relayMismatch(ctx, err, agree.Call{Seq: tg.Seq, Hash: tg.Sig}, laterTo(steps[l+1:]))
			return err
		}
	}
	return nil
}

// doublingSteps is this rank's tree.DoublingSteps, computed once: W and the
// rank never change, and a small call should not allocate its schedule.
// The caller holds c.mu.
func (c *Comm) doublingSteps() []tree.Step {
	if c.dsteps == nil {
		c.dsteps = tree.DoublingSteps(c.size, c.rank)
	}
	return c.dsteps
}

// doublingStep runs one level of tree.DoublingSteps: mine to every rank of
// st.To, theirs from st.From.
func (c *Comm) doublingStep(ctx context.Context, tg transport.Tag, st tree.Step, mine, theirs []byte) error {
	return c.exchange(ctx, tg,
		func(p int) ([]byte, bool) { return mine, slices.Contains(st.To, p) },
		func(p int) ([]byte, bool) { return theirs, p == st.From })
}

// laterTo is every rank that receives from this one in steps.
func laterTo(steps []tree.Step) []int {
	var to []int
	for _, st := range steps {
		to = append(to, st.To...)
	}
	return to
}

// halvingPeers is every peer of steps but the one that failed.
func halvingPeers(steps []tree.HalvingStep, failed int) []int {
	var to []int
	for _, st := range steps {
		if st.Peer != failed {
			to = append(to, st.Peer)
		}
	}
	return to
}

func (c *Comm) allReduceA2A(ctx context.Context, call agree.Call, send, recv []byte, dt DType, acc Accumulate, count int) error {
	if sh, slot := c.window(); sh != nil {
		return c.allReduceShards(ctx, sh, slot, call, send, recv, dt, acc)
	}
	w, sz := c.size, dt.Size()
	shard := func(r int) (int, int) {
		off, n := tree.Shard(count, w, r)
		return off * sz, (off + n) * sz
	}
	mlo, mhi := shard(c.rank)
	n := mhi - mlo
	ws := c.workspace((w - 1) * n)
	inputs := make([][]byte, w)
	for p := 0; p < w; p++ {
		switch {
		case p < c.rank:
			inputs[p] = ws[p*n : (p+1)*n]
		case p > c.rank:
			inputs[p] = ws[(p-1)*n : p*n]
		}
	}
	inputs[c.rank] = send[mlo:mhi]
	// Phase 1: shard p of my input goes to rank p; shard mine of every peer comes here.
	err := c.exchange(ctx, tag(phaseA2A, call),
		func(p int) ([]byte, bool) { lo, hi := shard(p); return send[lo:hi], true },
		func(p int) ([]byte, bool) { return inputs[p], true })
	if err != nil {
		return err
	}
	if err := c.reducer.Reduce(dt, acc, inputs, recv[mlo:mhi]); err != nil {
		return err
	}
	// Phase 2: all-gather the reduced shards straight into recv.
	return c.allGatherBlocks(ctx, tag(phaseShards, call), recv[mlo:mhi], func(p int) []byte {
		lo, hi := shard(p)
		return recv[lo:hi]
	})
}

// AllGather gathers every rank's send (count elements of any size dt) into
// recv (W*count), rank r's block at [r*count, (r+1)*count). It runs in place
// when send is exactly rank r's block of recv. It needs no workspace.
func (c *Comm) AllGather(ctx context.Context, send, recv []byte, dt DType) error {
	const op = "AllGather"
	return c.run(ctx, op, func() (signature, error) {
		if err := c.checkElems(op, "send", send, dt); err != nil {
			return signature{}, err
		}
		n := len(send)
		if len(recv) != c.size*n {
			return signature{}, c.argErr(op, "recv has %d bytes, want W*len(send) = %d", len(recv), c.size*n)
		}
		if overlap(send, recv) && !same(send, recv[c.rank*n:(c.rank+1)*n]) {
			return signature{}, c.argErr(op, "send overlaps recv but is not this rank's block (in place needs send == recv[rank*n:(rank+1)*n])")
		}
		return signature{op: opAllGather, dt: uint8(dt), count: uint64(n / dt.Size())}, nil
	}, func(ctx context.Context, call agree.Call) error {
		n := len(send)
		if sh, slot := c.window(); sh != nil {
			return c.allGatherWindow(ctx, sh, slot, call, send, recv, dt.Size())
		}
		copy(recv[c.rank*n:], send) // a no-op copy when in place
		if c.gatherDoubling(n) {
			return c.allGatherDoubling(ctx, tag(phaseDoubling, call), recv, n)
		}
		return c.allGatherInto(ctx, tag(phaseGather, call), send, recv, n)
	})
}

// ReduceScatter reduces block r ([r*count, (r+1)*count) of every rank's
// send, which holds W*count elements) into recv (count elements) on rank r.
// len(send) must be W*len(recv): the element count must divide by W.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv []byte, dt DType, opts ...Option) error {
	const op = "ReduceScatter"
	alg, acc := c.resolve(opts, true, len(send), elemsOf(len(send), dt))
	alg0 := alg
	return c.run(ctx, op, func() (signature, error) {
		if err := c.checkReducible(op, dt); err != nil {
			return signature{}, err
		}
		if err := c.checkRS(op, send, recv, dt); err != nil {
			return signature{}, err
		}
		if err := c.checkAlgAcc(op, alg, acc); err != nil {
			return signature{}, err
		}
		alg = c.runsAs(alg, dt, acc)
		if alg == GatherTree && alg0 == RecursiveDoubling {
			// ReduceScatter's twin of recursive doubling where it cannot run.
			alg = A2ATree
		}
		return signature{op: opReduceScatter, dt: uint8(dt), acc: uint8(acc), alg: uint8(alg), count: uint64(len(recv) / dt.Size())}, nil
	}, func(ctx context.Context, call agree.Call) error {
		if sh, slot := c.rsWindow(dt); sh != nil {
			// One lane: no lane slices to allocate.
			return c.reduceScatterWindow(ctx, sh, slot, tag(phaseGather, call), send, recv, dt, acc)
		}
		switch alg {
		case RecursiveDoubling:
			return c.reduceScatterDoubling(ctx, call, send, recv, dt, acc)
		case HalvingDoubling:
			return c.reduceScatterHalving(ctx, call, send, recv, dt, acc)
		}
		if alg == A2ATree {
			return c.reduceScatterA2AOne(ctx, call, send, recv, dt, acc)
		}
		return c.reduceScatter(ctx, call, [][]byte{send}, [][]byte{recv}, dt, acc, alg)
	})
}

// reduceScatterA2AOne is reduceScatterA2A for one lane, the same messages
// and the same reduce, without the lanes' closures and slices: a small
// ReduceScatter over TCP allocates nothing.
func (c *Comm) reduceScatterA2AOne(ctx context.Context, call agree.Call, send, recv []byte, dt DType, acc Accumulate) error {
	n, me := len(recv), c.rank
	ws := c.workspace((c.size - 1) * n)
	inputs := c.inputs()
	defer clear(inputs) // keep no view past the call
	for p := range inputs {
		switch {
		case p < me:
			inputs[p] = ws[p*n : (p+1)*n]
		case p > me:
			inputs[p] = ws[(p-1)*n : p*n]
		default:
			inputs[p] = send[me*n : (me+1)*n]
		}
	}
	if err := c.scatterList(ctx, tag(phaseA2A, call), send, n, inputs); err != nil {
		return err
	}
	return c.reducer.Reduce(dt, acc, inputs, recv)
}

// reduceScatterDoubling is a recursive-doubling AllReduce of the whole
// input into the workspace, of which this rank keeps its block: ⌈log2 W⌉
// messages of W·len(recv) bytes against a2a_tree's W-1 of len(recv), for
// small inputs, where the messages cost and the bytes do not.
func (c *Comm) reduceScatterDoubling(ctx context.Context, call agree.Call, send, recv []byte, dt DType, acc Accumulate) error {
	n := len(send)
	ws := c.workspace(2 * n)
	full := ws[:n]
	if err := c.allReduceDoubling(ctx, call, send, full, ws[n:2*n], dt, acc); err != nil {
		return err
	}
	copy(recv, full[c.rank*len(recv):])
	return nil
}

// reduceScatterHalving is the first half of halving_doubling over the W
// blocks (tree.HalvingSteps with one part per block, W = 2^k): log2 W
// messages per rank, of W/2, W/4, … 1 blocks, a2a_tree's bytes and
// arithmetic in log2 W messages instead of W-1. The levels halve ranges
// of positions, and rank r ends with position tree.HalvingPosition(W, r);
// block b is read from position HalvingPosition(W, b), so r ends with block
// r. Each element still goes through the tree's additions in its order:
// where a block sits changes no bit. The first level packs the blocks it
// gives into one message (they are not contiguous in send) and reduces the
// ones it keeps block by block; later levels work on contiguous ranges of
// the workspace, and the last one adds into recv.
func (c *Comm) reduceScatterHalving(ctx context.Context, call agree.Call, send, recv []byte, dt DType, acc Accumulate) error {
	w, n := c.size, len(recv)
	steps := tree.HalvingSteps(w, w, c.rank)
	if len(steps) == 0 {
		return c.reducer.Reduce(dt, acc, [][]byte{send}, recv)
	}
	// Reversing bits twice is the identity: the block at position pos is
	// block HalvingPosition(W, pos).
	atPos := func(pos int) []byte { b := tree.HalvingPosition(w, pos); return send[b*n : (b+1)*n] }
	half := w / 2 * n
	ws := c.workspace(2 * half)
	// cur holds level 0's kept positions from steps[0].Keep[0] on; it reuses
	// the packed message, which is sent once the first exchange returns.
	cur, theirs := ws[:half], ws[half:]
	base := steps[0].Keep[0]
	rng := func(buf []byte, r [2]int) []byte { return buf[(r[0]-base)*n : (r[1]-base)*n] }
	tg := tag(phaseHalving, call)
	in := c.inputs()[:2]
	defer clear(in) // keep no view past the call
	add := func(left bool, mine, peer, out []byte) error {
		in[0], in[1] = peer, mine
		if left {
			in[0], in[1] = mine, peer
		}
		return c.reducer.Reduce(dt, acc, in, out)
	}
	for l, st := range steps {
		var give []byte
		if l == 0 {
			give = atPos(st.Give[0])
			if st.Give[1]-st.Give[0] > 1 {
				give = cur
				for pos := st.Give[0]; pos < st.Give[1]; pos++ {
					copy(give[(pos-st.Give[0])*n:], atPos(pos))
				}
			}
		} else {
			give = rng(cur, st.Give)
		}
		peer := theirs[:len(give)]
		err := c.exchange(ctx, tg,
			func(p int) ([]byte, bool) { return give, p == st.Peer },
			func(p int) ([]byte, bool) { return peer, p == st.Peer })
		if err != nil {
			c.relayMismatch(ctx, err, call, halvingPeers(steps, st.Peer))
			return err
		}
		last := l == len(steps)-1
		if l == 0 {
			for pos := st.Keep[0]; pos < st.Keep[1]; pos++ {
				out := recv
				if !last {
					out = rng(cur, [2]int{pos, pos + 1})
				}
				i := pos - st.Keep[0]
				if err := add(st.Left, atPos(pos), peer[i*n:(i+1)*n], out); err != nil {
					return err
				}
			}
			continue
		}
		out := rng(cur, st.Keep)
		if last {
			out = recv
		}
		if err := add(st.Left, rng(cur, st.Keep), peer, out); err != nil {
			return err
		}
	}
	return nil
}

func (c *Comm) checkRS(op string, send, recv []byte, dt DType) error {
	if err := c.checkElems(op, "send", send, dt); err != nil {
		return err
	}
	if len(send) != c.size*len(recv) {
		return c.argErr(op, "send has %d elements, want W*len(recv) = %d*%d: ReduceScatter needs the send count to divide by W",
			len(send)/dt.Size(), c.size, len(recv)/dt.Size())
	}
	if overlap(send, recv) {
		return c.argErr(op, "send and recv overlap")
	}
	return nil
}

// reduceScatter runs every lane's reduce-scatter under one synchronisation.
func (c *Comm) reduceScatter(ctx context.Context, call agree.Call, sends, recvs [][]byte, dt DType, acc Accumulate, alg Algorithm) error {
	if sh, slot := c.rsWindow(dt); sh != nil {
		for l := range sends {
			if err := c.reduceScatterWindow(ctx, sh, slot, tag(phaseGather, call), sends[l], recvs[l], dt, acc); err != nil {
				return err
			}
		}
		return nil
	}
	total := 0
	for _, r := range recvs {
		total += len(r)
	}
	if alg == GatherTree {
		return c.reduceScatterGatherTree(ctx, call, sends, recvs, dt, acc, total)
	}
	return c.reduceScatterA2A(ctx, call, sends, recvs, dt, acc, total)
}

// rsWindow returns the window a reduce-scatter of dt runs over, or nil when
// it must move messages (no window, or a slot too small for one element of
// every block). Both algorithms read block r of every rank in place there:
// the same bits.
func (c *Comm) rsWindow(dt DType) (transport.Sharer, int) {
	sh, slot := c.window()
	if sh == nil || slot/c.size < dt.Size() {
		return nil, 0
	}
	return sh, slot
}

// reduceScatterGatherTree is the seed's path: gather every rank's whole input
// (all lanes, total bytes per rank), then reduce this rank's block of each lane.
func (c *Comm) reduceScatterGatherTree(ctx context.Context, call agree.Call, sends, recvs [][]byte, dt DType, acc Accumulate, total int) error {
	w := c.size
	ws := c.workspace((w - 1) * w * total)
	lanesOf := func(p int) [][]byte { // peer p's copy of every lane, in ws
		slot := p
		if p > c.rank {
			slot = p - 1
		}
		base := slot * w * total
		out := make([][]byte, len(sends))
		for i, s := range sends {
			out[i] = ws[base : base+len(s)]
			base += len(s)
		}
		return out
	}
	peers := make([][][]byte, w)
	for p := range peers {
		if p != c.rank {
			peers[p] = lanesOf(p)
		}
	}
	err := c.exchangeLanes(ctx, tag(phaseGather, call),
		func(p, l int) []byte { return sends[l] },
		func(p, l int) []byte { return peers[p][l] }, len(sends))
	if err != nil {
		return err
	}
	for l := range sends {
		n := len(recvs[l])
		inputs := make([][]byte, w)
		for p := range inputs {
			if p == c.rank {
				inputs[p] = sends[l][c.rank*n : (c.rank+1)*n]
			} else {
				inputs[p] = peers[p][l][c.rank*n : (c.rank+1)*n]
			}
		}
		if err := c.reducer.Reduce(dt, acc, inputs, recvs[l]); err != nil {
			return err
		}
	}
	return nil
}

// reduceScatterA2A sends block p of every lane to rank p and reduces this
// rank's block of every peer's lanes (total bytes of recv across lanes).
func (c *Comm) reduceScatterA2A(ctx context.Context, call agree.Call, sends, recvs [][]byte, dt DType, acc Accumulate, total int) error {
	w := c.size
	ws := c.workspace((w - 1) * total)
	slot := func(p int) int {
		if p > c.rank {
			return p - 1
		}
		return p
	}
	laneOff := make([]int, len(recvs))
	for l := 1; l < len(recvs); l++ {
		laneOff[l] = laneOff[l-1] + len(recvs[l-1])
	}
	in := func(p, l int) []byte {
		base := slot(p)*total + laneOff[l]
		return ws[base : base+len(recvs[l])]
	}
	err := c.exchangeLanes(ctx, tag(phaseA2A, call),
		func(p, l int) []byte { n := len(recvs[l]); return sends[l][p*n : (p+1)*n] },
		in, len(sends))
	if err != nil {
		return err
	}
	inputs := make([][]byte, w)
	for l := range sends {
		n := len(recvs[l])
		for p := range inputs {
			if p == c.rank {
				inputs[p] = sends[l][c.rank*n : (c.rank+1)*n]
			} else {
				inputs[p] = in(p, l)
			}
		}
		if err := c.reducer.Reduce(dt, acc, inputs, recvs[l]); err != nil {
			return err
		}
	}
	return nil
}

// exchangeLanes sends lanes 0…k-1 to every peer in order and receives the
// peer's lanes in order: one goroutine per direction and peer.
func (c *Comm) exchangeLanes(ctx context.Context, tg transport.Tag, sendBuf, recvBuf func(p, lane int) []byte, k int) error {
	if c.size == 1 {
		return nil
	}
	if k == 1 {
		// One lane is one exchange step: no goroutine per peer where the
		// transport is an Exchanger.
		return c.exchange(ctx, tg,
			func(p int) ([]byte, bool) { return sendBuf(p, 0), true },
			func(p int) ([]byte, bool) { return recvBuf(p, 0), true })
	}
	return c.forPeers(ctx, func(ctx context.Context, p int, send bool) error {
		for l := 0; l < k; l++ {
			var err error
			if send {
				err = c.t.Send(ctx, p, tg, sendBuf(p, l))
			} else {
				err = c.t.Recv(ctx, p, tg, recvBuf(p, l))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// forPeers runs fn(p, send=true) and fn(p, send=false) for every peer
// concurrently; the first error cancels the rest.
func (c *Comm) forPeers(ctx context.Context, fn func(ctx context.Context, p int, send bool) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2*c.size)
	started := 0
	for p := 0; p < c.size; p++ {
		if p == c.rank {
			continue
		}
		for _, send := range []bool{true, false} {
			started++
			go func(p int, send bool) {
				err := fn(ctx, p, send)
				switch {
				case errors.Is(err, transport.ErrTagMismatch):
					time.AfterFunc(mismatchGrace, cancel) // as in exchange
				case err != nil:
					cancel()
				}
				errc <- err
			}(p, send)
		}
	}
	var first error
	for i := 0; i < started; i++ {
		if err := <-errc; err != nil && (first == nil || errors.Is(err, transport.ErrTagMismatch) && !errors.Is(first, transport.ErrTagMismatch)) {
			first = err
		}
	}
	return first
}

// AllGatherMany is AllGather over several independent lanes under one call
// and one synchronisation: lane l gathers sends[l] into recvs[l]. Lanes may
// have different sizes but every rank must pass the same sizes.
func (c *Comm) AllGatherMany(ctx context.Context, sends, recvs [][]byte, dt DType) error {
	const op = "AllGatherMany"
	return c.run(ctx, op, func() (signature, error) {
		if len(sends) != len(recvs) {
			return signature{}, c.argErr(op, "%d send lanes but %d recv lanes", len(sends), len(recvs))
		}
		counts := make([]int, len(sends))
		for l, s := range sends {
			if err := c.checkElems(op, fmt.Sprintf("send lane %d", l), s, dt); err != nil {
				return signature{}, err
			}
			if len(recvs[l]) != c.size*len(s) {
				return signature{}, c.argErr(op, "recv lane %d has %d bytes, want W*len(send) = %d", l, len(recvs[l]), c.size*len(s))
			}
			counts[l] = len(s) / dt.Size()
			if err := c.checkLaneOverlap(op, sends, recvs, l, true); err != nil {
				return signature{}, err
			}
		}
		return signature{op: opAllGatherMany, dt: uint8(dt), lanes: uint32(len(sends)), count: uint64(sum(counts)), laneHash: laneHash(counts)}, nil
	}, func(ctx context.Context, call agree.Call) error {
		if sh, slot := c.window(); sh != nil {
			for l := range sends {
				if err := c.allGatherWindow(ctx, sh, slot, call, sends[l], recvs[l], dt.Size()); err != nil {
					return err
				}
			}
			return nil
		}
		for l, s := range sends {
			copy(recvs[l][c.rank*len(s):], s)
		}
		return c.exchangeLanes(ctx, tag(phaseGather, call),
			func(p, l int) []byte { return sends[l] },
			func(p, l int) []byte { n := len(sends[l]); return recvs[l][p*n : (p+1)*n] }, len(sends))
	})
}

// ReduceScatterMany is ReduceScatter over several independent lanes under
// one call and one synchronisation; every lane has its own tree (lanes are
// never added to each other).
func (c *Comm) ReduceScatterMany(ctx context.Context, sends, recvs [][]byte, dt DType, opts ...Option) error {
	const op = "ReduceScatterMany"
	total := 0
	for _, s := range sends {
		total += len(s)
	}
	alg, acc := c.resolve(opts, true, total, elemsOf(total, dt))
	if alg == RecursiveDoubling || alg == HalvingDoubling {
		alg = A2ATree // lanes go by messages of shards
	}
	return c.run(ctx, op, func() (signature, error) {
		if err := c.checkReducible(op, dt); err != nil {
			return signature{}, err
		}
		if len(sends) != len(recvs) {
			return signature{}, c.argErr(op, "%d send lanes but %d recv lanes", len(sends), len(recvs))
		}
		counts := make([]int, len(sends))
		for l := range sends {
			if err := c.checkRS(fmt.Sprintf("%s lane %d", op, l), sends[l], recvs[l], dt); err != nil {
				return signature{}, err
			}
			counts[l] = len(recvs[l]) / dt.Size()
			if err := c.checkLaneOverlap(op, sends, recvs, l, false); err != nil {
				return signature{}, err
			}
		}
		if err := c.checkAlgAcc(op, alg, acc); err != nil {
			return signature{}, err
		}
		return signature{op: opReduceScatterMany, dt: uint8(dt), acc: uint8(acc), alg: uint8(alg), lanes: uint32(len(sends)), count: uint64(sum(counts)), laneHash: laneHash(counts)}, nil
	}, func(ctx context.Context, call agree.Call) error {
		return c.reduceScatter(ctx, call, sends, recvs, dt, acc, alg)
	})
}

// checkLaneOverlap rejects a recv lane that overlaps any other lane's buffers
// (allowing AllGatherMany's in-place block of its own lane).
func (c *Comm) checkLaneOverlap(op string, sends, recvs [][]byte, l int, inPlaceOK bool) error {
	for m := range sends {
		if m != l && (overlap(recvs[l], recvs[m]) || overlap(recvs[l], sends[m])) {
			return c.argErr(op, "recv lane %d overlaps lane %d", l, m)
		}
	}
	if overlap(sends[l], recvs[l]) {
		n := len(sends[l])
		if !inPlaceOK || !same(sends[l], recvs[l][c.rank*n:(c.rank+1)*n]) {
			return c.argErr(op, "send and recv of lane %d overlap", l)
		}
	}
	return nil
}

func sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

// Broadcast copies root's buf into buf on every rank (pure data movement).
func (c *Comm) Broadcast(ctx context.Context, buf []byte, root int) error {
	const op = "Broadcast"
	return c.run(ctx, op, func() (signature, error) {
		if root < 0 || root >= c.size {
			return signature{}, c.argErr(op, "root %d out of range [0,%d)", root, c.size)
		}
		return signature{op: opBroadcast, root: int32(root), count: uint64(len(buf))}, nil
	}, func(ctx context.Context, call agree.Call) error {
		tg := tag(phaseBcast, call)
		if c.rank == root {
			return c.exchange(ctx, tg, func(int) ([]byte, bool) { return buf, true }, func(int) ([]byte, bool) { return nil, false })
		}
		return c.exchange(ctx, tg, func(int) ([]byte, bool) { return nil, false },
			func(p int) ([]byte, bool) { return buf, p == root })
	})
}

// Scatter sends block r of root's send (W*len(recv) bytes; ignored on other
// ranks, may be nil there) to rank r's recv. No arithmetic: every bit,
// a -0 included, arrives as sent.
func (c *Comm) Scatter(ctx context.Context, send, recv []byte, root int) error {
	const op = "Scatter"
	n := len(recv)
	return c.run(ctx, op, func() (signature, error) {
		if root < 0 || root >= c.size {
			return signature{}, c.argErr(op, "root %d out of range [0,%d)", root, c.size)
		}
		if c.rank == root {
			if len(send) != c.size*n {
				return signature{}, c.argErr(op, "root's send has %d bytes, want W*len(recv) = %d", len(send), c.size*n)
			}
			if overlap(send, recv) && !same(send[root*n:(root+1)*n], recv) {
				return signature{}, c.argErr(op, "send and recv overlap")
			}
		}
		return signature{op: opScatter, root: int32(root), count: uint64(n)}, nil
	}, func(ctx context.Context, call agree.Call) error {
		tg := tag(phaseScatter, call)
		if c.rank == root {
			copy(recv, send[root*n:(root+1)*n])
			return c.exchange(ctx, tg, func(p int) ([]byte, bool) { return send[p*n : (p+1)*n], true }, func(int) ([]byte, bool) { return nil, false })
		}
		return c.exchange(ctx, tg, func(int) ([]byte, bool) { return nil, false },
			func(p int) ([]byte, bool) { return recv, p == root })
	})
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, "Barrier", func() (signature, error) {
		return signature{op: opBarrier}, nil
	}, func(ctx context.Context, call agree.Call) error {
		if sh, _ := c.window(); sh != nil {
			// An empty publication: Publish returns once every rank has
			// published, with no goroutine per peer (a goroutine hand-off
			// costs a rank tens of µs when it wakes an idle thread).
			_, err := publish(ctx, sh, tag(phaseBarrier, call), 0, func([]byte) {}, sameLen(0))
			if err == nil {
				sh.Release()
			}
			return err
		}
		return c.allGatherInto(ctx, tag(phaseBarrier, call), nil, nil, 0)
	})
}

// Undefined is the Split color of a rank that joins no sub-communicator.
const Undefined = -1

// Split partitions the group as MPI_Comm_split does: ranks passing the same
// color form a new communicator, ordered by (key, parent rank). A rank
// passing Undefined gets a nil Comm. The transport must implement
// transport.Splitter. Sub-communicators inherit this Comm's options and are
// closed with it.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	const op = "Split"
	var sub *Comm
	err := c.run(ctx, op, func() (signature, error) {
		if color < Undefined {
			return signature{}, c.argErr(op, "color %d is negative (Undefined = -1 opts out)", color)
		}
		if _, ok := c.t.(transport.Splitter); !ok {
			return signature{}, &Error{Op: op, Rank: c.rank, Peer: -1, Err: fmt.Errorf("%w: %T cannot split", ErrUnsupported, c.t)}
		}
		return signature{op: opSplit}, nil
	}, func(ctx context.Context, call agree.Call) error {
		all := make([]byte, 16*c.size)
		binary.LittleEndian.PutUint64(all[16*c.rank:], uint64(int64(color)))
		binary.LittleEndian.PutUint64(all[16*c.rank+8:], uint64(int64(key)))
		mine := all[16*c.rank : 16*c.rank+16]
		if err := c.allGatherInto(ctx, tag(phaseSplit, call), mine, all, 16); err != nil {
			return err
		}
		c.splits++
		if color == Undefined {
			return nil
		}
		type member struct{ key, rank int }
		var ms []member
		for p := 0; p < c.size; p++ {
			if int(int64(binary.LittleEndian.Uint64(all[16*p:]))) == color {
				ms = append(ms, member{int(int64(binary.LittleEndian.Uint64(all[16*p+8:]))), p})
			}
		}
		sort.SliceStable(ms, func(i, j int) bool {
			if ms[i].key != ms[j].key {
				return ms[i].key < ms[j].key
			}
			return ms[i].rank < ms[j].rank
		})
		ranks := make([]int, len(ms))
		for i, m := range ms {
			ranks[i] = m.rank
		}
		h := fnv.New64a()
		var b [24]byte
		binary.LittleEndian.PutUint64(b[0:], c.id)
		binary.LittleEndian.PutUint64(b[8:], c.splits)
		binary.LittleEndian.PutUint64(b[16:], uint64(int64(color)))
		h.Write(b[:])
		id := h.Sum64()
		st, err := c.t.(transport.Splitter).Sub(ctx, id, ranks)
		if err != nil {
			return err
		}
		cfg := c.cfg
		cfg.reducer = c.reducer
		sub = &Comm{t: st, rank: st.Rank(), size: st.Size(), id: id, cfg: cfg, reducer: c.reducer, agr: newAgreement()}
		sub.bind()
		c.children = append(c.children, sub)
		return nil
	})
	return sub, err
}
