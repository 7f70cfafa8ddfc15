// Command loops times one collective in a tight loop on every rank of a
// launched job (detcoll launch, torchrun or mpirun set the environment):
// 50 warm-up calls, then 7 samples of ITERS calls each, and rank 0 prints
// the median, fastest and slowest sample's mean per call. Unlike
// `detcoll bench` it runs one operation at one size with nothing between
// the samples, which is what docs/benchmarks/loops/run.sh interleaves with
// Open MPI's loop to compare data paths (docs/shm.md, "AllGather from
// exposed buffers").
//
//	N=1048576 ITERS=200 OP=ag detcoll launch --nproc-per-node 2 ./loops
//
// OP is ag (AllGather of N bytes per rank), ar (AllReduce of N bytes) or
// rs (ReduceScatter of N bytes per rank into N/W), fp32.
package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loops:", err)
		os.Exit(1)
	}
}

func run() error {
	n, err := strconv.Atoi(os.Getenv("N"))
	if err != nil || n <= 0 || n%4 != 0 {
		return fmt.Errorf("N=%q: want a positive multiple of 4 bytes", os.Getenv("N"))
	}
	iters, err := strconv.Atoi(os.Getenv("ITERS"))
	if err != nil || iters <= 0 {
		return fmt.Errorf("ITERS=%q: want a positive count", os.Getenv("ITERS"))
	}
	op := os.Getenv("OP")
	if op != "ag" && op != "ar" && op != "rs" {
		return fmt.Errorf("OP=%q: want ag, ar or rs", op)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	j, err := cluster.Init(ctx, cluster.Options{})
	if err != nil {
		return err
	}
	defer j.Close()
	c := j.Comm
	send := make([]byte, n)
	for i := range send {
		send[i] = byte(i)
	}
	recv := make([]byte, n)
	switch op {
	case "ag":
		recv = make([]byte, n*c.Size())
	case "rs":
		if n%(4*c.Size()) != 0 {
			return fmt.Errorf("N=%d: ReduceScatter wants a multiple of 4·W bytes", n)
		}
		recv = make([]byte, n/c.Size())
	}
	call := func() error {
		switch op {
		case "ar":
			return c.AllReduce(ctx, send, recv, detcoll.FP32)
		case "rs":
			return c.ReduceScatter(ctx, send, recv, detcoll.FP32)
		}
		return c.AllGather(ctx, send, recv, detcoll.FP32)
	}
	for range 50 {
		if err := call(); err != nil {
			return err
		}
	}
	samples := make([]float64, 7)
	for s := range samples {
		start := time.Now()
		for range iters {
			if err := call(); err != nil {
				return err
			}
		}
		samples[s] = float64(time.Since(start).Nanoseconds()) / 1e3 / float64(iters)
	}
	slices.Sort(samples)
	if c.Rank() == 0 {
		fmt.Printf("%s n=%d W=%d median %.2f us min %.2f max %.2f\n", op, n, c.Size(), samples[3], samples[0], samples[6])
	}
	return nil
}
