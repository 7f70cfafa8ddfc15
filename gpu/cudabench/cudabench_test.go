package cudabench

import (
	"testing"

	"github.com/detcoll/detcoll/gpu/devrt/cudart"
	"github.com/detcoll/detcoll/internal/cuda"
)

func TestAvailableSaysWhy(t *testing.T) {
	err := Available()
	if cuda.Available() != nil && err == nil {
		t.Fatal("Available reports the backend usable without a CUDA driver")
	}
	t.Logf("Available: %v", err)
	if cudart.Runtime.Vendor() != "cuda" {
		t.Fatal("cudart is not the cuda runtime")
	}
}

func TestDrop(t *testing.T) {
	if drop(0, 5) != 0 || drop(10, 12) != 0 || drop(10, 4) != 6 {
		t.Fatal("drop")
	}
}
