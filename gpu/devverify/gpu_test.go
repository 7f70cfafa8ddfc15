package devverify

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/devcomm"
	"github.com/detcoll/detcoll/internal/gputest"

	// The test binary carries both vendors, as a default build does.
	_ "github.com/detcoll/detcoll/gpu/devrt/cudart"
	_ "github.com/detcoll/detcoll/gpu/devrt/hiprt"
)

// GPU tests (moved here from gpu/devcomm with Verify). They run as every
// rank of a launched job, one GPU per rank:
//
//	go test -c -o bin/devverify.test ./gpu/devverify
//	bin/detcoll launch --standalone --nproc-per-node 2 -- bin/devverify.test -test.run GPU -test.v
//
// They skip, saying why, when the process was not started by a launcher or
// no GPU, CUDA driver or NCCL is usable. DETCOLL_TEST_LARGE_BYTES sets the
// size of the large cases (default 256 MiB; 0 skips them);
// DETCOLL_TEST_REQUIRE_IPC=1 fails the peer-memory test instead of skipping
// it when the path is off.

var (
	setupOnce sync.Once
	testJob   *cluster.Job
	setupErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if testJob != nil {
		testJob.Close()
	}
	os.Exit(code)
}

func gpuJob(t *testing.T) *cluster.Job {
	t.Helper()
	gputest.RequireLaunchedGPU(t, "devverify.test", false)
	setupOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		testJob, setupErr = cluster.Init(ctx, cluster.Options{})
	})
	if setupErr != nil {
		t.Fatalf("setting up the job: %v", setupErr)
	}
	return testJob
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newComm(t *testing.T, opts ...devcomm.Option) *Comm {
	t.Helper()
	c, err := devcomm.New(testCtx(t), gpuJob(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("rank %d of %d: GPU %d %s, NCCL %s\n", c.Rank(), c.Size(), c.Device().Ordinal(), c.Device().Name(), c.NCCLVersion())
	return c
}

func logResults(t *testing.T, c *Comm, res []Result, err error) {
	t.Helper()
	bad := 0
	for _, r := range res {
		if !r.OK() {
			bad++
			t.Errorf("rank %d: %s", c.Rank(), r)
		} else if c.Rank() == 0 {
			t.Log(r)
		}
	}
	if err != nil {
		t.Fatalf("rank %d: %v", c.Rank(), err)
	}
	t.Logf("rank %d: %d checks, %d failed", c.Rank(), len(res), bad)
}

// TestGPUVerify: every collective, dtype, algorithm and count (1, odd,
// prime, up to 256 MiB) equals the host oracle bit for bit and is stable
// over repeats; in place; on another stream; many lanes; graph replays.
func TestGPUVerify(t *testing.T) {
	c := newComm(t)
	defer c.Close()
	large := 256 << 20
	if v := os.Getenv("DETCOLL_TEST_LARGE_BYTES"); v != "" {
		large, _ = strconv.Atoi(v)
	}
	res, err := Verify(testCtx(t), c, VerifyOptions{LargeBytes: large,
		Accumulate: []detcoll.Accumulate{detcoll.AccumulateNative, detcoll.AccumulateF32}})
	logResults(t, c, res, err)
}

// TestGPUVerifyVariants: the p2p and allgather gathers, pipelining with
// small chunks (many NCCL operations, reduces on the side stream, in graph
// captures too), the strided reduce path (used above 64 ranks, forced here
// with Thresholds.ListInputs) and the generic kernels of package gpu all
// give the same bits.
func TestGPUVerifyVariants(t *testing.T) {
	ctx := testCtx(t)
	for _, v := range []struct {
		name    string
		gather  devcomm.Gather
		limit   int
		chunk   int
		generic bool
	}{
		{"p2p", devcomm.GatherP2P, 0, 0, false},
		{"allgather", devcomm.GatherAllGather, 0, 0, false},
		{"p2p+pipelined", devcomm.GatherP2P, 0, 16 << 10, false},
		{"p2p+strided", devcomm.GatherP2P, 1, 0, false},
		{"allgather+strided", devcomm.GatherAllGather, 1, 0, false},
		{"generic-kernels+pipelined", devcomm.GatherAuto, 0, 16 << 10, true},
	} {
		t.Run(v.name, func(t *testing.T) {
			if v.generic {
				t.Setenv(devcomm.FastReduceEnv, "0")
			}
			th := devcomm.DefaultThresholds()
			th.ListInputs = v.limit
			c := newComm(t, devcomm.WithGather(v.gather), devcomm.WithChunkBytes(v.chunk), devcomm.WithIPC(0), devcomm.WithThresholds(th))
			defer c.Close()
			if v.generic == c.FastReduce() {
				t.Fatalf("fast kernels loaded: %v", c.FastReduce())
			}
			res, err := Verify(ctx, c, VerifyOptions{DTypes: []dtype.DType{dtype.BF16, dtype.FP64}, Counts: []int{1, 7, 1009, 65537}, Repeats: 2})
			logResults(t, c, res, err)
		})
	}
}

// TestGPUIPCVerify: one_shot, two_shot and the peer-memory AllGather and
// ReduceScatter equal the oracle for every dtype and count (1, odd, prime,
// large), in place, on another stream, many lanes, graph replays; with a
// small capacity (many pieces) and with the default one.
func TestGPUIPCVerify(t *testing.T) {
	for _, capacity := range []int{256 << 10, devcomm.DefaultIPCBytes} {
		c := newComm(t, devcomm.WithIPC(capacity))
		if on, why := c.IPC(); !on {
			c.Close()
			if os.Getenv("DETCOLL_TEST_REQUIRE_IPC") == "1" {
				t.Fatalf("no peer-memory path: %s", why)
			}
			t.Skipf("no peer-memory path here: %s", why)
		}
		res, err := Verify(testCtx(t), c, VerifyOptions{Algorithms: []detcoll.Algorithm{detcoll.OneShot, detcoll.TwoShot},
			Accumulate: []detcoll.Accumulate{detcoll.AccumulateNative, detcoll.AccumulateF32}, LargeBytes: 64 << 20, Repeats: 2})
		logResults(t, c, res, err)
		t.Logf("capacity %d: staging %d bytes", capacity, c.IPCStagingBytes())
		if got, limit := c.IPCStagingBytes(), 2*capacity+devcomm.IPCHeaderBytes; got > limit {
			t.Errorf("staging %d bytes > %d", got, limit)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
