// Package devbench is the "cuda" backend of package bench (`detcoll bench
// --device cuda`): detcoll's deterministic collectives on device memory
// (package gpu/devcomm) against NCCL's own ncclAllReduce, ncclAllGather and
// ncclReduceScatter (ncclSum) on the same buffers, in the same run, on the
// same NCCL communicator and stream.
//
// # Timing
//
// Each Run* call records a CUDA event on the stream, enqueues its iterations
// back to back (eager), records a second event, waits for it and returns
// the elapsed time divided by the iterations: the device time of one
// iteration on this rank, launch gaps included. With CaseSpec.Graph the
// iterations are captured once into a CUDA graph (after one eager call,
// which checks the arguments and grows the workspace) and the timed region
// is one launch of that graph; graphs are cached per (which, algorithm,
// accumulate, iterations). bench.Run takes the slowest rank of every sample.
//
// # Memory
//
// workspace_bytes is the workspace the communicator retains after the row.
// peak_allocated_bytes is the larger of the communicator's own workspace
// peak since the row began and the drop in the device's free memory
// (cuMemGetInfo) from the row's start to the end of each run, so memory
// that NCCL allocates on behalf of detcoll's sends and receives (its lazily
// connected peer buffers) is counted; native_peak_allocated_bytes is the
// drop in free memory across the native runs of the case. Free memory moves
// in the driver's 2 MiB pages.
//
// # Threads
//
// A Backend belongs to one rank and is used from one goroutine, as
// bench.Run does; every CUDA call runs on a locked OS thread with the
// device's primary context current (gpu.Device.Do).
package devbench

import (
	"context"
	"fmt"
	"strings"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devcomm"
	"github.com/detcoll/detcoll/gpu/devrt"
)

// Available reports why the CUDA backend cannot run here, or nil: it needs
// the CUDA driver with at least one GPU, NVRTC and NCCL (and the CUDA
// runtime, gpu/devrt/cudart, linked into the binary).
func Available() error { return AvailableVendor("cuda") }

// AvailableVendor is Available for vendor "cuda" or "rocm" (the HIP runtime
// with a GPU, hiprtc and RCCL).
func AvailableVendor(vendor string) error {
	rt, err := devrt.Get(vendor)
	if err != nil {
		return err
	}
	return rt.Available()
}

// Versions, keyed by vendor, reports the driver and runtime versions for
// the report (registered by the binary's vendor import sites: the CUDA one
// is gpu/devrt/cudart's Probe — driver and CUDA version —, the ROCm one
// hiprt.Versions — HIP driver and runtime version).
var Versions = map[string]func() (driver, runtime string){}

// Backend is one rank's CUDA benchmark backend.
type Backend struct {
	comm *devcomm.Comm
	own  bool
	info bench.DeviceInfo
}

// New opens the rank's deterministic communicator on GPU LOCAL_RANK
// (devcomm.New) and describes the devices of every rank. Every rank of the
// job calls it.
func New(ctx context.Context, job *cluster.Job) (*Backend, error) {
	return NewVendor(ctx, job, "cuda")
}

// NewVendor is New on vendor "cuda" (NCCL) or "rocm" (RCCL; the backend is
// then named "rocm" and its native baseline is RCCL's own collectives).
func NewVendor(ctx context.Context, job *cluster.Job, vendor string) (*Backend, error) {
	c, err := devcomm.New(ctx, job, devcomm.WithVendor(vendor))
	if err != nil {
		return nil, err
	}
	b, err := NewWithComm(ctx, c, job.Comm)
	if err != nil {
		c.Close()
		return nil, err
	}
	b.own = true
	return b, nil
}

// NewWithComm uses an existing communicator (not closed by Close). host is
// the job's host communicator, used once to collect every rank's GPU name.
func NewWithComm(ctx context.Context, c *devcomm.Comm, host *detcoll.Comm) (*Backend, error) {
	const n = 96
	mine := make([]byte, n)
	copy(mine, c.Device().Name())
	all := make([]byte, n*host.Size())
	if err := host.AllGather(ctx, mine, all, dtype.Byte); err != nil {
		return nil, fmt.Errorf("devbench: collecting GPU names: %w", err)
	}
	names := make([]string, host.Size())
	for p := range names {
		names[p] = strings.TrimRight(string(all[p*n:(p+1)*n]), "\x00")
	}
	return &Backend{comm: c, info: deviceInfo(c.Vendor(), names, c.NCCLVersion())}, nil
}

