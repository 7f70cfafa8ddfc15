package parallel

import "math"

// The float32 arithmetic of the host reference.
//
// Every operation below is one IEEE binary32 operation rounded to nearest
// even. Go may fuse x*y + z into an FMA (it does on arm64, ppc64le, s390x,
// riscv64, loong64 and amd64 with GOAMD64=v3), which would skip the
// rounding of the product. The Go specification says that an explicit
// floating-point conversion rounds to the target precision and prevents
// that fusion, so every product that feeds an addition is written
// float32(x*y): in mul below and in the GEMM and attention loops. (Without
// the conversion in mul, GOAMD64=v3 compiles 14 VFMADDs into this package;
// with it, go build -gcflags=-S shows none on any of those architectures,
// and TestFormulasNotFused fails if one appears.) The same formulas are
// straightforward to reproduce on a GPU with __fmul_rn/__fadd_rn or with
// contraction turned off.

func mul(a, b float32) float32 { return float32(a * b) }
func add(a, b float32) float32 { return float32(a + b) }
func sub(a, b float32) float32 { return float32(a - b) }
func div(a, b float32) float32 { return float32(a / b) }

// pow2 is 2^k as a float32, for -126 <= k <= 127.
func pow2(k int) float32 { return math.Float32frombits(uint32(k+127) << 23) }

// Exp32 is e^x in float32 with a fixed formula (Cody–Waite reduction by
// ln 2 and the Cephes expf polynomial, every operation rounded to float32),
// so its bits are the same on every platform and reproducible on a GPU.
// Accurate to about 1 ulp; overflows to +Inf above 88.7228, underflows to
// +0 below -103.98, subnormal results rounded once; NaN gives NaN.
func Exp32(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > 88.72283905206835:
		return float32(math.Inf(1))
	case x < -103.97207708:
		return 0
	}
	const (
		log2e = 1.44269504088896341
		c1    = 0.693359375 // ln 2 in 9 bits: z*c1 is exact for |z| <= 2^15
		c2    = -2.12194440e-4
	)
	z := float32(math.Floor(float64(add(mul(log2e, x), 0.5))))
	n := int(z)
	r := sub(x, mul(z, c1))
	r = sub(r, mul(z, c2))
	rr := mul(r, r)
	p := float32(1.9875691500e-4)
	p = add(mul(p, r), 1.3981999507e-3)
	p = add(mul(p, r), 8.3334519073e-3)
	p = add(mul(p, r), 4.1665795894e-2)
	p = add(mul(p, r), 1.6666665459e-1)
	p = add(mul(p, r), 5.0000001201e-1)
	p = add(add(mul(p, rr), r), 1)
	if n > 127 {
		p, n = mul(p, 2), n-1 // exact
	}
	if n < -126 {
		// Scale in two steps: the first is exact (normal result), the
		// second rounds once into the subnormal range.
		return mul(mul(p, pow2(n+64)), pow2(-64))
	}
	return mul(p, pow2(n))
}

// Log32 is the natural logarithm in float32 with a fixed formula (the
// Cephes logf reduction and polynomial, every operation rounded to
// float32). Accurate to about 1 ulp; Log32(+0) = -Inf, Log32(+Inf) = +Inf,
// negative or NaN arguments give NaN.
func Log32(x float32) float32 {
	switch {
	case x != x || x < 0:
		return float32(math.NaN())
	case x == 0:
		return float32(math.Inf(-1))
	case math.IsInf(float64(x), 1):
		return x
	}
	e := 0
	if x < 0x1p-126 { // subnormal: scale up exactly
		x, e = mul(x, 0x1p23), -23
	}
	b := math.Float32bits(x)
	e += int(b>>23&0xFF) - 126
	f := math.Float32frombits(b&0x807FFFFF | 126<<23) // x = f * 2^e, f in [0.5, 1)
	if f < 0.707106781186547524 {
		e--
		f = sub(add(f, f), 1)
	} else {
		f = sub(f, 1)
	}
	z := mul(f, f)
	y := float32(7.0376836292e-2)
	y = sub(mul(y, f), 1.1514610310e-1)
	y = add(mul(y, f), 1.1676998740e-1)
	y = sub(mul(y, f), 1.2420140846e-1)
	y = add(mul(y, f), 1.4249322787e-1)
	y = sub(mul(y, f), 1.6668057665e-1)
	y = add(mul(y, f), 2.0000714765e-1)
	y = sub(mul(y, f), 2.4999993993e-1)
	y = add(mul(y, f), 3.3333331174e-1)
	y = mul(mul(y, f), z)
	fe := float32(e)
	y = add(y, mul(-2.12194440e-4, fe))
	y = sub(y, mul(0.5, z))
	r := add(f, y)
	return add(r, mul(0.693359375, fe))
}

// Sigmoid32 is 1 / (1 + Exp32(-x)), each operation rounded to float32.
func Sigmoid32(x float32) float32 { return div(1, add(1, Exp32(-x))) }

// SiLU32 is x * Sigmoid32(x) rounded to float32.
func SiLU32(x float32) float32 { return mul(x, Sigmoid32(x)) }

// swiglu is the activation of one element, in float32, before the caller
// rounds it to the dtype: silu(g) * u.
func swiglu(g, u float32) float32 { return mul(SiLU32(g), u) }

// swigluGrad returns, in float32 before rounding to the dtype, the
// gradients of a = silu(g)*u given da:
//
//	du = da * silu(g)
//	dg = (da * u) * (s * (1 + g*(1 - s)))   with s = Sigmoid32(g)
func swigluGrad(g, u, da float32) (dg, du float32) {
	s := Sigmoid32(g)
	du = mul(da, mul(g, s))
	dsilu := mul(s, add(1, mul(g, sub(1, s))))
	dg = mul(mul(da, u), dsilu)
	return dg, du
}
