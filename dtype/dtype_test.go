package dtype

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestParse(t *testing.T) {
	for s, want := range map[string]DType{
		"bf16": BF16, "bfloat16": BF16, "fp16": FP16, "f16": FP16, "float16": FP16,
		"fp32": FP32, "f32": FP32, "float32": FP32, "FP64": FP64, "f64": FP64, "float64": FP64,
	} {
		got, err := Parse(s)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "int8", "fp8", "bf15"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) succeeded", s)
		}
	}
	for _, d := range []DType{BF16, FP16, FP32, FP64} {
		b, err := d.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back DType
		if err := back.UnmarshalText(b); err != nil || back != d {
			t.Errorf("round trip %v: %v %v", d, back, err)
		}
	}
	if Invalid.Valid() || Invalid.Size() != 0 {
		t.Error("Invalid must not be valid")
	}
}

// fp16Ref decodes binary16 independently of the table, through float64.
func fp16Ref(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>10) & 0x1F
	f := float64(h & 0x3FF)
	switch e {
	case 0:
		return s * math.Ldexp(f, -24)
	case 31:
		if f == 0 {
			return s * math.Inf(1)
		}
		return math.NaN()
	}
	return s * math.Ldexp(1+f/1024, e-15)
}

func TestAllFP16Patterns(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := FP16ToFloat32(h)
		ref := fp16Ref(h)
		if math.IsNaN(ref) {
			if f == f {
				t.Fatalf("%#04x: want NaN, got %v", h, f)
			}
			if got := Float32ToFP16(f); got != CanonicalNaN16 {
				t.Fatalf("%#04x: NaN narrows to %#04x, want canonical", h, got)
			}
			continue
		}
		if float64(f) != ref || math.Signbit(float64(f)) != (h&0x8000 != 0) {
			t.Fatalf("%#04x: widened to %v, want %v", h, f, ref)
		}
		if back := Float32ToFP16(f); back != h {
			t.Fatalf("%#04x: round trip gives %#04x", h, back)
		}
	}
}

func TestAllBF16Patterns(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := BF16ToFloat32(h)
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("%#04x: widened bits %#08x", h, math.Float32bits(f))
		}
		back := Float32ToBF16(f)
		if f != f {
			if back != CanonicalNaNBF {
				t.Fatalf("%#04x: NaN narrows to %#04x", h, back)
			}
			continue
		}
		if back != h {
			t.Fatalf("%#04x: round trip gives %#04x", h, back)
		}
	}
}

// nearestRef rounds x to the nearest value of a 16-bit format by search in
// the sorted list of its finite non-negative values (ties to even pattern),
// with overflow to infinity at the format's halfway point.
type ref16 struct {
	vals   []float64 // finite non-negative values, ascending, index = bits
	maxH   uint16    // bits of the largest finite
	infH   uint16
	widenF func(uint16) float64
}

func newRef16(widen func(uint16) float64, inf uint16) *ref16 {
	r := &ref16{infH: inf, widenF: widen}
	for h := uint16(0); h < inf; h++ {
		r.vals = append(r.vals, widen(h))
	}
	if !sort.Float64sAreSorted(r.vals) {
		panic("unsorted")
	}
	r.maxH = inf - 1
	return r
}

func (r *ref16) round(x float32) uint16 {
	ax := math.Abs(float64(x))
	var sign uint16
	if math.Signbit(float64(x)) {
		sign = 0x8000
	}
	maxV := r.vals[r.maxH]
	ulp := maxV - r.vals[r.maxH-1]
	if ax >= maxV+ulp/2 { // halfway to the next power: rounds to inf (the tie goes to the even "next")
		return sign | r.infH
	}
	i := sort.SearchFloat64s(r.vals, ax) // first >= ax
	if i < len(r.vals) && r.vals[i] == ax {
		return sign | uint16(i)
	}
	lo, hi := i-1, i
	if hi > int(r.maxH) {
		return sign | uint16(lo)
	}
	dl, dh := ax-r.vals[lo], r.vals[hi]-ax
	switch {
	case dl < dh:
		return sign | uint16(lo)
	case dh < dl:
		return sign | uint16(hi)
	}
	if lo%2 == 0 {
		return sign | uint16(lo)
	}
	return sign | uint16(hi)
}

