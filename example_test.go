package detcoll_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/detcoll/detcoll"
)

// Four in-process ranks all-reduce float32 vectors. Every rank gets the same
// bits: ((r0+r1)+(r2+r3)) for each element, whatever the algorithm.
func Example() {
	comms, err := detcoll.NewInProc(4)
	if err != nil {
		panic(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	results := make([][]float32, 4)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func(c *detcoll.Comm) {
			defer wg.Done()
			// Rank r contributes {1e8, r}; rank 2 contributes -1e8 first.
			x := []float32{1e8, float32(c.Rank())}
			if c.Rank() == 2 {
				x[0] = -1e8
			}
			out := make([]float32, len(x))
			err := c.AllReduce(context.Background(), detcoll.Float32Bytes(x), detcoll.Float32Bytes(out), detcoll.FP32,
				detcoll.WithAlgorithm(detcoll.A2ATree))
			if err != nil {
				panic(err)
			}
			results[c.Rank()] = out
		}(c)
	}
	wg.Wait()
	for r, out := range results {
		fmt.Println("rank", r, out)
	}
	// Output:
	// rank 0 [2e+08 6]
	// rank 1 [2e+08 6]
	// rank 2 [2e+08 6]
	// rank 3 [2e+08 6]
}
