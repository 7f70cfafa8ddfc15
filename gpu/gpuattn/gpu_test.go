package gpuattn

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/gpu/ncclcomm"
	"github.com/detcoll/detcoll/internal/gputest"
	"github.com/detcoll/detcoll/internal/nvrtc"
)

// GPU test. It runs as every rank of a launched job, one GPU per rank:
//
//	CGO_ENABLED=1 go build -o bin/detcoll ./cmd/detcoll
//	CGO_ENABLED=1 go test -c -o bin/gpuattn.test ./gpu/gpuattn
//	OUT=$PWD/out bin/detcoll launch --standalone --nproc-per-node 2 -- bin/gpuattn.test -test.run GPU -test.v
//
// CP = W (the world size) over the job's GPUs against CP = 1 on every
// rank's own GPU, and both against package parallel's host attention, bit
// for bit. It skips, saying why, when the process was not started by a
// launcher or no GPU, CUDA driver, NVRTC or NCCL is usable. Rank 0 writes
// gpuattn-cp<W>.json and .md to $OUT (when set).

var (
	setupOnce sync.Once
	testJob   *cluster.Job
	testComm  *ncclcomm.Comm
	setupErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if testComm != nil {
		if err := testComm.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the device communicator:", err)
			code = 1
		}
	}
	if testJob != nil {
		testJob.Close()
	}
	os.Exit(code)
}

func gpuSetup(t *testing.T) (*cluster.Job, *ncclcomm.Comm) {
	t.Helper()
	gputest.RequireLaunchedGPU(t, "gpuattn.test", true)
	setupOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if testJob, setupErr = cluster.Init(ctx, cluster.Options{}); setupErr != nil {
			return
		}
		testComm, setupErr = ncclcomm.New(ctx, testJob)
		if setupErr == nil {
			fmt.Printf("rank %d of %d: GPU %d %s, NCCL %s, NVRTC %s\n", testComm.Rank(), testComm.Size(),
				testComm.Device().Ordinal(), testComm.Device().Name(), testComm.NCCLVersion(), nvrtc.VersionString())
		}
	})
	if setupErr != nil {
		t.Fatalf("setting up the job and the device communicator: %v", setupErr)
	}
	return testJob, testComm
}

func TestGPUAttnCP(t *testing.T) {
	job, comm := gpuSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dev := comm.Device()
	env := &testEnv{host: job.Comm, w: comm.Size(), rank: comm.Rank(),
		device: fmt.Sprintf("GPU %d %s", dev.Ordinal(), dev.Name()),
		cpW: func() (ops, func() error, error) {
			o, err := newGPUOps(nil, comm)
			if err != nil {
				return nil, nil, err
			}
			return o, o.close, nil
		},
		cp1: func() (ops, func() error, error) {
			o, err := newGPUOps(dev, nil)
			if err != nil {
				return nil, nil, err
			}
			return o, o.close, nil
		},
	}
	versions := map[string]string{"nccl": comm.NCCLVersion(), "nvrtc": nvrtc.VersionString(), "gpu": dev.Name(),
		"git_commit": os.Getenv("DETCOLL_GIT_COMMIT")}
	rep := runAll(ctx, t, env, "TestGPUAttnCP", os.Getenv("OUT"), versions, time.Now().UTC().Format(time.RFC3339))
	if comm.Rank() == 0 {
		fmt.Printf("SUMMARY gpuattn CP = %d vs CP = 1 (and vs host parallel): bitwise %v over %d cases\n", comm.Size(), rep.Bitwise, len(rep.Cases))
	}
	if !rep.Bitwise {
		t.Errorf("CP = %d is not bitwise equal to CP = 1", comm.Size())
	}
}
