package devcomm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/internal/agree"
	"github.com/detcoll/detcoll/internal/ccl"
)

// The communicator's state, its accessors, the workspace and the frame of
// every collective. New and Close are in lifecycle.go, the options in
// options.go, the algorithm choice in choose.go, the NCCL-transport
// algorithms in ccl_*.go, the peer-memory path in ipc_*.go, the bounded
// waits in wait.go and the communicator's use of the agreement primitive
// (internal/agree) in agree.go.

// DevicePtr is a device address (a CUdeviceptr or hipDeviceptr_t;
// cuda.DevicePtr and hip.DevicePtr are this type).
type DevicePtr = devrt.Ptr

// Stream is a stream handle of the communicator's runtime (a CUstream or
// cudaStream_t; a hipStream_t on ROCm); 0 is the legacy default stream.
type Stream = devrt.Stream

// Buffer is device memory lent to a collective: its address and the number
// of bytes the caller vouches for. Calls check their counts against Bytes.
type Buffer struct {
	Ptr   DevicePtr
	Bytes int
}

// Slice is the part [off, off+n) of b (no bounds check beyond b's own:
// an out-of-range slice is caught by the collective that uses it).
func (b Buffer) Slice(off, n int) Buffer { return Buffer{Ptr: b.Ptr.Add(off), Bytes: n} }

// ErrCaptureGrowth is returned (wrapped) when a collective issued on a
// capturing stream would have to grow the workspace: run it once outside
// the capture, or call Reserve, first. Nothing is enqueued and the capture
// stays valid.
var ErrCaptureGrowth = errors.New("the workspace would have to grow during a CUDA graph capture")

// Comm is one rank's deterministic device-memory communicator. See the
// package doc for the contract.
//
// Locks: mu serialises the calls and guards everything below it. abortMu
// is never held across a wait; it guards the NCCL handle and the
// peer-memory state against Abort, which may come from another goroutine
// while a call holds mu (blocked in NCCL). nc and ipc are written with both
// held and read with either.
type Comm struct {
	rt     devrt.Runtime
	dev    *gpu.Device
	k      *gpu.ReduceKernels
	fast   *fastKernels  // nil: generic kernels only
	lib    *ccl.Lib      // NCCL or RCCL
	host   *detcoll.Comm // split off the job's communicator: signature checks and IPC set-up only
	rank   int
	size   int
	stream Stream // own, non-blocking
	side   Stream // own, non-blocking: the reduces of pipelined algorithms
	joinEv devrt.Event
	evT    devrt.Event // pipeline: a chunk has arrived
	evR    devrt.Event // pipeline: every chunk is reduced
	cfg    config

	abortMu sync.Mutex
	aborted atomic.Bool
	nc      *ccl.Comm // NCCL or RCCL; nil once aborted by a failure
	ipc     *ipcState // nil: no peer-memory path (see ipcWhy)

	mu         sync.Mutex
	closed     bool
	poison     error
	agree      *agree.Agreement // call numbers and agreed signatures (agree.go)
	ws         DevicePtr
	wsBytes    int
	retired    []DevicePtr // old workspaces a captured graph may still use
	retiredB   int
	peak       int
	captured   bool
	lastStream Stream
	lastCapt   bool
	haveLast   bool
	stats      Stats
	ptrs       []DevicePtr // scratch: reduce input lists
	ipcWhy     string
	call       agree.Call // the call being enqueued (its number and hash go into the peer-memory flags)

	// asyncErrHook, when set (tests), stands in for ncclCommGetAsyncError.
	asyncErrHook func() error
}

// Stats are a communicator's counters.
type Stats struct {
	Collectives        int64 // collectives enqueued
	Captured           int64 // of which enqueued into a CUDA graph capture
	SignatureExchanges int64 // first sightings compared across ranks
	WorkspaceBytes     int   // device workspace retained now (retired buffers included)
	WorkspacePeakBytes int   // most workspace ever retained at once
	// LeakedBytes is device memory Close left allocated on purpose: the
	// staging buffer when the close handshake failed (a peer's kernel may
	// still write into it) and the workspace when the stream did not
	// drain within the wait bound. Freed by the process's exit.
	LeakedBytes int
}

