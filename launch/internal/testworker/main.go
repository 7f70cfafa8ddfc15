// Command testworker is a rank of a detcoll job for the launcher's tests:
// it joins the job through package cluster, runs collectives and, when
// told to, dies or stops mid-job, so that the launcher's reports can be
// checked against a known root cause. On failure it prints the launcher's
// FailureMarker line (launch.ReportFailure), as detcoll's commands should.
//
// Environment: TW_MODE (results | loop), TW_FAULT_RANK, TW_FAULT (kill |
// stop), TW_FAULT_AT (iteration), TW_ITERS (loop iterations, default 1000),
// and DETCOLL_TIMEOUT for the collectives.
package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/launch"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		launch.ReportFailure(os.Stderr, err)
		os.Exit(1)
	}
}

func envInt(k string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return n
	}
	return def
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	job, err := cluster.Init(ctx, cluster.Options{})
	if err != nil {
		return err
	}
	defer job.Close()
	// Collectives run without a deadline of their own, so that the
	// communicator's (DETCOLL_TIMEOUT) bounds each.
	ctx = context.Background()
	rank, world := job.Env.Rank, job.Env.WorldSize
	if len(os.Args) > 1 && os.Args[1] == "--print-host" {
		fmt.Printf("HOST %s\n", os.Getenv("DETCOLL_TCP_HOST"))
	}
	switch os.Getenv("TW_MODE") {
	case "results":
		// Every dtype and algorithm on an odd count: the digest of each
		// result is what the one-host and two-host jobs must agree on.
		const count = 4099
		for _, dt := range []detcoll.DType{detcoll.FP32, detcoll.BF16, detcoll.FP64, detcoll.FP16} {
			for _, alg := range []detcoll.Algorithm{detcoll.GatherTree, detcoll.A2ATree, detcoll.RecursiveDoubling, detcoll.HalvingDoubling} {
				send := make([]byte, count*dt.Size())
				bench.FillInput(send, dt, 7, rank, 0)
				recv := make([]byte, len(send))
				if err := job.Comm.AllReduce(ctx, send, recv, dt, detcoll.WithAlgorithm(alg)); err != nil {
					return err
				}
				fmt.Printf("RESULT allreduce %v %v world=%d %x\n", dt, alg, world, sha256.Sum256(recv))
			}
			ag := make([]byte, count*dt.Size()*world)
			send := make([]byte, count*dt.Size())
			bench.FillInput(send, dt, 9, rank, 0)
			if err := job.Comm.AllGather(ctx, send, ag, dt); err != nil {
				return err
			}
			fmt.Printf("RESULT allgather %v world=%d %x\n", dt, world, sha256.Sum256(ag))
		}
		return nil
	case "loop":
		faultRank, at := envInt("TW_FAULT_RANK", -1), envInt("TW_FAULT_AT", 3)
		send := make([]byte, 4*1024)
		recv := make([]byte, len(send))
		for i := range envInt("TW_ITERS", 1000) {
			if rank == faultRank && i == at {
				fmt.Printf("rank %d: fault %s at iteration %d\n", rank, os.Getenv("TW_FAULT"), i)
				switch os.Getenv("TW_FAULT") {
				case "kill":
					syscall.Kill(os.Getpid(), syscall.SIGKILL)
				case "stop":
					syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				}
			}
			if i == 1 {
				fmt.Printf("rank %d: running\n", rank)
			}
			if err := job.Comm.AllReduce(ctx, send, recv, detcoll.FP32); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	}
	return fmt.Errorf("unknown TW_MODE %q", os.Getenv("TW_MODE"))
}
