package dtype

import "math"

// BF16ToFloat32 widens a bfloat16 bit pattern exactly.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBF16 rounds to nearest even; NaN becomes CanonicalNaNBF.
func Float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7FFFFFFF > 0x7F800000 {
		return CanonicalNaNBF
	}
	// Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even;
	// a carry out of the fraction correctly bumps the exponent (to inf on overflow).
	u += 0x7FFF + (u>>16)&1
	return uint16(u >> 16)
}

// RoundBF16 is Float32ToBF16 followed by widening: the float32 value of the
// nearest bf16. NaN payloads are not canonicalised (callers canonicalise
// the final result).
func RoundBF16(f float32) float32 {
	u := math.Float32bits(f)
	if u&0x7FFFFFFF > 0x7F800000 {
		return f
	}
	u += 0x7FFF + (u>>16)&1
	return math.Float32frombits(u &^ 0xFFFF)
}

var f16Table [1 << 16]float32

func init() {
	for i := range f16Table {
		f16Table[i] = fp16ToFloat32Slow(uint16(i))
	}
}

// FP16ToFloat32 widens an IEEE binary16 bit pattern exactly.
func FP16ToFloat32(h uint16) float32 { return f16Table[h] }

func fp16ToFloat32Slow(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1F
	frac := uint32(h) & 0x3FF
	switch {
	case exp == 0x1F: // inf or NaN: keep the payload, set quiet bit as hardware does
		if frac == 0 {
			return math.Float32frombits(sign | 0x7F800000)
		}
		return math.Float32frombits(sign | 0x7F800000 | 0x400000 | frac<<13)
	case exp == 0:
		if frac == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: value = frac * 2^-24, exactly representable in float32
		v := float32(frac) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(v))
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}

// Float32ToFP16 rounds to nearest even with overflow to infinity and
// subnormal results kept; NaN becomes CanonicalNaN16.
func Float32ToFP16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7FFFFFFF
	switch {
	case a > 0x7F800000:
		return CanonicalNaN16
	case a >= 0x477FF000: // >= 65520 rounds to inf (65504 is max, halfway is 65520)
		return sign | 0x7C00
	case a >= 0x38800000: // >= 2^-14: normal fp16
		// rebias exponent (127-15 = 112) and round 13 dropped bits to nearest even
		v := a - 112<<23
		v += 0xFFF + (v>>13)&1
		return sign | uint16(v>>13)
	case a < 0x33000000: // < 2^-25: rounds to zero (2^-25 is the tie with 0, even → 0)
		return sign
	}
	// subnormal fp16: value = m * 2^-24 with m in [0, 1024]; round a/2^-24 to even.
	e := a >> 23               // biased exponent, 102..112
	m := a&0x7FFFFF | 0x800000 // 24-bit significand, value = m * 2^(e-127-23)
	shift := 126 - e           // bits to drop so that unit = 2^-24: (e-150) - (-24) = e-126 → drop 126-e
	r := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}

// RoundFP16 is the float32 value of the nearest fp16 (NaN passed through).
func RoundFP16(f float32) float32 {
	if f != f {
		return f
	}
	return f16Table[Float32ToFP16(f)]
}
