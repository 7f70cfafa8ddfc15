package reduce

//go:noescape
func addF32AVX2(d, a, b *float32, n int)

//go:noescape
func canonF32AVX2(o *uint32, s *float32, n int)

// addF32Vec does d = a + b on the first len(d)&^7 elements and returns how many.
func addF32Vec(d, a, b []float32) int {
	n := len(d) &^ 7
	if !useAVX2 || n == 0 {
		return 0
	}
	_, _ = a[n-1], b[n-1]
	addF32AVX2(&d[0], &a[0], &b[0], n)
	return n
}

// canonF32Vec writes the bits of s with canonical NaN into o on the first
// len(o)&^7 elements and returns how many.
func canonF32Vec(o []uint32, s []float32) int {
	n := len(o) &^ 7
	if !useAVX2 || n == 0 {
		return 0
	}
	_ = s[n-1]
	canonF32AVX2(&o[0], &s[0], n)
	return n
}
