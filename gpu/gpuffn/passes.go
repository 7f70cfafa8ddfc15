package gpuffn

import (
	"context"
	"fmt"

	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/parallel"
)

// The passes of a layer: Forward and Backward, each as checks, then the
// enqueue steps (sticky: the first error is kept while the collectives are
// still issued), then the release of the temporaries.

// sticky runs enqueue steps until the first error; the collectives are
// issued in any case (on buffers that exist), so that a rank whose local
// step failed does not leave its peers waiting in a collective.
type sticky struct{ err error }

func (s *sticky) step(f func() error) {
	if s.err == nil {
		s.err = f()
	}
}

func (s *sticky) always(f func() error) {
	if err := f(); s.err == nil {
		s.err = err
	}
}

func (s *sticky) alloc(l *Layer, rows, cols, blocks int, byCols bool) *Tensor {
	var t *Tensor
	s.step(func() (err error) { t, err = l.NewTensor(rows, cols, blocks, byCols); return err })
	return t
}

// Forward computes y = (silu(x·Gate) ⊙ (x·Up)) · Down for x [tokens × H]
// (plain, the same on every TP rank), as package parallel's host FFN does
// without sequence parallelism: Gate and Up column-parallel with K = H in L
// canonical chunks, Down row-parallel over this rank's L/TP chunks, the
// partial reduced over TP by detcoll's deterministic all-reduce. y
// [tokens × H] is identical on every TP rank and equal, bit for bit, to
// the TP = 1 result. The work is enqueued on the layer's stream; Download
// (or Synchronize) waits for it.
func (l *Layer) Forward(ctx context.Context, x *Tensor, w Weights) (*Tensor, *Saved, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	const op = "Forward"
	if err := l.usable(op); err != nil {
		return nil, nil, err
	}
	if err := l.checkActs(op, "x", x, -1); err != nil {
		return nil, nil, err
	}
	if err := l.checkWeights(op, w); err != nil {
		return nil, nil, err
	}
	T, H, L, nb, nl := x.rows, l.cfg.Hidden, l.cfg.Chunks, l.nb, l.nl
	il := nl * nb
	var st sticky
	y := st.alloc(l, T, H, 1, false)
	s := &Saved{X: x}
	s.G = st.alloc(l, T, il, nl, true)
	s.U = st.alloc(l, T, il, nl, true)
	s.A = st.alloc(l, T, il, nl, true)
	st.step(func() error { return l.ensureWS(max(L*padBytes(T*nb*2), nl*padBytes(T*H*2))) })
	err := l.ops.do(func() error {
		total := l.ops.span("fwd.total", false)
		sp := l.ops.span("fwd.gate_up", false)
		for j := 0; j < nl; j++ {
			st.step(func() error {
				return l.chunked(gemmSpec{m: T, n: nb, k: H, a: operand{x.ptr, H, false}, b: operand{w.Gate.BlockPtr(j), nb, false}}, s.G.BlockPtr(j))
			})
			st.step(func() error {
				return l.chunked(gemmSpec{m: T, n: nb, k: H, a: operand{x.ptr, H, false}, b: operand{w.Up.BlockPtr(j), nb, false}}, s.U.BlockPtr(j))
			})
		}
		st.step(sp)
		sp = l.ops.span("fwd.swiglu", false)
		st.step(func() error { return l.ops.swigluFwd(s.A.ptr, s.G.ptr, s.U.ptr, T*nb, nl, s.G.stride/2) })
		st.step(sp)
		sp = l.ops.span("fwd.down", false)
		st.step(func() error {
			return l.local(T, H, func(c int) gemmSpec {
				return gemmSpec{m: T, n: H, k: nb, a: operand{s.A.BlockPtr(c), nb, false}, b: operand{w.Down.BlockPtr(c), H, false}}
			}, y.ptr)
		})
		st.step(sp)
		if l.tp > 1 && y != nil {
			sp = l.ops.span("fwd.allreduce_y", true)
			st.always(func() error { return l.ops.allReduce(ctx, y.ptr, T*H) })
			st.step(sp)
		}
		st.step(total)
		return st.err
	})
	if err != nil {
		l.ops.sync()
		l.freeQuiet(y, s.G, s.U, s.A)
		return nil, nil, fmt.Errorf("gpuffn: Forward (TP rank %d of %d): %w", l.rank, l.tp, err)
	}
	return y, s, nil
}

// Backward computes, for dy [tokens × H] (the same on every TP rank), the
// input gradient dx [tokens × H] (identical on every TP rank) and the
// gradients of this rank's weight shards, as package parallel's host FFN
// does without sequence parallelism: da = dy·Downᵀ (K = H, local), the
// SwiGLU gradients, the gate and up input-gradient lanes dg·Gateᵀ and
// du·Upᵀ each reduced over this rank's chunks with its own tree, one
// deterministic all-reduce of both lanes side by side, dx = gate lane + up
// lane; weight gradients xᵀ·dg, xᵀ·du, aᵀ·dy with K = tokens in L
// canonical chunks. Every result equals the TP = 1 result bit for bit.
func (l *Layer) Backward(ctx context.Context, dy *Tensor, w Weights, s *Saved) (*Grads, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkBackward(dy, w, s); err != nil {
		return nil, err
	}
	T, H, L, nb, nl := dy.rows, l.cfg.Hidden, l.cfg.Chunks, l.nb, l.nl
	il := nl * nb
	var st sticky
	b := bwdBufs{da: st.alloc(l, T, il, nl, true), dg: st.alloc(l, T, il, nl, true), du: st.alloc(l, T, il, nl, true),
		lanes: st.alloc(l, 2*T, H, 1, false)}
	g := &Grads{}
	g.X = st.alloc(l, T, H, 1, false)
	g.Gate = st.alloc(l, H, il, nl, true)
	g.Up = st.alloc(l, H, il, nl, true)
	g.Down = st.alloc(l, il, H, nl, false)
	st.step(func() error {
		return l.ensureWS(max(L*padBytes(T*nb*2), nl*padBytes(T*H*2), L*padBytes(H*nb*2)))
	})
	err := l.ops.do(func() error { return l.backwardSteps(ctx, &st, dy, w, s, b, g) })
	// The temporaries go back once the stream is done with them.
	serr := l.ops.sync()
	l.freeQuiet(b.da, b.dg, b.du, b.lanes)
	if err == nil {
		err = serr
	}
	if err != nil {
		l.freeQuiet(g.X, g.Gate, g.Up, g.Down)
		return nil, fmt.Errorf("gpuffn: Backward (TP rank %d of %d): %w", l.rank, l.tp, err)
	}
	return g, nil
}