// deviceInfo is the report's device description: on cuda the NVIDIA driver
// and CUDA versions, on rocm the HIP driver and runtime versions and the
// collective library's name (RCCL); ccl is the collective library's version.
func deviceInfo(vendor string, names []string, ccl string) bench.DeviceInfo {
	info := bench.DeviceInfo{Kind: vendor, Names: names, NCCLVersion: ccl}
	v, ok := Versions[vendor]
	if vendor == "rocm" {
		info.CCL = "RCCL"
		if ok {
			info.DriverVersion, info.HIPVersion = v()
		}
	} else if ok {
		info.DriverVersion, info.CUDAVersion = v()
	}
	return info
}

// ReportExtra describes the peer-memory (CUDA IPC) path of this rank for
// the report's "extra": whether it is on (or why not), the staging memory
// per rank and the communicator's thresholds that set the automatic choice
// of the peer-memory kernels (its own values, WithThresholds included).
func (b *Backend) ReportExtra() map[string]any {
	on, why := b.comm.IPC()
	th := b.comm.Thresholds()
	x := map[string]any{"ipc": on, "ipc_staging_bytes_per_rank": b.comm.IPCStagingBytes(),
		"auto_one_shot_max_bytes": th.OneShotBytes, "auto_ll_max_bytes": th.LLBytes}
	if !on {
		x["ipc_off_because"] = why
	}
	return x
}

// Comm is the communicator under test.
func (b *Backend) Comm() *devcomm.Comm { return b.comm }

// Close closes the communicator if New opened it.
func (b *Backend) Close() error {
	if b.own {
		return b.comm.Close()
	}
	return nil
}

// Baseline names the native columns: "NCCL" or "RCCL" (the symmetric
// column, where there is one, is the same library on registered buffers).
func (b *Backend) Baseline() string {
	if b.comm.Vendor() == "rocm" {
		return "RCCL"
	}
	return "NCCL"
}

// Name is "cuda" (or "rocm", from NewVendor).
func (b *Backend) Name() string { return b.comm.Vendor() }

// Device reports kind "cuda", every rank's GPU name (rank order), the
// NVIDIA driver, the CUDA version the driver supports and the NCCL version
// actually loaded; on kind "rocm" the HIP driver and runtime versions and
// the RCCL version actually loaded.
func (b *Backend) Device() bench.DeviceInfo { return b.info }

// Prepare allocates the input, the deterministic and the native output on
// the device and uploads this rank's input (bench.FillInput).
func (b *Backend) Prepare(ctx context.Context, spec bench.CaseSpec) (bench.Case, error) {
	c := b.comm
	sz := spec.DType.Size()
	switch {
	case !spec.Op.Valid():
		return nil, fmt.Errorf("devbench: unknown operation %q", spec.Op)
	case !spec.DType.Valid():
		return nil, fmt.Errorf("devbench: dtype %v is not reducible", spec.DType)
	case spec.Rank != c.Rank() || spec.WorldSize != c.Size():
		return nil, fmt.Errorf("devbench: case for rank %d of %d on a communicator of rank %d of %d", spec.Rank, spec.WorldSize, c.Rank(), c.Size())
	case spec.InputBytes <= 0 || spec.InputBytes%sz != 0:
		return nil, fmt.Errorf("devbench: input of %d bytes is not a positive whole number of %v elements", spec.InputBytes, spec.DType)
	case spec.Op == bench.ReduceScatter && (spec.InputBytes/sz)%spec.WorldSize != 0:
		return nil, fmt.Errorf("devbench: reduce_scatter input of %d elements does not divide by W = %d", spec.InputBytes/sz, spec.WorldSize)
	}
	k := &gpuCase{c: c, dev: c.Device(), spec: spec, graphs: map[graphKey]gpu.GraphExec{}}
	k.count = spec.InputBytes / sz
	switch spec.Op {
	case bench.ReduceScatter:
		k.count /= spec.WorldSize
	}
	out := spec.OutputBytes()
	var err error
	if k.send, err = c.Alloc(spec.InputBytes); err == nil {
		if k.recv, err = c.Alloc(out); err == nil {
			k.nrecv, err = c.Alloc(out)
		}
	}
	if err == nil {
		err = k.dev.CopyHtoD(k.send.Ptr, bench.Input(spec, spec.Rank))
	}
	if err == nil {
		err = k.dev.Do(func() (err error) {
			if k.start, err = k.dev.Runtime().EventCreate(true); err != nil {
				return err
			}
			k.stop, err = k.dev.Runtime().EventCreate(true)
			return err
		})
	}
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("devbench: preparing %s of %d bytes: %w", spec.Op, spec.InputBytes, err)
	}
	k.host = make([]byte, out)
	k.nhost = make([]byte, out)
	return k, nil
}

// The optional interfaces bench.Run uses.
var (
	_ bench.SymmetricCase = (*gpuCase)(nil)
	_ bench.InPlaceCase   = (*gpuCase)(nil)
	_ bench.Baseliner     = (*Backend)(nil)
)
