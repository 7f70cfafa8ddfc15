package parallel

import (
	"math"
	"math/rand/v2"
	"testing"
)

func ulpDiff(a float32, b float64) float64 {
	f := float32(b)
	if a == f {
		return 0
	}
	ulp := math.Abs(float64(math.Nextafter32(f, float32(math.Inf(1)))) - float64(f))
	return math.Abs(float64(a)-b) / ulp
}

func TestExp32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	worst := 0.0
	for i := 0; i < 200000; i++ {
		x := float32(rng.Float64()*190 - 100)
		if i%2 == 0 {
			x = float32(rng.Float64()*20 - 10)
		}
		got, want := Exp32(x), math.Exp(float64(x))
		if want < 0x1p-126 || want > math.MaxFloat32 {
			continue // subnormal and overflow ranges checked below
		}
		worst = math.Max(worst, ulpDiff(got, want))
	}
	t.Logf("Exp32: worst error %.2f ulp over the normal range", worst)
	if worst > 2 {
		t.Errorf("Exp32 worst error %.2f ulp", worst)
	}
	for _, c := range []struct{ x, want float32 }{
		{0, 1}, {float32(math.Inf(-1)), 0}, {-200, 0}, {100, float32(math.Inf(1))}, {float32(math.Inf(1)), float32(math.Inf(1))},
	} {
		if got := Exp32(c.x); got != c.want {
			t.Errorf("Exp32(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	if v := Exp32(float32(math.NaN())); v == v {
		t.Error("Exp32(NaN) is not NaN")
	}
	// Subnormal results: within an ulp of the subnormal grid.
	for _, x := range []float32{-88, -95, -100, -103} {
		got, want := float64(Exp32(x)), math.Exp(float64(x))
		if math.Abs(got-want) > 0x1p-149 {
			t.Errorf("Exp32(%v) = %g, want %g", x, got, want)
		}
	}
}

func TestLog32(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	worst := 0.0
	for i := 0; i < 200000; i++ {
		x := float32(math.Exp(rng.Float64()*160 - 80))
		got, want := Log32(x), math.Log(float64(x))
		worst = math.Max(worst, ulpDiff(got, want))
	}
	t.Logf("Log32: worst error %.2f ulp", worst)
	if worst > 2 {
		t.Errorf("Log32 worst error %.2f ulp", worst)
	}
	if Log32(1) != 0 || !math.IsInf(float64(Log32(0)), -1) || !math.IsInf(float64(Log32(float32(math.Inf(1)))), 1) {
		t.Error("Log32 special values")
	}
	if v := Log32(-1); v == v {
		t.Error("Log32(-1) is not NaN")
	}
	if got, want := float64(Log32(0x1p-140)), math.Log(0x1p-140); math.Abs(got-want) > 1e-5 {
		t.Errorf("Log32(2^-140) = %v, want %v", got, want)
	}
}

// TestFormulaBits pins the bits of the fixed formulas: a change here changes
// every layer's output, and a GPU backend must reproduce these.
func TestFormulaBits(t *testing.T) {
	for _, c := range []struct {
		name string
		got  float32
		want uint32
	}{
		{"Exp32(1)", Exp32(1), 0x402df854},
		{"Exp32(-0.5)", Exp32(-0.5), 0x3f1b4598},
		{"Exp32(10.25)", Exp32(10.25), 0x46dcf516},
		{"Log32(10)", Log32(10), 0x40135d8e},
		{"Log32(0.3)", Log32(0.3), 0xbf9a1bc8},
		{"SiLU32(0.7)", SiLU32(0.7), 0x3eef7a7e},
		{"SiLU32(-3)", SiLU32(-3), 0xbe11b13a},
	} {
		if b := math.Float32bits(c.got); b != c.want {
			t.Errorf("%s = %v (%#x), want %#x", c.name, c.got, b, c.want)
		}
	}
}

// r32 rounds a float64 result to float32. A float32 operation done in
// float64 and rounded is exactly the float32 operation (float64 carries
// more than 2·24+2 bits), and it cannot be contracted into an FMA: the
// restatements below are an independent check that no product of the
// package's formulas was fused, whatever GOARCH/GOAMD64 compiled them.
func r32(x float64) float32 { return float32(x) }

func refExp32(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > 88.72283905206835:
		return float32(math.Inf(1))
	case x < -103.97207708:
		return 0
	}
	f := func(v float32) float64 { return float64(v) }
	z := float32(math.Floor(f(r32(f(r32(f(float32(1.44269504088896341))*f(x))) + 0.5))))
	n := int(z)
	r := r32(f(x) - f(r32(f(z)*f(float32(0.693359375)))))
	r = r32(f(r) - f(r32(f(z)*f(float32(-2.12194440e-4)))))
	rr := r32(f(r) * f(r))
	p := float32(1.9875691500e-4)
	for _, c := range []float32{1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1} {
		p = r32(f(r32(f(p)*f(r))) + f(c))
	}
	p = r32(f(r32(f(r32(f(p)*f(rr)))+f(r))) + 1)
	if n > 127 {
		p, n = r32(f(p)*2), n-1
	}
	if n < -126 {
		return r32(f(r32(f(p)*math.Ldexp(1, n+64))) * math.Ldexp(1, -64))
	}
	return r32(f(p) * math.Ldexp(1, n))
}

