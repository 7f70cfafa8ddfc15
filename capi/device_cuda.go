//go:build cgo && !detcoll_nodevice && (cuda || !rocm)

package main

// The CUDA device backend: detcollAllReduce, detcollAllGather and
// detcollReduceScatter on device pointers through package gpu/devcomm
// (NCCL moves the bytes, detcoll's kernels do every addition).
//
// Nothing CUDA is linked at build time: the driver, NCCL and NVRTC are
// opened at run time by the first device call of a communicator. Where they
// cannot be (a machine without a GPU), every device call on that
// communicator returns detcollUnsupported and the last error says which
// library is missing. Build with -tags detcoll_nodevice to leave the
// backend out; a ROCm-only build (-tags rocm) leaves it out too and links no
// CUDA package (docs/rocm.md).
//
// On its first device call, every rank of a communicator creates a
// gpu/devcomm communicator over the same ranks (New: the host communicator
// is split for signature checks, and rank 0 publishes NCCL's unique id in
// the communicator's store under <its prefix>/devcomm). The GPU is, in
// order: $DETCOLL_CUDA_DEVICE (an ordinal); for a communicator of
// detcollCommInitRank, the CUDA device current on the calling thread
// (cuCtxGetDevice), as ncclCommInitRank takes it; else the local rank
// (DETCOLL_LOCAL_RANK, LOCAL_RANK, ... as read by launch.FromEnv; for
// detcollCommInitRank DETCOLL_LOCAL_RANK or LOCAL_RANK, else the rank). For
// a communicator of detcollCommInitFromEnv, a CUDA device current on the
// calling thread that is not LOCAL_RANK's GPU is an error (detcollInvalidUsage
// on every rank): the caller's buffers would be on another GPU.
// The backend uses the device's primary context, the one the CUDA runtime,
// PyTorch and NCCL use. One rank of a communicator per process.
//
// Calls enqueue on the caller's stream (devcomm.OnStream) and return
// without synchronising, as NCCL's do.

