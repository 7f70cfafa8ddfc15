package parallel

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

func TestParseBackend(t *testing.T) {
	for in, want := range map[string]Backend{"cuda_ag_rs": CUDAAgRs, "RCCL_AG_RS": RCCLAgRs, " local-debug ": LocalDebug} {
		if got, err := ParseBackend(in); err != nil || got != want {
			t.Errorf("ParseBackend(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "nccl", "cuda"} {
		if _, err := ParseBackend(in); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ParseBackend(%q): %v", in, err)
		}
	}
	if !CUDAAgRs.NeedsGPU() || !RCCLAgRs.NeedsGPU() || LocalDebug.NeedsGPU() || !LocalDebug.SingleRank() {
		t.Error("NeedsGPU / SingleRank")
	}
	var cfg struct{ B Backend }
	if err := json.Unmarshal([]byte(`{"B":"rccl_ag_rs"}`), &cfg); err != nil || cfg.B != RCCLAgRs {
		t.Errorf("json: %v %v", cfg.B, err)
	}
	if b, err := json.Marshal(cfg); err != nil || string(b) != `{"B":"rccl_ag_rs"}` {
		t.Errorf("json: %s %v", b, err)
	}
}

// devTensor stands in for a GPU backend's device tensor.
type devTensor struct{ rows, cols int }

func (d devTensor) DType() dtype.DType { return dtype.BF16 }
func (d devTensor) Rows() int          { return d.rows }
func (d devTensor) Cols() int          { return d.cols }

type fakeGPU struct{ name Backend }

type fakeAttention struct{ fakeGPU }

func (f fakeAttention) Forward(ctx context.Context, q, k, v Tensor, pos []int32) (*AttnOutput, error) {
	return &AttnOutput{Out: devTensor{q.Rows(), q.Cols()}}, nil
}
func (f fakeAttention) Backward(ctx context.Context, dout Tensor, fwd *AttnOutput) (*AttnGrads, error) {
	return &AttnGrads{}, nil
}

type fakeFFN struct{ fakeGPU }

func (f fakeFFN) Forward(ctx context.Context, x Tensor, w FFNWeights) (Tensor, any, error) {
	return x, nil, nil
}
func (f fakeFFN) Backward(ctx context.Context, dy Tensor, w FFNWeights, saved any) (*FFNGrads, error) {
	return &FFNGrads{}, nil
}

func (f fakeGPU) NewFFN(m *Mesh, cfg FFNConfig) (FFN, error) { return fakeFFN{f}, nil }
func (f fakeGPU) NewAttention(cp *detcoll.Comm, cfg AttentionConfig) (Attention, error) {
	return fakeAttention{f}, nil
}

// TestGPUBackendRegistry: once a GPU backend registers a name, DeviceAuto
// and DeviceGPU reach it; DeviceHost still runs the host path.
func TestGPUBackendRegistry(t *testing.T) {
	if err := RegisterGPUBackend("nccl", fakeGPU{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("unknown name: %v", err)
	}
	if err := RegisterGPUBackend(CUDAAgRs, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil backend: %v", err)
	}
	if _, err := LookupGPUBackend(CUDAAgRs); !errors.Is(err, ErrNoGPUBackend) {
		t.Fatalf("before registration: %v", err)
	}
	if err := RegisterGPUBackend(CUDAAgRs, fakeGPU{CUDAAgRs}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		gpuMu.Lock()
		delete(gpuBackends, CUDAAgRs)
		gpuMu.Unlock()
	})
	if err := RegisterGPUBackend(CUDAAgRs, fakeGPU{CUDAAgRs}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("second registration: %v", err)
	}
	ctx := context.Background()
	comms := newWorld(t, 2)
	mustRanks(t, comms, func(r int, c *detcoll.Comm) error {
		cfg := AttentionConfig{Backend: CUDAAgRs, DType: dtype.BF16, Heads: 1, HeadDim: 4}
		a, err := NewAttention(ctx, c, cfg)
		if err != nil {
			return err
		}
		if _, ok := a.(fakeAttention); !ok {
			t.Errorf("DeviceAuto: got %T, want the registered GPU backend", a)
		}
		// The device tensors pass through the interface.
		fo, err := a.Forward(ctx, devTensor{4, 4}, devTensor{4, 4}, devTensor{4, 4}, make([]int32, 4))
		if err != nil || fo.Out.Rows() != 4 {
			t.Errorf("fake forward: %v", err)
		}
		cfg.Device = DeviceHost
		a, err = NewAttention(ctx, c, cfg)
		if err != nil {
			return err
		}
		if _, ok := a.(*hostAttention); !ok {
			t.Errorf("DeviceHost: got %T", a)
		}
		// A host layer refuses device tensors on every rank.
		_, err = a.Forward(ctx, devTensor{4, 4}, devTensor{4, 4}, devTensor{4, 4}, make([]int32, 4))
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("host layer with device tensors: %v", err)
		}
		// rccl_ag_rs has no GPU backend here.
		cfg.Backend, cfg.Device = RCCLAgRs, DeviceAuto
		if _, err := NewAttention(ctx, c, cfg); !errors.Is(err, ErrNoGPUBackend) {
			t.Errorf("rccl_ag_rs: %v", err)
		}
		return nil
	})
	ms := newMeshes(t, 2, 1, 1)
	for r, err := range ffnErrs(t, ms, func(m *Mesh) (FFNConfig, *Matrix, FFNWeights) {
		return FFNConfig{Hidden: 8, Intermediate: 16, DType: dtype.BF16, Backend: CUDAAgRs, Device: DeviceGPU}, nil, FFNWeights{}
	}) {
		if err != nil {
			t.Errorf("rank %d: FFN on the fake GPU backend: %v", r, err)
		}
	}
}