// Rank is this rank's index.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks W.
func (c *Comm) Size() int { return c.size }

// Device is the GPU this rank drives (for allocation, copies and graph
// capture; do not close it: Close does).
func (c *Comm) Device() *gpu.Device { return c.dev }

// Stream is the communicator's own non-blocking stream, the default stream
// of every collective.
func (c *Comm) Stream() Stream { return c.stream }

// CCL is the underlying NCCL or RCCL communicator (for native baselines;
// issue nothing on it that other ranks do not issue in the same order).
// nccl.WrapComm and rccl.WrapComm give it the vendor's typed face.
func (c *Comm) CCL() *ccl.Comm {
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	return c.nc
}

// Vendor is "cuda" (NCCL) or "rocm" (RCCL).
func (c *Comm) Vendor() string { return c.rt.Vendor() }

// NCCLVersion is the version of the NCCL (or RCCL) library actually loaded.
func (c *Comm) NCCLVersion() string {
	v, err := c.lib.Version()
	if err != nil {
		return ""
	}
	return v.String()
}

// Gather is how the reductions gather (see WithGather).
func (c *Comm) Gather() Gather { return c.cfg.gather }

// Thresholds are the communicator's thresholds (see WithThresholds).
func (c *Comm) Thresholds() Thresholds { return c.cfg.th }

// Stats returns the counters.
func (c *Comm) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Err returns the error that poisoned the communicator, or nil.
func (c *Comm) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.poison
}

// Alloc allocates device memory on this rank's GPU as a Buffer; free it with
// Free before Close.
func (c *Comm) Alloc(bytes int) (Buffer, error) {
	p, err := c.dev.Alloc(bytes)
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{Ptr: p, Bytes: bytes}, nil
}

// Free frees a Buffer from Alloc.
func (c *Comm) Free(b Buffer) error { return c.dev.Free(b.Ptr) }

// Reserve grows the workspace to at least n bytes now (so that no later
// call, nor a capture, has to). It may synchronise the last stream used.
func (c *Comm) Reserve(n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable("Reserve"); err != nil {
		return err
	}
	return c.dev.Do(func() error {
		_, err := c.workspace(n, false)
		return err
	})
}

// ReleaseWorkspace synchronises the last stream used and frees the
// workspace, retired buffers included (the peak is kept in Stats). Graphs
// that captured collectives of this communicator must not be launched
// afterwards.
func (c *Comm) ReleaseWorkspace() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	return c.dev.Do(func() error {
		var errs []error
		if c.haveLast {
			errs = append(errs, c.rt.StreamSynchronize(c.lastStream))
		}
		errs = append(errs, c.freeWorkspace())
		c.peak = 0
		return errors.Join(errs...)
	})
}

// freeWorkspace frees the workspace and the retired buffers. Called with
// c.mu held, inside c.dev.Do, once nothing can use them.
func (c *Comm) freeWorkspace() error {
	errs := []error{c.rt.MemFree(c.ws)}
	for _, p := range c.retired {
		errs = append(errs, c.rt.MemFree(p))
	}
	c.ws, c.wsBytes, c.retired, c.retiredB = 0, 0, nil, 0
	c.stats.WorkspaceBytes = 0
	return errors.Join(errs...)
}

// ReleaseStream tells the communicator that s (a stream passed with
// OnStream) is about to be destroyed. The next call on another stream waits
// for the last one used, so a stream must stay alive until then, or be
// released here: this waits on the host for s if it was the last stream
// used and forgets it.
func (c *Comm) ReleaseStream(s Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !c.haveLast || c.lastStream != s || s == c.stream {
		return nil
	}
	c.haveLast = false
	if c.lastCapt {
		return nil
	}
	return c.dev.Synchronize(s)
}

// LaunchGraph launches a graph that captured collectives of this
// communicator on s, ordered like a collective: after the previous call
// (or launch) of the communicator on another stream, and before the next
// one (events, no host synchronisation). Graphs of peer-memory collectives
// share the staging buffer and its sequence counter with the eager calls,
// so launch them here (or order them with the communicator's calls
// yourself: same stream, or events); a replay that overlaps an eager
// peer-memory call pairs the wrong data.
func (c *Comm) LaunchGraph(g gpu.GraphExec, s Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	const op = "LaunchGraph"
	if err := c.usable(op); err != nil {
		return err
	}
	err := c.dev.Do(func() error {
		if err := c.joinLast(s); err != nil {
			return err
		}
		return c.rt.GraphLaunch(devrt.GraphExec(g), s)
	})
	if err != nil {
		return c.fail(op, err)
	}
	c.lastStream, c.lastCapt, c.haveLast = s, false, true
	return nil
}

