package devcomm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/gpu/devrt"

	// The test binary carries both vendors, as a default build does; New
	// picks one (WithVendor, $DETCOLL_DEVICE, else CUDA first).
	_ "github.com/detcoll/detcoll/gpu/devrt/cudart"
	_ "github.com/detcoll/detcoll/gpu/devrt/hiprt"
)

// A vendor the binary does not link fails on every rank, naming it.
func TestNewUnknownVendor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := cluster.Init(ctx, cluster.Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	c, err := New(ctx, job, WithVendor("opencl"))
	if err == nil {
		c.Close()
		t.Fatal("New succeeded with an unknown vendor")
	}
	if !errors.Is(err, devrt.ErrNoRuntime) {
		t.Fatalf("New(WithVendor(opencl)) = %v, want devrt.ErrNoRuntime", err)
	}
}

// Without an AMD GPU, the ROCm communicator fails cleanly (the HIP runtime
// may load — Debian's libamdhip64.so.5 does — but finds no GPU, or RCCL is
// missing).
func TestNewROCmWithoutGPU(t *testing.T) {
	if rt, err := devrt.Get("rocm"); err != nil {
		t.Fatal(err)
	} else if rt.Available() == nil {
		t.Skip("an AMD GPU with hiprtc and RCCL is present; the GPU tests cover New")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := cluster.Init(ctx, cluster.Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	c, err := New(ctx, job, WithVendor("rocm"))
	if err == nil {
		c.Close()
		t.Fatal("New(rocm) succeeded without an AMD GPU")
	}
	t.Logf("New(rocm) without an AMD GPU: %v", err)
}
