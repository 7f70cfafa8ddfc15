//go:build cgo

package main

import (
	"sync"

	"github.com/detcoll/detcoll"
)

// deviceBackend runs collectives on device (CUDA/HIP) pointers. The GPU
// backend registers one from an init function of a file of this package
// (typically behind a build tag), with registerDeviceBackend.
type deviceBackend interface {
	// Name describes the backend in messages ("cuda", "rocm").
	Name() string
	// Attach prepares comm for device collectives. It runs on every rank
	// during that rank's first device collective on comm, on the thread of
	// the C caller, so all ranks attach together, in call order, and it may
	// communicate over comm (e.g. to exchange an NCCL unique id or IPC
	// handles) and over o's store. o is how comm was made (nil for
	// communicators made in process, by tests). A failed attach is
	// returned by every later device call on comm.
	Attach(comm *detcoll.Comm, o *origin) (deviceComm, error)
}

// deviceComm is one communicator's device state. Buffers are device
// addresses, as integers (cuda.DevicePtr): Go never holds them in pointer
// types. Counts and dtypes are as in request: count elements of dt, where an
// AllGather of a type detcoll only moves arrives as detcoll.Byte with count
// in bytes. stream is the caller's cudaStream_t/hipStream_t (0: the legacy
// default stream), also as an integer (cuda.Stream); calls enqueue
// work on it and may return before it completes, like NCCL. Errors of the
// device runtime should wrap errDevice (detcollUnhandledDeviceError);
// argument errors detcoll.ErrInvalidArgument; errors of the detcoll
// communicator are classified as for host collectives.
type deviceComm interface {
	AllReduce(send, recv uintptr, count int, dt detcoll.DType, stream uintptr) error
	AllGather(send, recv uintptr, sendcount int, dt detcoll.DType, stream uintptr) error
	ReduceScatter(send, recv uintptr, recvcount int, dt detcoll.DType, stream uintptr) error
	// Close releases the device state; it runs before the communicator is
	// closed, on detcollCommDestroy and detcollCommAbort.
	Close() error
	// Abort stops the device work at once (ncclCommAbort, the peer-memory
	// kernels' abort word) from any thread, so a Close after it cannot wait
	// on a peer that is gone.
	Abort() error
}

var devBackend struct {
	sync.Mutex
	b deviceBackend
}

// registerDeviceBackend installs the device backend (the last one wins).
func registerDeviceBackend(b deviceBackend) {
	devBackend.Lock()
	devBackend.b = b
	devBackend.Unlock()
}

func currentDeviceBackend() deviceBackend {
	devBackend.Lock()
	defer devBackend.Unlock()
	return devBackend.b
}

// device returns the communicator's device state, attaching on first use.
func (e *commEntry) device(b deviceBackend) (deviceComm, error) {
	e.devMu.Lock()
	defer e.devMu.Unlock()
	if e.dev == nil && e.devErr == nil {
		e.dev, e.devErr = b.Attach(e.comm, e.origin)
	}
	return e.dev, e.devErr
}

// deviceCollective is detcoll{AllReduce,AllGather,ReduceScatter}.
func deviceCollective(name string, o op, send, recv uintptr, count uint64, dtc int32, h uintptr, stream uintptr) result {
	return guarded(name, h, func() error {
		e, err := lookup(h)
		if err != nil {
			return err
		}
		r, err := check(o, send != 0, recv != 0, count, dtc, e.comm.Size())
		if err != nil {
			return err
		}
		b := currentDeviceBackend()
		if b == nil {
			return coded(rcUnsupported, "device (CUDA/HIP) buffers need a device backend, and this libdetcoll.so has none; "+
				"for host memory call detcollHost%s", o)
		}
		dc, err := e.device(b)
		if err != nil {
			return err
		}
		switch o {
		case opAllReduce:
			return dc.AllReduce(send, recv, r.count, r.dt, stream)
		case opAllGather:
			return dc.AllGather(send, recv, r.count, r.dt, stream)
		default:
			return dc.ReduceScatter(send, recv, r.count, r.dt, stream)
		}
	})
}
