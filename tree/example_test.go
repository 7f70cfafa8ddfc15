package tree_test

import (
	"fmt"

	"github.com/detcoll/detcoll/tree"
)

// The canonical tree for a few world sizes: adjacent pairs, lower rank on
// the left, an odd last value carried up unchanged.
func ExampleExpr() {
	for _, w := range []int{3, 5, 8} {
		fmt.Println(w, tree.Expr(w))
	}
	// Output:
	// 3 ((r0+r1)+r2)
	// 5 (((r0+r1)+(r2+r3))+r4)
	// 8 (((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)))
}

// Shards of 10 elements over 4 ranks: the first count%W shards get one more.
func ExampleShard() {
	for r := 0; r < 4; r++ {
		off, n := tree.Shard(10, 4, r)
		fmt.Printf("rank %d: [%d, %d)\n", r, off, off+n)
	}
	// Output:
	// rank 0: [0, 3)
	// rank 1: [3, 6)
	// rank 2: [6, 8)
	// rank 3: [8, 10)
}
