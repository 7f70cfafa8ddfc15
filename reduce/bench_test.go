package reduce

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/detcoll/detcoll/dtype"
)

// BenchmarkReduce reports input bytes per second (all W ranks' buffers) for
// the fast reducer at W = 8, 64 MiB per rank, on 1 and 2 workers.
//
//	go test -run '^$' -bench Reduce -benchtime 10x ./reduce/
func BenchmarkReduce(b *testing.B) {
	const w, perRank = 8, 64 << 20
	for _, dt := range []dtype.DType{dtype.FP32, dtype.BF16, dtype.FP16, dtype.FP64} {
		ins, out := benchInputs(dt, w, perRank)
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/W=%d/workers=%d", dt, w, workers), func(b *testing.B) {
				r := NewReducer(workers)
				defer r.Close()
				r.Reduce(dt, Native, ins, out)
				b.SetBytes(int64(w * perRank))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					r.Reduce(dt, Native, ins, out)
				}
			})
		}
	}
}

// BenchmarkOracle is the naive reference, for scale (smaller: it is slow).
func BenchmarkOracle(b *testing.B) {
	const w, perRank = 8, 4 << 20
	for _, dt := range []dtype.DType{dtype.FP32, dtype.BF16} {
		ins, out := benchInputs(dt, w, perRank)
		b.Run(fmt.Sprintf("%v/W=%d", dt, w), func(b *testing.B) {
			b.SetBytes(int64(w * perRank))
			for i := 0; i < b.N; i++ {
				Oracle(dt, Native, ins, out)
			}
		})
	}
}

func benchInputs(dt dtype.DType, w, perRank int) ([][]byte, []byte) {
	rng := rand.New(rand.NewPCG(1, 1))
	ins := make([][]byte, w)
	for i := range ins {
		ins[i] = make([]byte, perRank)
		fill(rng, dt, ins[i], 0)
	}
	return ins, make([]byte, perRank)
}
