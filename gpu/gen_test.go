package gpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
)

// Test inputs: W rank slabs whose elements mix random values with the cases
// that break careless reductions. Each element picks one class, the same
// for all ranks, so that cancellation, absorption and ties happen across the
// tree.

const numClasses = 13

var classNames = [numClasses]string{"normal", "finite-bits", "any-bits", "cancel", "absorb", "signed-zero",
	"inf", "nan-payload", "subnormal", "overflow", "tie", "extreme", "small-int"}

type typeInfo struct {
	mantBits int // fraction bits
	expBits  int
}

func infoOf(dt dtype.DType) typeInfo {
	switch dt {
	case dtype.BF16:
		return typeInfo{7, 8}
	case dtype.FP16:
		return typeInfo{10, 5}
	case dtype.FP32:
		return typeInfo{23, 8}
	}
	return typeInfo{52, 11}
}

// bitsOf encodes f in dt (round to nearest; NaN canonical).
func bitsOf(dt dtype.DType, f float64) uint64 {
	switch dt {
	case dtype.BF16:
		return uint64(dtype.Float32ToBF16(float32(f)))
	case dtype.FP16:
		return uint64(dtype.Float32ToFP16(float32(f)))
	case dtype.FP32:
		return uint64(math.Float32bits(float32(f)))
	}
	return math.Float64bits(f)
}

func put(dt dtype.DType, b []byte, i int, v uint64) {
	sz := dt.Size()
	for k := 0; k < sz; k++ {
		b[i*sz+k] = byte(v >> (8 * k))
	}
}

func get(dt dtype.DType, b []byte, i int) uint64 {
	sz := dt.Size()
	var v uint64
	for k := 0; k < sz; k++ {
		v |= uint64(b[i*sz+k]) << (8 * k)
	}
	return v
}

// rawBits builds a value from sign, biased exponent and fraction.
func rawBits(dt dtype.DType, sign uint64, exp uint64, frac uint64) uint64 {
	ti := infoOf(dt)
	total := 1 + ti.expBits + ti.mantBits
	return sign<<(total-1) | exp<<ti.mantBits | frac&(1<<ti.mantBits-1)
}

// genSlabs returns w slabs of count elements of dt.
func genSlabs(dt dtype.DType, w, count int, seed uint64) [][]byte {
	slabs := make([][]byte, w)
	for r := range slabs {
		slabs[r] = make([]byte, count*dt.Size())
	}
	// Chunks of elements in parallel, each with its own deterministic stream.
	const chunk = 1 << 14
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for lo := 0; lo < count; lo += chunk {
		hi := min(lo+chunk, count)
		wg.Add(1)
		sem <- struct{}{}
		go func(lo, hi int) {
			defer wg.Done()
			defer func() { <-sem }()
			rng := rand.New(rand.NewPCG(seed, uint64(lo)))
			vals := make([]uint64, w)
			for i := lo; i < hi; i++ {
				genElement(dt, rng, rng.IntN(numClasses), vals)
				for r := 0; r < w; r++ {
					put(dt, slabs[r], i, vals[r])
				}
			}
		}(lo, hi)
	}
	wg.Wait()
	return slabs
}

