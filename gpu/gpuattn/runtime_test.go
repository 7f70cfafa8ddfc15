package gpuattn

import (
	"testing"

	"github.com/detcoll/detcoll/gpu/devrt"

	// The test binary carries both vendors, as a default build does: the
	// GPU test runs on whichever gputest and devcomm.New pick
	// ($DETCOLL_DEVICE, else CUDA first).
	_ "github.com/detcoll/detcoll/gpu/devrt/cudart"
	_ "github.com/detcoll/detcoll/gpu/devrt/hiprt"
)

// Every linked vendor has an ag_rs backend name.
func TestLinkedVendorsNamed(t *testing.T) {
	vs := devrt.Registered()
	if len(vs) != 2 {
		t.Fatalf("linked vendors %v, want cuda and rocm", vs)
	}
	for _, v := range vs {
		if _, err := BackendName(v); err != nil {
			t.Error(err)
		}
	}
}
