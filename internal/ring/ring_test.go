package ring

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/transport/inproc"
)

var allDTypes = []dtype.DType{dtype.FP32, dtype.FP64, dtype.BF16, dtype.FP16}

// unit is a generous per-addition relative error bound for dt.
func unit(dt dtype.DType) float64 {
	switch dt {
	case dtype.FP32:
		return 0x1p-23
	case dtype.FP64:
		return 0x1p-52
	case dtype.BF16:
		return 0x1p-7
	}
	return 0x1p-10
}

func get(dt dtype.DType, b []byte, i int) float64 {
	switch dt {
	case dtype.FP32:
		return float64(math.Float32frombits(le32(b[4*i:])))
	case dtype.FP64:
		return math.Float64frombits(le64(b[8*i:]))
	case dtype.BF16:
		return float64(dtype.BF16ToFloat32(le16(b[2*i:])))
	}
	return float64(dtype.FP16ToFloat32(le16(b[2*i:])))
}

func randomInput(rng *rand.Rand, dt dtype.DType, count int) []byte {
	b := make([]byte, count*dt.Size())
	for i := 0; i < count; i++ {
		v := float32((rng.Float64()*2 - 1) * math.Ldexp(1, rng.IntN(8)-4))
		switch dt {
		case dtype.FP32:
			put32(b[4*i:], math.Float32bits(v))
		case dtype.FP64:
			put64(b[8*i:], math.Float64bits((rng.Float64()*2-1)*math.Ldexp(1, rng.IntN(8)-4)))
		case dtype.BF16:
			put16(b[2*i:], dtype.Float32ToBF16(v))
		case dtype.FP16:
			put16(b[2*i:], dtype.Float32ToFP16(v))
		}
	}
	return b
}

// onRanks runs fn on every rank of a fresh inproc group and fails on any error.
func onRanks(t *testing.T, w int, fn func(tr transport.Transport) error) {
	t.Helper()
	ts, err := inproc.New(w)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, tr := range ts {
			tr.Close()
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, w)
	for r := range ts {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = fn(ts[r])
			if errs[r] != nil {
				ts[r].Close()
			}
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// checkClose compares got with the oracle of inputs within a tolerance that
// covers any summation order.
func checkClose(t *testing.T, dt dtype.DType, inputs [][]byte, got []byte, what string) {
	t.Helper()
	want := make([]byte, len(got))
	if err := reduce.Oracle(dt, reduce.Native, inputs, want); err != nil {
		t.Fatal(err)
	}
	w := len(inputs)
	for i := 0; i < len(got)/dt.Size(); i++ {
		abs := 0.0
		for _, in := range inputs {
			abs += math.Abs(get(dt, in, i))
		}
		tol := float64(w) * unit(dt) * abs
		if g, o := get(dt, got, i), get(dt, want, i); math.Abs(g-o) > tol {
			t.Fatalf("%s: element %d = %g, oracle %g (tolerance %g)", what, i, g, o, tol)
		}
	}
}

func TestAllReduceCloseToOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for w := 1; w <= 7; w++ {
		for _, dt := range allDTypes {
			for _, count := range []int{0, 1, 5, w, 3*w + 1, 1000, 4099} {
				t.Run(fmt.Sprintf("W%d/%v/n%d", w, dt, count), func(t *testing.T) {
					inputs := make([][]byte, w)
					for r := range inputs {
						inputs[r] = randomInput(rng, dt, count)
					}
					outs := make([][]byte, w)
					onRanks(t, w, func(tr transport.Transport) error {
						r := tr.Rank()
						outs[r] = make([]byte, len(inputs[r]))
						send := bytes.Clone(inputs[r])
						if err := AllReduce(context.Background(), tr, 7, send, outs[r], dt, nil); err != nil {
							return err
						}
						if !bytes.Equal(send, inputs[r]) {
							return fmt.Errorf("send modified")
						}
						// In place, with an exact-size scratch, must give the same bits.
						inPlace := bytes.Clone(inputs[r])
						scratch := make([]byte, AllReduceScratchBytes(len(inPlace), w, dt))
						if err := AllReduce(context.Background(), tr, 8, inPlace, inPlace, dt, scratch); err != nil {
							return err
						}
						if !bytes.Equal(inPlace, outs[r]) {
							return fmt.Errorf("in-place result differs")
						}
						return nil
					})
					for r := 1; r < w; r++ {
						if !bytes.Equal(outs[r], outs[0]) {
							t.Fatalf("rank %d's result differs from rank 0's", r)
						}
					}
					checkClose(t, dt, inputs, outs[0], "AllReduce")
				})
			}
		}
	}
}

func TestReduceScatterCloseToOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for w := 1; w <= 7; w++ {
		for _, dt := range allDTypes {
			for _, count := range []int{0, 1, 7, 513} {
				t.Run(fmt.Sprintf("W%d/%v/n%d", w, dt, count), func(t *testing.T) {
					inputs := make([][]byte, w)
					for r := range inputs {
						inputs[r] = randomInput(rng, dt, w*count)
					}
					outs := make([][]byte, w)
					onRanks(t, w, func(tr transport.Transport) error {
						r := tr.Rank()
						outs[r] = make([]byte, count*dt.Size())
						send := bytes.Clone(inputs[r])
						if err := ReduceScatter(context.Background(), tr, 9, send, outs[r], dt, nil); err != nil {
							return err
						}
						if !bytes.Equal(send, inputs[r]) {
							return fmt.Errorf("send modified")
						}
						return nil
					})
					n := count * dt.Size()
					for r := 0; r < w; r++ {
						blocks := make([][]byte, w)
						for p := range blocks {
							blocks[p] = inputs[p][r*n : (r+1)*n]
						}
						checkClose(t, dt, blocks, outs[r], fmt.Sprintf("ReduceScatter rank %d", r))
					}
				})
			}
		}
	}
}

func TestAllGatherExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for w := 1; w <= 7; w++ {
		for _, n := range []int{0, 1, 3, 1000} {
			t.Run(fmt.Sprintf("W%d/n%d", w, n), func(t *testing.T) {
				inputs := make([][]byte, w)
				var want []byte
				for r := range inputs {
					inputs[r] = make([]byte, n)
					for i := range inputs[r] {
						inputs[r][i] = byte(rng.Uint32())
					}
					want = append(want, inputs[r]...)
				}
				outs := make([][]byte, w)
				onRanks(t, w, func(tr transport.Transport) error {
					r := tr.Rank()
					outs[r] = make([]byte, w*n)
					if err := AllGather(context.Background(), tr, 1, inputs[r], outs[r], dtype.Byte); err != nil {
						return err
					}
					in := make([]byte, w*n)
					copy(in[r*n:], inputs[r])
					if err := AllGather(context.Background(), tr, 2, in[r*n:(r+1)*n], in, dtype.Byte); err != nil {
						return err
					}
					if !bytes.Equal(in, outs[r]) {
						return fmt.Errorf("in-place all-gather differs")
					}
					return nil
				})
				for r := range outs {
					if !bytes.Equal(outs[r], want) {
						t.Fatalf("rank %d: not the concatenation", r)
					}
				}
			})
		}
	}
}

// TestOrderDiffersFromTree shows the baseline really is a different order:
// with cancelling fp32 values the ring sum differs from the tree.
func TestOrderDiffersFromTree(t *testing.T) {
	const w = 4
	// Element 0: ring order for chunk 0 on rank 0 is r1+r2+r3+r0; tree is (r0+r1)+(r2+r3).
	vals := []float32{1, 1e8, -1e8, 1}
	inputs := make([][]byte, w)
	for r := range inputs {
		inputs[r] = make([]byte, 4*w) // 4 elements, one per chunk
		for i := 0; i < w; i++ {
			put32(inputs[r][4*i:], math.Float32bits(vals[r]))
		}
	}
	outs := make([][]byte, w)
	onRanks(t, w, func(tr transport.Transport) error {
		outs[tr.Rank()] = make([]byte, 4*w)
		return AllReduce(context.Background(), tr, 3, inputs[tr.Rank()], outs[tr.Rank()], dtype.FP32, nil)
	})
	want := make([]byte, 4*w)
	if err := reduce.Oracle(dtype.FP32, reduce.Native, inputs, want); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(outs[0], want) {
		t.Fatalf("ring result equals the tree for cancelling values; the test does not exercise order")
	}
}

func TestArgumentErrors(t *testing.T) {
	ts, _ := inproc.New(2)
	defer ts[0].Close()
	defer ts[1].Close()
	ctx := context.Background()
	tr := ts[0]
	if err := AllReduce(ctx, tr, 0, make([]byte, 8), make([]byte, 4), dtype.FP32, nil); err == nil {
		t.Error("AllReduce accepted mismatched lengths")
	}
	if err := AllReduce(ctx, tr, 0, make([]byte, 8), make([]byte, 8), dtype.Byte, nil); err == nil {
		t.Error("AllReduce accepted a non-reducible dtype")
	}
	if err := ReduceScatter(ctx, tr, 0, make([]byte, 12), make([]byte, 4), dtype.FP32, nil); err == nil {
		t.Error("ReduceScatter accepted send != W*recv")
	}
	buf := make([]byte, 16)
	if err := ReduceScatter(ctx, tr, 0, buf, buf[4:8], dtype.FP32, nil); err == nil {
		t.Error("ReduceScatter accepted overlapping buffers")
	}
	if err := AllGather(ctx, tr, 0, make([]byte, 4), make([]byte, 4), dtype.FP32); err == nil {
		t.Error("AllGather accepted recv != W*send")
	}
}

func TestContextCancelled(t *testing.T) {
	ts, _ := inproc.New(3)
	defer func() {
		for _, tr := range ts {
			tr.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// Only rank 0 calls: it must give up when the context expires, not hang.
	err := AllReduce(ctx, ts[0], 0, make([]byte, 64), make([]byte, 64), dtype.FP32, nil)
	if err == nil {
		t.Fatal("AllReduce without peers succeeded")
	}
}