func genElement(dt dtype.DType, rng *rand.Rand, class int, vals []uint64) {
	ti := infoOf(dt)
	maxExp := uint64(1)<<ti.expBits - 1 // all ones: inf/NaN
	mant := uint64(1)<<ti.mantBits - 1
	sign := func() uint64 { return uint64(rng.IntN(2)) }
	bias := int(maxExp / 2)
	w := len(vals)
	switch class {
	case 0: // normal values of moderate range
		for r := range vals {
			vals[r] = bitsOf(dt, rng.NormFloat64()*math.Ldexp(1, rng.IntN(9)-4))
		}
	case 1: // any finite bit pattern
		for r := range vals {
			vals[r] = rawBits(dt, sign(), rng.Uint64N(maxExp), rng.Uint64())
		}
	case 2: // any bit pattern at all (NaNs with payloads, infinities)
		for r := range vals {
			vals[r] = rawBits(dt, sign(), rng.Uint64N(maxExp+1), rng.Uint64())
		}
	case 3: // pairs that cancel almost exactly
		for r := range vals {
			if r%2 == 1 {
				prev := vals[r-1] ^ rawBits(dt, 1, 0, 0) // negate
				if rng.IntN(2) == 0 {
					prev ^= uint64(rng.IntN(4)) // perturb the last bits
				}
				vals[r] = prev
			} else {
				vals[r] = rawBits(dt, sign(), uint64(bias-3+rng.IntN(6)), rng.Uint64())
			}
		}
	case 4: // one large value absorbing many small ones
		big := rng.IntN(w)
		for r := range vals {
			if r == big {
				vals[r] = rawBits(dt, sign(), uint64(bias+ti.mantBits/2+rng.IntN(3)), rng.Uint64())
			} else {
				vals[r] = rawBits(dt, sign(), uint64(bias-ti.mantBits/2-rng.IntN(3)), rng.Uint64())
			}
		}
	case 5: // signed zeros, sometimes one tiny value
		for r := range vals {
			vals[r] = rawBits(dt, sign(), 0, 0)
		}
		if rng.IntN(3) == 0 {
			vals[rng.IntN(w)] = rawBits(dt, sign(), 0, 1)
		}
	case 6: // infinities of either sign among finite values
		for r := range vals {
			switch rng.IntN(3) {
			case 0:
				vals[r] = rawBits(dt, sign(), maxExp, 0)
			default:
				vals[r] = rawBits(dt, sign(), uint64(bias+rng.IntN(4)), rng.Uint64())
			}
		}
	case 7: // one or two NaNs with payloads (quiet and signalling)
		for r := range vals {
			vals[r] = rawBits(dt, sign(), uint64(bias+rng.IntN(4)-2), rng.Uint64())
		}
		for k := 0; k < 1+rng.IntN(2); k++ {
			frac := rng.Uint64() & mant
			if frac == 0 {
				frac = 1
			}
			vals[rng.IntN(w)] = rawBits(dt, sign(), maxExp, frac)
		}
	case 8: // subnormals (results subnormal, normal, or zero)
		for r := range vals {
			vals[r] = rawBits(dt, sign(), 0, rng.Uint64())
		}
	case 9: // near the largest finite value, mostly one sign: overflow
		s := sign()
		for r := range vals {
			ss := s
			if rng.IntN(8) == 0 {
				ss ^= 1
			}
			vals[r] = rawBits(dt, ss, maxExp-1-uint64(rng.IntN(2)), mant-uint64(rng.IntN(4)))
		}
	case 10: // exact rounding ties: 1+k*ulp and ±ulp/2 multiples
		for r := range vals {
			if rng.IntN(2) == 0 {
				vals[r] = rawBits(dt, sign(), uint64(bias), uint64(rng.IntN(4)))
			} else {
				vals[r] = rawBits(dt, sign(), uint64(bias-ti.mantBits-1), uint64(rng.IntN(3))<<(ti.mantBits-2))
			}
		}
	case 11: // extremes: max finite, min normal, min subnormal, zero
		for r := range vals {
			switch rng.IntN(4) {
			case 0:
				vals[r] = rawBits(dt, sign(), maxExp-1, mant)
			case 1:
				vals[r] = rawBits(dt, sign(), 1, 0)
			case 2:
				vals[r] = rawBits(dt, sign(), 0, 1)
			default:
				vals[r] = rawBits(dt, sign(), 0, 0)
			}
		}
	default: // small integers: exact sums, zeros of both signs
		for r := range vals {
			vals[r] = bitsOf(dt, float64(rng.IntN(9)-4))
		}
	}
}

// oracle is reduce.Oracle over element chunks in parallel.
func oracle(dt dtype.DType, acc reduce.Accumulate, inputs [][]byte, out []byte) error {
	sz := dt.Size()
	n := len(out) / sz
	const chunk = 1 << 15
	var wg sync.WaitGroup
	errs := make(chan error, n/chunk+1)
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for lo := 0; lo < n || lo == 0; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		sem <- struct{}{}
		go func(lo, hi int) {
			defer wg.Done()
			defer func() { <-sem }()
			in := make([][]byte, len(inputs))
			for r := range inputs {
				in[r] = inputs[r][lo*sz : hi*sz]
			}
			if err := reduce.Oracle(dt, acc, in, out[lo*sz:hi*sz]); err != nil {
				errs <- err
			}
		}(lo, hi)
		if n == 0 {
			break
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// prefix returns the first count elements of each slab.
func prefix(slabs [][]byte, dt dtype.DType, w, count int) [][]byte {
	out := make([][]byte, w)
	for r := range out {
		out[r] = slabs[r][:count*dt.Size()]
	}
	return out
}

// diff describes the first mismatches between got and want, "" if equal.
func diff(dt dtype.DType, inputs [][]byte, got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	var b strings.Builder
	n := len(want) / dt.Size()
	bad := 0
	for i := 0; i < n; i++ {
		g, w := get(dt, got, i), get(dt, want, i)
		if g == w {
			continue
		}
		bad++
		if bad <= 5 {
			fmt.Fprintf(&b, "\n  element %d: got %#x want %#x; inputs", i, g, w)
			for r := range inputs {
				fmt.Fprintf(&b, " %#x", get(dt, inputs[r], i))
			}
		}
	}
	return fmt.Sprintf("%d of %d elements differ:%s", bad, n, b.String())
}
