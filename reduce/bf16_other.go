//go:build !amd64

package reduce

var useAVX2 = false

func addRoundBF16uVec(d []float32, a, b []uint16) int { return 0 }
func addRoundBF16Vec(d, a, b []float32) int           { return 0 }
func narrowBF16Vec(o []uint16, s []float32) int       { return 0 }
func addF32Vec(d, a, b []float32) int                 { return 0 }
func canonF32Vec(o []uint32, s []float32) int         { return 0 }
func treeBF16Vec(t task, lo, hi int) int              { return 0 }
func treeF32Vec(t task, lo, hi int) int               { return 0 }