func TestNarrowingAgainstReference(t *testing.T) {
	f16 := newRef16(fp16Ref, 0x7C00)
	bf := newRef16(func(h uint16) float64 { return float64(BF16ToFloat32(h)) }, 0x7F80)
	var xs []float32
	// Every midpoint between neighbours, and one float32 ulp either side.
	for _, r := range []*ref16{f16, bf} {
		for i := 0; i+1 < len(r.vals); i++ {
			mid := float32((r.vals[i] + r.vals[i+1]) / 2)
			xs = append(xs, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1e30), float32(r.vals[i]))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		xs = append(xs, math.Float32frombits(rng.Uint32()))
	}
	xs = append(xs, 65504, 65519.996, 65520, 65536, 1e-8, 2.9802322e-8, 2.9802326e-8, 5.9604645e-8, 6.1035156e-5,
		float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), math.MaxFloat32, math.SmallestNonzeroFloat32)
	for _, x := range xs {
		for _, neg := range []bool{false, true} {
			if neg {
				x = -x
			}
			if x != x {
				if Float32ToFP16(x) != CanonicalNaN16 || Float32ToBF16(x) != CanonicalNaNBF {
					t.Fatalf("NaN %#08x not canonical", math.Float32bits(x))
				}
				continue
			}
			if got, want := Float32ToFP16(x), f16.round(x); got != want {
				t.Fatalf("Float32ToFP16(%g / %#08x) = %#04x, want %#04x", x, math.Float32bits(x), got, want)
			}
			if got, want := Float32ToBF16(x), bf.round(x); got != want {
				t.Fatalf("Float32ToBF16(%g / %#08x) = %#04x, want %#04x", x, math.Float32bits(x), got, want)
			}
			if RoundFP16(x) != FP16ToFloat32(Float32ToFP16(x)) || RoundBF16(x) != BF16ToFloat32(Float32ToBF16(x)) {
				t.Fatalf("Round* disagrees with narrow+widen at %g", x)
			}
		}
	}
}

func TestSpecificRounding(t *testing.T) {
	cases := []struct {
		x    float32
		f16  uint16
		bf16 uint16
	}{
		{1, 0x3C00, 0x3F80},
		{65504, 0x7BFF, 0x4780},
		{65520, 0x7C00, 0x4780},        // fp16 halfway to 2^16 rounds to inf
		{1e6, 0x7C00, 0x4974},          // overflow to inf in fp16
		{5.9604645e-8, 0x0001, 0x3380}, // smallest fp16 subnormal
		{2.9802322e-8, 0x0000, 0x3300}, // exactly half the smallest subnormal: ties to even (0)
		{float32(math.Copysign(0, -1)), 0x8000, 0x8000},
		{1 + 1.0/2048, 0x3C00, 0x3F80}, // fp16 tie between 1 and 1+2^-10 → even (1)
		{1 + 3.0/2048, 0x3C02, 0x3F80}, // tie → even (1+2^-9)
		{1 + 1.0/256, 0x3C04, 0x3F80},  // bf16 tie between 1 and 1+2^-7 → even (1)
		{1 + 3.0/256, 0x3C0C, 0x3F82},  // bf16 tie → even
	}
	for _, c := range cases {
		if got := Float32ToFP16(c.x); got != c.f16 {
			t.Errorf("fp16(%g) = %#04x, want %#04x", c.x, got, c.f16)
		}
		if got := Float32ToBF16(c.x); got != c.bf16 {
			t.Errorf("bf16(%g) = %#04x, want %#04x", c.x, got, c.bf16)
		}
	}
}
