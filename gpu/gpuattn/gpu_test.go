package gpuattn

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/gpu/devcomm"
	"github.com/detcoll/detcoll/internal/gputest"
	"github.com/detcoll/detcoll/parallel"
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
// launcher or no GPU, driver, kernel compiler or collective library is
// usable. The vendor is gpu/devrt's choice ($DETCOLL_DEVICE, else CUDA
// first): on NVIDIA the backend is cuda_ag_rs (NCCL, NVRTC), on AMD
// rccl_ag_rs (RCCL, hiprtc; never run on an AMD GPU). Rank 0 writes
// gpuattn-cp<W>.json and .md to $OUT (when set).

var (
	testBackend  parallel.Backend
	testCompiler string // the kernel compiler's version
)

var (
	setupOnce sync.Once
	testJob   *cluster.Job
	testComm  *devcomm.Comm
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

func gpuSetup(t *testing.T) (*cluster.Job, *devcomm.Comm) {
	t.Helper()
	gputest.RequireLaunchedGPU(t, "gpuattn.test", true)
	setupOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if testJob, setupErr = cluster.Init(ctx, cluster.Options{}); setupErr != nil {
			return
		}
		if testComm, setupErr = devcomm.New(ctx, testJob); setupErr != nil {
			return
		}
		dev := testComm.Device()
		if testBackend, setupErr = BackendName(dev.Vendor()); setupErr != nil {
			return
		}
		rt := dev.Runtime()
		prog, err := rt.Build(GatherRowsSource, "detcoll_gather_rows.cu", dev.Props())
		if err != nil {
			setupErr = fmt.Errorf("compiling the row-gather kernel: %w", err)
			return
		}
		testCompiler = prog.Version
		fmt.Printf("rank %d of %d: %s, GPU %d %s, %s %s, %s %s\n", testComm.Rank(), testComm.Size(), testBackend,
			dev.Ordinal(), dev.Name(), rt.CCLName(), testComm.NCCLVersion(), rt.CompilerName(), testCompiler)
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
	env := &testEnv{host: job.Comm, w: comm.Size(), rank: comm.Rank(), backend: testBackend,
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
	rt := dev.Runtime()
	versions := map[string]string{strings.ToLower(rt.CCLName()): comm.NCCLVersion(), strings.ToLower(rt.CompilerName()): testCompiler,
		"gpu": dev.Name(), "git_commit": os.Getenv("DETCOLL_GIT_COMMIT")}
	rep := runAll(ctx, t, env, "TestGPUAttnCP", os.Getenv("OUT"), versions, time.Now().UTC().Format(time.RFC3339))
	if comm.Rank() == 0 {
		fmt.Printf("SUMMARY gpuattn %s CP = %d vs CP = 1 (and vs host parallel): bitwise %v over %d cases\n", testBackend, comm.Size(), rep.Bitwise, len(rep.Cases))
	}
	if !rep.Bitwise {
		t.Errorf("CP = %d is not bitwise equal to CP = 1", comm.Size())
	}
}