// checkBackward checks Backward's arguments. Called with l.mu held.
func (l *Layer) checkBackward(dy *Tensor, w Weights, s *Saved) error {
	const op = "Backward"
	if err := l.usable(op); err != nil {
		return err
	}
	if s == nil || s.X == nil || s.G == nil || s.U == nil || s.A == nil || s.G.ptr == 0 {
		return fmt.Errorf("%w: gpuffn.Backward: saved state is missing or freed", parallel.ErrInvalidArgument)
	}
	if err := l.checkActs(op, "saved x", s.X, -1); err != nil {
		return err
	}
	if err := l.checkActs(op, "dy", dy, s.X.rows); err != nil {
		return err
	}
	return l.checkWeights(op, w)
}

// bwdBufs are Backward's temporaries: the activation gradients and the two
// dx lanes side by side.
type bwdBufs struct{ da, dg, du, lanes *Tensor }

// backwardSteps enqueues the backward pass (inside l.ops.do): da, the
// SwiGLU backward, the two dx lanes, their all-reduce over TP, dx, and the
// weight gradients; st keeps the first error while the collective is
// still issued.
func (l *Layer) backwardSteps(ctx context.Context, st *sticky, dy *Tensor, w Weights, s *Saved, b bwdBufs, g *Grads) error {
	T, H, nb, nl := dy.rows, l.cfg.Hidden, l.nb, l.nl
	da, dg, du, lanes, x := b.da, b.dg, b.du, b.lanes, s.X
	total := l.ops.span("bwd.total", false)
	sp := l.ops.span("bwd.da", false)
	for j := 0; j < nl; j++ {
		st.step(func() error {
			return l.chunked(gemmSpec{m: T, n: nb, k: H, a: operand{dy.ptr, H, false}, b: operand{w.Down.BlockPtr(j), H, true}}, da.BlockPtr(j))
		})
	}
	st.step(sp)
	sp = l.ops.span("bwd.swiglu", false)
	st.step(func() error {
		return l.ops.swigluBwd(dg.ptr, du.ptr, s.G.ptr, s.U.ptr, da.ptr, T*nb, nl, da.stride/2)
	})
	st.step(sp)
	sp = l.ops.span("bwd.dx_lanes", false)
	laneBytes := T * H * 2
	st.step(func() error {
		return l.local(T, H, func(c int) gemmSpec {
			return gemmSpec{m: T, n: H, k: nb, a: operand{dg.BlockPtr(c), nb, false}, b: operand{w.Gate.BlockPtr(c), nb, true}}
		}, lanes.ptr)
	})
	st.step(func() error {
		return l.local(T, H, func(c int) gemmSpec {
			return gemmSpec{m: T, n: H, k: nb, a: operand{du.BlockPtr(c), nb, false}, b: operand{w.Up.BlockPtr(c), nb, true}}
		}, lanes.ptr+cuda.DevicePtr(laneBytes))
	})
	st.step(sp)
	if l.tp > 1 && lanes != nil {
		// One all-reduce of both lanes side by side: every element has
		// its own tree, the lanes are not added to each other.
		sp = l.ops.span("bwd.allreduce_dx_lanes", true)
		st.always(func() error { return l.ops.allReduce(ctx, lanes.ptr, 2*T*H) })
		st.step(sp)
	}
	sp = l.ops.span("bwd.dx_add", false)
	st.step(func() error { return l.ops.reduce2(g.X.ptr, lanes.ptr, lanes.ptr+cuda.DevicePtr(laneBytes), T*H) })
	st.step(sp)
	sp = l.ops.span("bwd.weight_grads", false)
	for j := 0; j < nl; j++ {
		st.step(func() error {
			return l.chunked(gemmSpec{m: H, n: nb, k: T, a: operand{x.ptr, H, true}, b: operand{dg.BlockPtr(j), nb, false}}, g.Gate.BlockPtr(j))
		})
		st.step(func() error {
			return l.chunked(gemmSpec{m: H, n: nb, k: T, a: operand{x.ptr, H, true}, b: operand{du.BlockPtr(j), nb, false}}, g.Up.BlockPtr(j))
		})
		st.step(func() error {
			return l.chunked(gemmSpec{m: nb, n: H, k: T, a: operand{s.A.BlockPtr(j), nb, true}, b: operand{dy.ptr, H, false}}, g.Down.BlockPtr(j))
		})
	}
	st.step(sp)
	st.step(total)
	return st.err
}