/*
#include <stdint.h>

// cuCtxGetDevice through a symbol resolved by internal/dl (CUresult is an
// int enum, CUdevice an int).
typedef int (*detcoll_cuCtxGetDevice_t)(int*);
static int detcoll_cu_ctx_get_device(uintptr_t fn, int* dev) {
	return ((detcoll_cuCtxGetDevice_t)fn)(dev);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/gpu/devcomm"
	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/internal/dl"
	"github.com/detcoll/detcoll/internal/nccl"
	"github.com/detcoll/detcoll/internal/nvrtc"
	"github.com/detcoll/detcoll/launch"
	"github.com/detcoll/detcoll/store"

	// This package is CUDA-only: it links (and registers) the CUDA runtime
	// of gpu/devrt that gpu.Device and devcomm run on.
	_ "github.com/detcoll/detcoll/gpu/devrt/cudart"
)

// envCUDADevice picks the GPU of every communicator of the process.
const envCUDADevice = "DETCOLL_CUDA_DEVICE"

func init() { registerDeviceBackend(cudaBackend{}) }

type cudaBackend struct{}

func (cudaBackend) Name() string { return "cuda" }

// Attach creates the communicator's devcomm.Comm. It is collective: every
// rank calls devcomm.New even when it already knows it will fail, so that
// New tells the other ranks and nobody waits for a rank that gave up.
func (cudaBackend) Attach(c *detcoll.Comm, o *origin) (deviceComm, error) {
	ctx, cancel, _, err := initContext(cgetenv)
	if err != nil {
		return nil, err
	}
	defer cancel()
	job, done, err := deviceJob(c, o)
	if err != nil {
		return nil, err
	}
	prefix, acc := "detcoll/devcomm/inproc", detcoll.AccumulateNative
	if o != nil {
		prefix, acc = o.prefix+"/devcomm", o.acc
	}
	opts := []devcomm.Option{devcomm.WithPrefix(prefix), devcomm.WithDefaultAccumulate(acc)}
	ord, how, perr := pickDevice(cgetenv, o, job.Env)
	switch {
	case perr != nil:
		// Fail New on purpose (no such GPU), so that the peers learn it.
		opts = append(opts, devcomm.WithDevice(math.MaxInt32))
	case ord >= 0:
		opts = append(opts, devcomm.WithDevice(ord))
	}
	nc, err := devcomm.New(ctx, job, opts...)
	if perr != nil {
		if nc != nil {
			nc.Close()
		}
		done()
		return nil, perr
	}
	if err != nil {
		done()
		return nil, attachError(err, how)
	}
	return &cudaComm{nc: nc, done: done}, nil
}

// deviceJob is the cluster.Job that devcomm.New needs, made of the
// communicator and its origin (the store the ranks met in). A communicator
// made in process (tests) has no store; a world of one gets a fresh
// in-memory one. done releases what deviceJob made.
func deviceJob(c *detcoll.Comm, o *origin) (job *cluster.Job, done func() error, err error) {
	if o != nil && o.store != nil {
		return &cluster.Job{Env: o.env, Store: o.store, Comm: c}, func() error { return nil }, nil
	}
	if c.Size() == 1 {
		m := store.NewMemory()
		env := launch.Env{WorldSize: 1, LocalWorldSize: 1, Source: launch.SourceSingle}
		return &cluster.Job{Env: env, Store: m, Comm: c}, m.Close, nil
	}
	return nil, nil, usageError("device collectives need a communicator made by detcollCommInitRank or detcollCommInitFromEnv (this one has no rendezvous store)")
}

// pickDevice chooses the GPU (see the file comment): an ordinal, or -1 for
// devcomm's own choice (the local rank), and how it was chosen, for
// messages. A bad $DETCOLL_CUDA_DEVICE, or a current device that is not
// LOCAL_RANK's GPU, is an error.
func pickDevice(getenv func(string) string, o *origin, env launch.Env) (int, string, error) {
	if v := strings.TrimSpace(getenv(envCUDADevice)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, "", usageError("%s=%q is not a CUDA device ordinal", envCUDADevice, v)
		}
		return n, fmt.Sprintf("GPU %d from %s", n, envCUDADevice), nil
	}
	cur, haveCur := currentCUDADevice()
	if o != nil && o.uid && haveCur {
		return cur, fmt.Sprintf("GPU %d, current on the calling thread", cur), nil
	}
	ord, how := localDevice(env)
	if haveCur && ord >= 0 && cur != ord {
		return 0, "", usageError("the calling thread's current CUDA device is %d, but this rank's GPU is %d (%s): "+
			"the buffers would be on another GPU; make the local rank's GPU current (torch.cuda.set_device(LOCAL_RANK), cudaSetDevice) "+
			"or set %s=%d", cur, ord, how, envCUDADevice, cur)
	}
	return ord, how, nil
}

// localDevice is devcomm's default choice for env's local rank: that
// ordinal, or 0 when a single GPU is visible (CUDA_VISIBLE_DEVICES per
// rank); -1 when neither applies (devcomm then reports it).
func localDevice(env launch.Env) (int, string) {
	how := fmt.Sprintf("local rank %d", env.LocalRank)
	n, err := cuda.DeviceCount()
	switch {
	case err != nil:
		return -1, how
	case env.LocalRank < n:
		return env.LocalRank, how
	case n == 1:
		return 0, how + ", the only visible GPU"
	}
	return -1, how
}

var cuCtxGetDevice struct {
	once sync.Once
	fn   dl.Symbol
}

// currentCUDADevice is the device of the CUDA context current on the
// calling OS thread (device collectives run on their C caller's thread),
// false when there is none or no driver.
func currentCUDADevice() (int, bool) {
	if cuda.Available() != nil {
		return 0, false
	}
	cuCtxGetDevice.once.Do(func() {
		// The driver is loaded already: this only takes another reference.
		l, err := dl.Open(cuda.LibraryEnv, cuda.LibraryNames...)
		if err != nil {
			return
		}
		if p, err := l.Sym("cuCtxGetDevice"); err == nil {
			cuCtxGetDevice.fn = p
		}
	})
	if cuCtxGetDevice.fn == 0 {
		return 0, false
	}
	var d C.int
	if C.detcoll_cu_ctx_get_device(C.uintptr_t(cuCtxGetDevice.fn), &d) != 0 {
		return 0, false // CUDA_ERROR_INVALID_CONTEXT: none current
	}
	return int(d), true
}

// attachError classifies a failed devcomm.New: a missing run-time library
// is detcollUnsupported.
func attachError(err error, how string) error {
	const host = "; for host memory use the detcollHost* calls"
	if cerr := cuda.Available(); cerr != nil {
		return coded(rcUnsupported, "this libdetcoll.so's CUDA device backend needs the CUDA driver (libcuda.so.1, or $%s), which cannot be used here: %v%s",
			cuda.LibraryEnv, cerr, host)
	}
	if errors.Is(err, nccl.ErrUnavailable) {
		return coded(rcUnsupported, "this libdetcoll.so's CUDA device backend needs NCCL (libnccl.so.2, or $%s), which cannot be loaded: %v%s", nccl.NCCLEnv, err, host)
	}
	if errors.Is(err, nvrtc.ErrUnavailable) {
		return coded(rcUnsupported, "this libdetcoll.so's CUDA device backend needs NVRTC (or $%s), which cannot be loaded: %v%s", nvrtc.LibraryEnv, err, host)
	}
	if how != "" {
		how = " (" + how + ")"
	}
	return fmt.Errorf("CUDA device backend: joining the device communicator%s: %w", how, deviceError(err))
}

// cudaComm is one communicator's device state.
type cudaComm struct {
	nc   *devcomm.Comm
	done func() error
}

func devBuf(p uintptr, n int) devcomm.Buffer {
	return devcomm.Buffer{Ptr: devcomm.DevicePtr(p), Bytes: n}
}

func (d *cudaComm) AllReduce(send, recv uintptr, count int, dt detcoll.DType, stream uintptr) error {
	n := count * dt.Size()
	return deviceError(d.nc.AllReduce(context.Background(), devBuf(send, n), devBuf(recv, n), count, dt,
		devcomm.OnStream(devcomm.Stream(stream))))
}

func (d *cudaComm) AllGather(send, recv uintptr, sendcount int, dt detcoll.DType, stream uintptr) error {
	n := sendcount * dt.Size()
	return deviceError(d.nc.AllGather(context.Background(), devBuf(send, n), devBuf(recv, n*d.nc.Size()), sendcount, dt,
		devcomm.OnStream(devcomm.Stream(stream))))
}

func (d *cudaComm) ReduceScatter(send, recv uintptr, recvcount int, dt detcoll.DType, stream uintptr) error {
	n := recvcount * dt.Size()
	return deviceError(d.nc.ReduceScatter(context.Background(), devBuf(send, n*d.nc.Size()), devBuf(recv, n), recvcount, dt,
		devcomm.OnStream(devcomm.Stream(stream))))
}

func (d *cudaComm) Close() error {
	return errors.Join(d.nc.Close(), d.done())
}

// Abort is devcomm's Abort: safe from any thread, it unblocks the device
// communicator's waits (detcollCommAbort).
func (d *cudaComm) Abort() error { return d.nc.Abort() }

// cudaError marks a failure of the CUDA driver or NCCL as
// detcollUnhandledDeviceError, keeping its message and chain.
type cudaError struct{ err error }

func (e cudaError) Error() string   { return e.err.Error() }
func (e cudaError) Unwrap() []error { return []error{errDevice, e.err} }

// deviceError classifies an error of devcomm: argument errors, mismatches
// and closed communicators keep their class; CUDA and NCCL failures (also
// when they poisoned the communicator earlier) are device errors; the rest
// (the host communicator's) keep theirs.
func deviceError(err error) error {
	if err == nil {
		return nil
	}
	var ce *cuda.Error
	var ne *nccl.Error
	switch {
	case errors.Is(err, detcoll.ErrInvalidArgument), errors.Is(err, detcoll.ErrMismatch), errors.Is(err, detcoll.ErrClosed):
		return err
	case errors.As(err, &ce), errors.As(err, &ne):
		return cudaError{err}
	}
	return err
}