// joinLast makes s wait for the last stream used (an event) when they
// differ and neither is being captured. Called with c.mu held, inside
// c.dev.Do.
func (c *Comm) joinLast(s Stream) error {
	if !c.haveLast || c.lastStream == s || c.lastCapt {
		return nil
	}
	if err := c.rt.EventRecord(c.joinEv, c.lastStream); err != nil {
		return err
	}
	return c.rt.StreamWaitEvent(s, c.joinEv)
}

// PeakSinceRelease is the most workspace retained at once since the last
// ReleaseWorkspace (or since New).
func (c *Comm) PeakSinceRelease() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}

func (c *Comm) errClosed(op string) error {
	return &detcoll.Error{Op: op, Rank: c.rank, Peer: -1, Err: detcoll.ErrClosed}
}

// usable checks state; called with c.mu held.
func (c *Comm) usable(op string) error {
	if c.closed {
		return c.errClosed(op)
	}
	if c.poison == nil && c.aborted.Load() {
		c.poison = &detcoll.Error{Op: "Abort", Rank: c.rank, Peer: -1, Err: ErrAborted}
	}
	if c.poison != nil {
		return &detcoll.Error{Op: op, Rank: c.rank, Peer: -1, Err: fmt.Errorf("%w: %w", detcoll.ErrPoisoned, c.poison)}
	}
	return nil
}

// fail poisons the communicator and aborts NCCL. A mismatch names its
// peer (the lowest rank whose call differs), as the host Comm's does.
// Called with c.mu held.
func (c *Comm) fail(op string, err error) error {
	peer := -1
	var me *agree.MismatchError
	if errors.As(err, &me) && len(me.Peers) > 0 {
		peer = me.Peers[0].Rank
	}
	e := &detcoll.Error{Op: op, Rank: c.rank, Peer: peer, Err: err}
	if c.poison == nil {
		c.poison = e
		c.abortMu.Lock()
		if c.nc != nil {
			_ = c.dev.Do(func() error { return c.nc.Abort() })
			c.nc = nil
		}
		c.abortMu.Unlock()
	}
	return e
}

// workspace returns at least n bytes of workspace, growing it if needed.
// Called with c.mu held, inside c.dev.Do.
func (c *Comm) workspace(n int, capturing bool) (DevicePtr, error) {
	if n <= c.wsBytes {
		return c.ws, nil
	}
	if capturing {
		return 0, fmt.Errorf("%w: %w (need %d bytes, %d retained): run the collective once outside the capture or call Reserve first",
			detcoll.ErrInvalidArgument, ErrCaptureGrowth, n, c.wsBytes)
	}
	// Grow by at least a quarter so that a sweep of sizes does not
	// reallocate every time (retained ≤ 1.25 × the largest need).
	sz := n
	if c.wsBytes > 0 && sz < c.wsBytes+c.wsBytes/4 {
		sz = c.wsBytes + c.wsBytes/4
	}
	sz = (sz + 255) &^ 255
	if c.ws != 0 {
		if err := c.retireWorkspace(); err != nil {
			return 0, err
		}
	}
	p, err := c.rt.MemAlloc(sz)
	if err != nil {
		c.stats.WorkspaceBytes = c.retiredB
		return 0, err
	}
	c.ws, c.wsBytes = p, sz
	c.stats.WorkspaceBytes = sz + c.retiredB
	c.stats.WorkspacePeakBytes = max(c.stats.WorkspacePeakBytes, c.stats.WorkspaceBytes)
	c.peak = max(c.peak, c.stats.WorkspaceBytes)
	return p, nil
}

