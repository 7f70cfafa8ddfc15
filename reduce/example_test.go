package reduce_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
)

// Three ranks' fp32 buffers reduced with the canonical tree (r0+r1)+r2:
// 1 + 1e8 rounds to 1e8 first, so the result is 0, not 1.
func ExampleOracle() {
	in := func(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }
	out := make([]byte, 4)
	if err := reduce.Oracle(dtype.FP32, reduce.Native, [][]byte{in(1), in(1e8), in(-1e8)}, out); err != nil {
		panic(err)
	}
	fmt.Println(math.Float32frombits(binary.LittleEndian.Uint32(out)))
	// Output: 0
}