func refLog32(x float32) float32 {
	if x != x || x <= 0 || math.IsInf(float64(x), 1) {
		return Log32(x) // specials: checked separately
	}
	f := func(v float32) float64 { return float64(v) }
	fr, e := math.Frexp(float64(x)) // x = fr·2^e, fr in [0.5, 1), exact
	m := float32(fr)
	if m < 0.707106781186547524 {
		e--
		m = r32(f(r32(f(m)+f(m))) - 1)
	} else {
		m = r32(f(m) - 1)
	}
	z := r32(f(m) * f(m))
	y := float32(7.0376836292e-2)
	for _, c := range []float32{-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1} {
		y = r32(f(r32(f(y)*f(m))) + f(c))
	}
	y = r32(f(r32(f(y)*f(m))) * f(z))
	fe := float32(e)
	y = r32(f(y) + f(r32(f(float32(-2.12194440e-4))*f(fe))))
	y = r32(f(y) - f(r32(0.5*f(z))))
	r := r32(f(m) + f(y))
	return r32(f(r) + f(r32(f(float32(0.693359375))*f(fe))))
}

func TestFormulasNotFused(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	f := func(v float32) float64 { return float64(v) }
	for i := 0; i < 100000; i++ {
		x := float32(rng.NormFloat64() * 30)
		if got, want := Exp32(x), refExp32(x); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("Exp32(%v) = %#x, restatement %#x", x, math.Float32bits(got), math.Float32bits(want))
		}
		y := float32(math.Exp(rng.NormFloat64() * 40))
		if got, want := Log32(y), refLog32(y); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("Log32(%v) = %#x, restatement %#x", y, math.Float32bits(got), math.Float32bits(want))
		}
		g, u, da := float32(rng.NormFloat64()*4), float32(rng.NormFloat64()), float32(rng.NormFloat64())
		s := r32(1 / f(r32(1+f(refExp32(-g)))))
		silu := r32(f(g) * f(s))
		if got := SiLU32(g); got != silu {
			t.Fatalf("SiLU32(%v) = %v, restatement %v", g, got, silu)
		}
		if got := swiglu(g, u); got != r32(f(silu)*f(u)) {
			t.Fatalf("swiglu(%v, %v)", g, u)
		}
		dg, du := swigluGrad(g, u, da)
		wantDu := r32(f(da) * f(silu))
		wantDg := r32(f(r32(f(da)*f(u))) * f(r32(f(s)*f(r32(1+f(r32(f(g)*f(r32(1-f(s))))))))))
		if dg != wantDg || du != wantDu {
			t.Fatalf("swigluGrad(%v, %v, %v) = (%v, %v), restatement (%v, %v)", g, u, da, dg, du, wantDg, wantDu)
		}
	}
}