// retireWorkspace drops the current workspace before a larger one is made:
// kept alive when a graph may still use it, else freed once the last
// stream is done with it.
func (c *Comm) retireWorkspace() error {
	if c.captured {
		c.retired = append(c.retired, c.ws)
		c.retiredB += c.wsBytes
	} else {
		if c.haveLast {
			if err := c.rt.StreamSynchronize(c.lastStream); err != nil {
				return err
			}
		}
		if err := c.rt.MemFree(c.ws); err != nil {
			return err
		}
	}
	c.ws, c.wsBytes = 0, 0
	return nil
}

func (c *Comm) ptrList() []DevicePtr {
	if cap(c.ptrs) < c.size {
		c.ptrs = make([]DevicePtr, c.size)
	}
	return c.ptrs[:c.size]
}

// call describes one collective for run: its operation, the options and
// the size the automatic choice looks at, the argument checks (which must
// enqueue nothing and return the call's signature) and the body that
// enqueues it.
type call struct {
	name  string
	op    collOp
	opts  []CallOption
	bytes int
	check func(cc callConfig) (signature, error)
	body  func(cc callConfig, s Stream, capturing bool) error
}

// run is the frame of every collective, under the lock: state checks, the
// algorithm choice, the argument checks, the cross-rank signature check on
// first sight, then the body on a locked thread with the context current,
// after joining the previous call's stream when it differs.
//
// A collective that uses no workspace (AllGather over NCCL) neither asks
// whether the stream is capturing nor joins streams: it is ordered by NCCL
// alone.
func (c *Comm) run(ctx context.Context, k call) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(k.name); err != nil {
		return err
	}
	if err := c.ipcCheck(k.name); err != nil {
		return err
	}
	cc := c.cfg.callOptions(c.stream, k.opts)
	cc.alg = choose(k.op, cc.alg, k.bytes, c.size, c.ipc != nil, c.cfg.th)
	sig, err := k.check(cc)
	if err != nil {
		return &detcoll.Error{Op: k.name, Rank: c.rank, Peer: -1, Err: err}
	}
	if ctx != nil && ctx.Err() != nil { // refused before it is numbered
		return &detcoll.Error{Op: k.name, Rank: c.rank, Peer: -1, Err: ctx.Err()}
	}
	rec := sig.record()
	if c.call, err = c.agreeOn(ctx, &rec); err != nil {
		return c.fail(k.name, err)
	}
	ipc := c.ipc != nil && (cc.alg == detcoll.OneShot || cc.alg == detcoll.TwoShot)
	// The enqueue itself can block (ncclGroupEnd connects to peers
	// lazily, and waits for a dead one): when ctx ends first, Abort
	// unblocks it and the call fails, poisoning the communicator.
	if ctx != nil && ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { _ = c.Abort() })
		defer stop()
	}
	if !k.op.gathers() || ipc {
		return c.enqueueOrdered(k, cc)
	}
	if err := c.dev.Do(func() error { return k.body(cc, cc.stream, false) }); err != nil {
		return c.fail(k.name, err)
	}
	c.stats.Collectives++
	return nil
}

// enqueueOrdered runs the body of a call that shares the workspace or the
// staging buffer with the previous one: it joins the previous call's
// stream (an event) unless either is being captured. Called with c.mu held.
func (c *Comm) enqueueOrdered(k call, cc callConfig) error {
	s := cc.stream
	var capturing bool
	err := c.dev.Do(func() error {
		var err error
		if capturing, err = c.rt.StreamCapturing(s); err != nil {
			return err
		}
		if !capturing {
			if err := c.joinLast(s); err != nil {
				return err
			}
		}
		return k.body(cc, s, capturing)
	})
	if err != nil {
		if errors.Is(err, detcoll.ErrInvalidArgument) {
			return &detcoll.Error{Op: k.name, Rank: c.rank, Peer: -1, Err: err}
		}
		return c.fail(k.name, err)
	}
	c.lastStream, c.lastCapt, c.haveLast = s, capturing, true
	if capturing {
		c.captured = true
		c.stats.Captured++
	}
	c.stats.Collectives++
	return nil
}

// driverName names the runtime's driver in messages ("CUDA driver").
func driverName(rt devrt.Runtime) string {
	if rt.Vendor() == "rocm" {
		return "HIP runtime"
	}
	return "CUDA driver"
}
