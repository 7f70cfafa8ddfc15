// Deterministic inputs with special values, used by the device tests and
// by gpu/devverify.

package gputest

import (
	"math"
	"runtime"
	"sync"

	"github.com/detcoll/detcoll/dtype"
)

// Parallel runs fn over [0, n) in blocks on every core.
func Parallel(n, block int, fn func(lo, hi int) error) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		next  = make(chan int)
	)
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo := range next {
				if err := fn(lo, min(lo+block, n)); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for lo := 0; lo < n; lo += block {
		next <- lo
	}
	close(next)
	wg.Wait()
	return first
}

// FillInput writes rank's input: mostly finite values of varied
// magnitude and sign (sums sensitive to their order), with about one element
// in 61 special: ±0, ±inf, a NaN with a payload, a subnormal, the largest
// finite value. Generated in parallel; a pure function of (dt, seed, rank, index).
func FillInput(dst []byte, dt dtype.DType, seed uint64, rank int) {
	sz := dt.Size()
	key := mix64(seed ^ mix64(uint64(rank)+1) ^ uint64(dt)<<56)
	_ = Parallel(len(dst)/sz, 1<<16, func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			h := mix64(key + uint64(i)*0x9E3779B97F4A7C15)
			putElem(dst[i*sz:], dt, h)
		}
		return nil
	})
}

func putElem(b []byte, dt dtype.DType, h uint64) {
	e := int((h>>52)&0xFF)%13 - 10
	sign := h >> 63
	f := math.Ldexp(1+float64(h&(1<<52-1))/(1<<52), e)
	if sign != 0 {
		f = -f
	}
	if (h>>8)%61 == 0 {
		switch (h >> 16) % 7 {
		case 0:
			f = 0
		case 1:
			f = math.Copysign(0, -1)
		case 2:
			f = math.Inf(1)
		case 3:
			f = math.Inf(-1)
		case 4:
			f = math.NaN()
		case 5:
			f = 1e-300 // a subnormal after narrowing (or tiny in f64)
		case 6:
			f = math.MaxFloat64
		}
	}
	switch dt {
	case dtype.FP64:
		bits := math.Float64bits(f)
		if f != f {
			bits = 0x7FF4000000000123 // a signalling NaN with a payload
		}
		PutLE(b, bits, 8)
	case dtype.FP32:
		x := float32(f)
		bits := math.Float32bits(x)
		if f != f {
			bits = 0xFFA00001
		} else if f == 1e-300 {
			bits = 0x00000003
		}
		PutLE(b, uint64(bits), 4)
	case dtype.BF16:
		v := dtype.Float32ToBF16(float32(f))
		if f != f {
			v = 0xFF81
		} else if f == 1e-300 {
			v = 0x0003
		}
		PutLE(b, uint64(v), 2)
	case dtype.FP16:
		v := dtype.Float32ToFP16(float32(f))
		if f != f {
			v = 0xFC01
		} else if f == 1e-300 {
			v = 0x0003
		}
		PutLE(b, uint64(v), 2)
	default:
		PutLE(b, h, dt.Size())
	}
}

func PutLE(b []byte, v uint64, n int) {
	for i := 0; i < n; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

func mix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}
