package reduce

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/detcoll/detcoll/dtype"
)

// The bf16 and fp32 trees have vector kernels (AVX2 on amd64) and a portable
// path; both must give the oracle's bits, whichever the machine picks by
// default.
func TestBF16VectorAndPortablePaths(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP32} {
		t.Run(dt.String(), func(t *testing.T) { vectorAndPortable(t, dt) })
	}
}

func vectorAndPortable(t *testing.T, dt dtype.DType) {
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	r := NewReducer(2)
	defer r.Close()
	rng := rand.New(rand.NewPCG(11, 12))
	for _, vec := range []bool{false, saved} {
		useAVX2 = vec
		for _, w := range []int{1, 2, 3, 4, 7, 8, 16} {
			for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 1031, 4099} {
				for mode := 0; mode < 3; mode++ {
					for _, acc := range []Accumulate{Native, F32} {
						if dt == dtype.FP32 && acc == F32 {
							continue // the same as native for fp32
						}
						ins := make([][]byte, w)
						for i := range ins {
							ins[i] = make([]byte, dt.Size()*n)
							fill(rng, dt, ins[i], mode)
						}
						want := make([]byte, dt.Size()*n)
						got := make([]byte, dt.Size()*n)
						if err := Oracle(dt, acc, ins, want); err != nil {
							t.Fatal(err)
						}
						if err := r.Reduce(dt, acc, ins, got); err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(got, want) {
							t.Fatalf("vector=%v W=%d n=%d mode=%d %v: %s", vec, w, n, mode, acc, firstDiff(dt, got, want))
						}
					}
				}
			}
		}
	}
}
