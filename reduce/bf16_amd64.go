package reduce

import "golang.org/x/sys/cpu"

// useAVX2 selects the AVX2 bf16 kernels; tests turn it off to check the
// portable path against the same oracle.
var useAVX2 = cpu.X86.HasAVX2

//go:noescape
func addRoundBF16uAVX2(d *float32, a, b *uint16, n int)

//go:noescape
func addRoundBF16AVX2(d, a, b *float32, n int)

//go:noescape
func narrowBF16AVX2(o *uint16, s *float32, n int)

// The vector kernels do n&^7 elements and return how many they did.

func addRoundBF16uVec(d []float32, a, b []uint16) int {
	n := len(d) &^ 7
	if !useAVX2 || n == 0 {
		return 0
	}
	_, _ = a[n-1], b[n-1]
	addRoundBF16uAVX2(&d[0], &a[0], &b[0], n)
	return n
}

func addRoundBF16Vec(d, a, b []float32) int {
	n := len(d) &^ 7
	if !useAVX2 || n == 0 {
		return 0
	}
	_, _ = a[n-1], b[n-1]
	addRoundBF16AVX2(&d[0], &a[0], &b[0], n)
	return n
}

func narrowBF16Vec(o []uint16, s []float32) int {
	n := len(o) &^ 7
	if !useAVX2 || n == 0 {
		return 0
	}
	_ = s[n-1]
	narrowBF16AVX2(&o[0], &s[0], n)
	return n
}
