package reduce

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/tree"
)

// TestFusedBF16Tree: the fused W = 2, 4, 8 kernels (bf16 and fp32) run (where AVX2 exists)
// and give the oracle's bits on adversarial inputs (NaN payloads,
// infinities, subnormals, overflowing sums, raw bits), in place too.
func TestFusedBF16Tree(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this CPU: the fused kernels never run")
	}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP32} {
		t.Run(dt.String(), func(t *testing.T) { fusedTree(t, dt) })
	}
}

// TestFusedBF16TreeAVX512: the bf16 trees with the AVX-512 kernels (16
// elements at a time, the AVX2 ones doing a last 8) and without them give
// the same oracle bits; the AVX-512 kernels run where the CPU has them.
func TestFusedBF16TreeAVX512(t *testing.T) {
	if !useAVX2 || !cpu.X86.HasAVX512F {
		t.Skip("no AVX-512F on this CPU: the AVX-512 kernels never run")
	}
	saved := useAVX512
	defer func() { useAVX512 = saved }()
	for _, on := range []bool{true, false} {
		useAVX512 = on
		t.Run(fmt.Sprintf("avx512=%v", on), func(t *testing.T) { fusedTree(t, dtype.BF16) })
	}
}

func fusedTree(t *testing.T, dt dtype.DType) {
	fused := treeBF16Vec
	if dt == dtype.FP32 {
		fused = treeF32Vec
	}
	sz := dt.Size()
	rng := rand.New(rand.NewPCG(21, 22))
	for _, w := range []int{2, 4, 8} {
		for _, n := range []int{8, 16, 24, 32, 1000, 4103} {
			for mode := 0; mode < 3; mode++ {
				ins := make([][]byte, w)
				for i := range ins {
					ins[i] = make([]byte, sz*n)
					fill(rng, dt, ins[i], mode)
				}
				want := make([]byte, sz*n)
				if err := Oracle(dt, Native, ins, want); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, sz*n)
				k := fused(task{dt: dt, acc: Native, inputs: ins, out: got, levels: tree.Levels(w)}, 0, n)
				if k != n&^7 {
					t.Fatalf("W=%d n=%d: fused kernel did %d elements", w, n, k)
				}
				if !bytes.Equal(got[:sz*k], want[:sz*k]) {
					t.Fatalf("W=%d n=%d mode=%d: %s", w, n, mode, firstDiff(dt, got[:sz*k], want[:sz*k]))
				}
				// In place, through the Reducer: out is input 0.
				r := NewReducer(2)
				in0 := append([]byte(nil), ins[0]...)
				ins[0] = in0
				if err := r.Reduce(dt, Native, ins, in0); err != nil {
					t.Fatal(err)
				}
				r.Close()
				if !bytes.Equal(in0, want) {
					t.Fatalf("W=%d n=%d mode=%d in place: %s", w, n, mode, firstDiff(dt, in0, want))
				}
			}
		}
	}
}
