package gpuffn

import (
	"context"
	"fmt"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devcomm"
	"github.com/detcoll/detcoll/parallel"

	// This package is CUDA-only: it links (and registers) the CUDA runtime
	// of gpu/devrt that gpu.Device and devcomm run on.
	_ "github.com/detcoll/detcoll/gpu/devrt/cudart"
)

// Backend plugs the GPU FFN into package parallel (parallel.GPUBackend). It
// is per process: it holds this rank's device communicator of the TP group
// (or, at TP = 1, only a device). Register it explicitly, e.g.
//
//	parallel.RegisterGPUBackend(parallel.CUDAAgRs, &gpuffn.Backend{Comm: tp})
//
// (the package registers nothing by itself: the cuda_ag_rs name is shared
// with the attention layer, which another package provides). The FFN runs
// bf16 without sequence parallelism at CP = 1; other configurations are
// refused with ErrInvalidArgument.
type Backend struct {
	Comm     *devcomm.Comm // the TP group on the device (nil: TP = 1)
	Device   *gpu.Device   // used when Comm is nil
	Pedantic bool          // see Config.Pedantic
}

var _ parallel.GPUBackend = (*Backend)(nil)

// NewFFN returns the GPU FFN for the mesh's TP group. Its tensors are
// *Tensor: x and dy plain [tokens × H]; the weights as Layer.UploadWeights
// lays them out (FFN.Layer gives the layer for uploads and downloads).
func (b *Backend) NewFFN(m *parallel.Mesh, cfg parallel.FFNConfig) (parallel.FFN, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: gpuffn: %s", parallel.ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	if m == nil {
		return nil, bad("nil mesh")
	}
	tp, cp, _ := m.Sizes()
	switch {
	case cfg.DType != dtype.BF16:
		return nil, bad("dtype %v (the GPU FFN is bf16)", cfg.DType)
	case cfg.SequenceParallel:
		return nil, bad("sequence parallelism is not implemented on the GPU")
	case cp != 1:
		return nil, bad("CP = %d: the weight gradients' all-gather over CP is not implemented on the GPU", cp)
	case b.Comm == nil && tp != 1:
		return nil, bad("TP = %d needs the TP group's device communicator (Backend.Comm)", tp)
	case b.Comm != nil && (b.Comm.Size() != tp || b.Comm.Rank() != m.TP().Rank()):
		return nil, bad("the device communicator (rank %d of %d) is not this rank's TP group (rank %d of %d)",
			b.Comm.Rank(), b.Comm.Size(), m.TP().Rank(), tp)
	}
	l, err := New(b.Device, b.Comm, Config{Hidden: cfg.Hidden, Intermediate: cfg.Intermediate, Chunks: cfg.Chunks, Pedantic: b.Pedantic})
	if err != nil {
		return nil, err
	}
	return &FFN{l: l}, nil
}

// NewAttention is not provided here.
func (b *Backend) NewAttention(*detcoll.Comm, parallel.AttentionConfig) (parallel.Attention, error) {
	return nil, fmt.Errorf("%w: package gpuffn implements the FFN only", parallel.ErrNoGPUBackend)
}

// FFN is the parallel.FFN of the GPU backend.
type FFN struct{ l *Layer }

var _ parallel.FFN = (*FFN)(nil)

// Layer is the underlying layer (uploads, downloads, timings, Close).
func (f *FFN) Layer() *Layer { return f.l }

func asTensor(op, name string, t parallel.Tensor) (*Tensor, error) {
	d, ok := t.(*Tensor)
	if !ok || d == nil {
		return nil, fmt.Errorf("%w: gpuffn: %s: %s is %T, want a *gpuffn.Tensor", parallel.ErrInvalidArgument, op, name, t)
	}
	return d, nil
}

func asWeights(op string, w parallel.FFNWeights) (Weights, error) {
	var out Weights
	var err error
	if out.Gate, err = asTensor(op, "weights.Gate", w.Gate); err != nil {
		return out, err
	}
	if out.Up, err = asTensor(op, "weights.Up", w.Up); err != nil {
		return out, err
	}
	out.Down, err = asTensor(op, "weights.Down", w.Down)
	return out, err
}

// Forward is Layer.Forward; saved is a *Saved.
func (f *FFN) Forward(ctx context.Context, x parallel.Tensor, w parallel.FFNWeights) (parallel.Tensor, any, error) {
	xt, err := asTensor("FFN.Forward", "x", x)
	if err != nil {
		return nil, nil, err
	}
	wt, err := asWeights("FFN.Forward", w)
	if err != nil {
		return nil, nil, err
	}
	y, s, err := f.l.Forward(ctx, xt, wt)
	if err != nil {
		return nil, nil, err
	}
	return y, s, nil
}

// Backward is Layer.Backward.
func (f *FFN) Backward(ctx context.Context, dy parallel.Tensor, w parallel.FFNWeights, saved any) (*parallel.FFNGrads, error) {
	dyt, err := asTensor("FFN.Backward", "dy", dy)
	if err != nil {
		return nil, err
	}
	wt, err := asWeights("FFN.Backward", w)
	if err != nil {
		return nil, err
	}
	s, ok := saved.(*Saved)
	if !ok {
		return nil, fmt.Errorf("%w: gpuffn: FFN.Backward: saved state is %T, want what Forward returned", parallel.ErrInvalidArgument, saved)
	}
	g, err := f.l.Backward(ctx, dyt, wt, s)
	if err != nil {
		return nil, err
	}
	return &parallel.FFNGrads{X: g.X, Gate: g.Gate, Up: g.Up, Down: g.Down}, nil
}
