package reduce

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/detcoll/detcoll/dtype"
)

// BenchmarkReduceBandwidth measures, in one run and interleaved, the fast
// reducer's effective memory bandwidth and this machine's plain memory
// bandwidth over the same buffers, for W = 2, 4, 8 and 64 MiB per rank:
//
//   - reduce: (W inputs read + 1 output written) bytes / time;
//   - copy: memmove of every input into the output buffer, (read + written) bytes / time;
//   - readsum: a read-only pass summing every input as uint64 words, bytes read / time.
//
// Every pass uses the reducer's worker count of goroutines on disjoint
// halves, so the baselines get the same cores. Each iteration times one pass
// of each (reduce, copy, readsum, in turn); the metrics are medians over the
// iterations, and pct_of_best is reduce / max(copy, readsum).
//
//	go test -run '^$' -bench ReduceBandwidth -benchtime 9x ./reduce/
func BenchmarkReduceBandwidth(b *testing.B) {
	perRank := 64 << 20
	if os.Getenv("DETCOLL_REDUCE_BW_MIB") != "" {
		fmt.Sscan(os.Getenv("DETCOLL_REDUCE_BW_MIB"), &perRank)
		perRank <<= 20
	}
	for _, dt := range []dtype.DType{dtype.FP32, dtype.BF16} {
		for _, w := range []int{2, 4, 8} {
			b.Run(fmt.Sprintf("%v/W=%d", dt, w), func(b *testing.B) {
				ins, out := fastInputs(dt, w, perRank)
				r := NewReducer(0)
				defer r.Close()
				parts := r.Workers()
				r.Reduce(dt, Native, ins, out)
				var tr, tc, ts []float64
				var sink uint64
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					r.Reduce(dt, Native, ins, out)
					t1 := time.Now()
					parallel(parts, len(out), func(lo, hi int) {
						for _, in := range ins {
							copy(out[lo:hi], in[lo:hi])
						}
					})
					t2 := time.Now()
					var mu sync.Mutex
					parallel(parts, len(out), func(lo, hi int) {
						var s uint64
						for _, in := range ins {
							s += readSum(in[lo:hi])
						}
						mu.Lock()
						sink += s
						mu.Unlock()
					})
					t3 := time.Now()
					tr = append(tr, t1.Sub(t0).Seconds())
					tc = append(tc, t2.Sub(t1).Seconds())
					ts = append(ts, t3.Sub(t2).Seconds())
				}
				b.StopTimer()
				n := float64(perRank)
				reduceGB := float64(w+1) * n / median(tr) / 1e9
				copyGB := 2 * float64(w) * n / median(tc) / 1e9
				sumGB := float64(w) * n / median(ts) / 1e9
				b.ReportMetric(reduceGB, "reduce_GB/s")
				b.ReportMetric(copyGB, "copy_GB/s")
				b.ReportMetric(sumGB, "readsum_GB/s")
				b.ReportMetric(100*reduceGB/max(copyGB, sumGB), "pct_of_best")
				b.ReportMetric(float64(sink&1), "sink")
			})
		}
	}
}

// parallel runs fn over k contiguous 4 KiB-aligned parts of [0, n).
func parallel(k, n int, fn func(lo, hi int)) {
	per := (n/k + 4095) &^ 4095
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += per {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, min(lo+per, n))
	}
	wg.Wait()
}

// readSum adds b as uint64 words with four independent accumulators (so
// that the loop is bound by loads, not by one add chain).
func readSum(b []byte) uint64 {
	w := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
	var s0, s1, s2, s3 uint64
	for len(w) >= 4 {
		s0 += w[0]
		s1 += w[1]
		s2 += w[2]
		s3 += w[3]
		w = w[4:]
	}
	for _, v := range w {
		s0 += v
	}
	return s0 + s1 + s2 + s3
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// fastInputs fills W buffers with normal values in ±[1, 2)·2^k (no
// subnormals, which would time the FPU's slow path instead of memory),
// cheaply: 64 MiB × 8 through math/rand would take longer than the runs.
func fastInputs(dt dtype.DType, w, perRank int) ([][]byte, []byte) {
	ins := make([][]byte, w)
	x := uint64(0x9E3779B97F4A7C15)
	for r := range ins {
		ins[r] = make([]byte, perRank)
		switch dt {
		case dtype.FP32:
			u := unsafe.Slice((*uint32)(unsafe.Pointer(&ins[r][0])), perRank/4)
			for i := range u {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				u[i] = uint32(x)&0x807FFFFF | uint32(120+x>>60)<<23
			}
		default:
			u := unsafe.Slice((*uint16)(unsafe.Pointer(&ins[r][0])), perRank/2)
			for i := range u {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				u[i] = uint16(x)&0x807F | uint16(120+x>>60)<<7
			}
		}
	}
	return ins, make([]byte, perRank)
}
