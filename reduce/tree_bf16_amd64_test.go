package reduce

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

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
				// The non-temporal kernels, on an output aligned for them.
				nt := alignedBytes(sz*n, 32)
				if !ntKernel(dt, nt) {
					t.Fatalf("%v: a 32-byte-aligned output does not take the non-temporal kernel", dt)
				}
				k = fused(task{dt: dt, acc: Native, inputs: ins, out: nt, levels: tree.Levels(w), nt: true}, 0, n)
				if k != n&^7 || !bytes.Equal(nt[:sz*k], want[:sz*k]) {
					t.Fatalf("W=%d n=%d mode=%d non-temporal: %d elements, %s", w, n, mode, k, firstDiff(dt, nt[:sz*k], want[:sz*k]))
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

// alignedBytes returns n zero bytes whose first is a-byte aligned.
func alignedBytes(n, a int) []byte {
	b := make([]byte, n+a)
	off := (a - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(a))) % a
	return b[off : off+n]
}

// TestNTKernelAlignment: the non-temporal kernels take only outputs aligned
// for their stores (32 bytes for fp32, 16 for bf16); a misaligned one goes
// to the ordinary kernels (and still gets the oracle's bits:
// TestFastEqualsOracle).
func TestNTKernelAlignment(t *testing.T) {
	b := alignedBytes(256, 32)
	for _, c := range []struct {
		dt   dtype.DType
		off  int
		want bool
	}{{dtype.FP32, 0, true}, {dtype.FP32, 4, false}, {dtype.FP32, 16, false}, {dtype.BF16, 0, true}, {dtype.BF16, 16, true}, {dtype.BF16, 2, false}, {dtype.BF16, 8, false}} {
		if got := ntKernel(c.dt, b[c.off:]); got != c.want {
			t.Errorf("%v output at offset %d from 32-byte alignment: non-temporal %v, want %v", c.dt, c.off, got, c.want)
		}
	}
}
