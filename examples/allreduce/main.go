// Command allreduce all-reduces float32 vectors over four in-process ranks:
// every rank prints the same bits, whatever the algorithm.
package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/detcoll/detcoll"
)

func main() {
	comms, err := detcoll.NewInProc(4) // or detcoll.New(transport), one per process
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	out := make([][]float32, len(comms))
	for _, c := range comms {
		wg.Add(1)
		go func(c *detcoll.Comm) { // each rank: its own goroutine or process
			defer wg.Done()
			x := []float32{1e8, float32(c.Rank())}
			if c.Rank() == 2 {
				x[0] = -1e8
			}
			out[c.Rank()] = make([]float32, len(x))
			err := c.AllReduce(context.Background(), detcoll.Float32Bytes(x), detcoll.Float32Bytes(out[c.Rank()]),
				detcoll.FP32, detcoll.WithAlgorithm(detcoll.A2ATree))
			if err != nil {
				panic(err)
			}
		}(c)
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	for r, o := range out {
		fmt.Println("rank", r, o) // ((1e8+1e8)+(-1e8+1e8)) = 2e+08 and 0+1+2+3 = 6, on every rank
	}
}
