package devcomm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/internal/ccl"
)

// New, Close and Abort: how a communicator comes to be and ends.

// generation numbers the communicators created per prefix in this process.
var (
	genMu sync.Mutex
	gens  = map[string]int{}
)

func nextGen(prefix string) int {
	genMu.Lock()
	defer genMu.Unlock()
	gens[prefix]++
	return gens[prefix]
}

// New joins this rank of job to a new NCCL communicator on GPU LOCAL_RANK
// and returns the deterministic communicator over it. Every rank of the job
// calls New, in the same order relative to other New calls. ctx bounds the
// rendezvous. The job (its store and host communicator) must outlive the
// Comm.
func New(ctx context.Context, job *cluster.Job, opts ...Option) (*Comm, error) {
	if job == nil || job.Comm == nil || job.Store == nil {
		return nil, fmt.Errorf("devcomm: New: %w: the job has no communicator or store", detcoll.ErrInvalidArgument)
	}
	cfg, err := defaultConfig()
	if err == nil {
		for _, o := range opts {
			o(&cfg)
		}
		err = cfg.check()
	}
	if err != nil {
		return nil, fmt.Errorf("devcomm: New: %w: %v", detcoll.ErrInvalidArgument, err)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.initTO)
		defer cancel()
	}
	keepNVLSOff()
	rank, size := job.Comm.Rank(), job.Comm.Size()
	gen := nextGen(cfg.prefix)

	// Everything that can fail locally is tried first; then every rank
	// reports, so that no rank waits in NCCL for a rank that gave up.
	c := &Comm{rank: rank, size: size, cfg: cfg}
	var lerr error
	if c.rt, lerr = devrt.Get(cfg.vendor); lerr != nil {
		lerr = fmt.Errorf("devcomm: %w", lerr)
	} else {
		lerr = c.openLocal(job.Env.LocalRank, job.Env.LocalWorldSize)
	}
	host, err := job.Comm.Split(ctx, 0, rank)
	if err != nil {
		c.closeLocal()
		return nil, fmt.Errorf("devcomm: New: splitting the host communicator: %w", err)
	}
	c.host = host
	c.agree = newAgreement()
	if err := c.agreeDevices(ctx, lerr); err != nil {
		c.closeLocal()
		return nil, err
	}
	if err := c.initCCL(ctx, job, fmt.Sprintf("%s/%d/nccl-unique-id", cfg.prefix, gen)); err != nil {
		c.closeLocal()
		return nil, err
	}
	if err := c.setupIPC(ctx); err != nil {
		c.closeLocal()
		return nil, err
	}
	return c, nil
}

// keepNVLSOff sets NCCL_NVLS_ENABLE=0 when it is unset: NVLink multicast can
// take a shared host's GPUs out of service.
func keepNVLSOff() {
	if _, ok := os.LookupEnv("NCCL_NVLS_ENABLE"); !ok {
		os.Setenv("NCCL_NVLS_ENABLE", "0")
	}
}

// initCCL makes the NCCL communicator: rank 0 publishes the unique id at
// key, every rank reads it and joins; rank 0 deletes the key once every
// rank is past the join.
func (c *Comm) initCCL(ctx context.Context, job *cluster.Job, key string) error {
	id, err := c.uniqueID(ctx, job, key)
	if err != nil {
		return err
	}
	err = c.dev.Do(func() (err error) {
		c.nc, err = c.lib.CommInitRank(c.size, id, c.rank)
		return err
	})
	if err != nil {
		return fmt.Errorf("devcomm: New: ncclCommInitRank on GPU %d (rank %d of %d): %w", c.dev.Ordinal(), c.rank, c.size, err)
	}
	if c.rank == 0 {
		// Every rank has read the id once all ranks are past init.
		if err := c.host.Barrier(ctx); err == nil {
			_, _ = job.Store.Delete(ctx, key)
		}
	} else {
		_ = c.host.Barrier(ctx)
	}
	return nil
}

// uniqueID is the NCCL unique id of this communicator: made and published
// by rank 0, read from the store by the others.
func (c *Comm) uniqueID(ctx context.Context, job *cluster.Job, key string) (ccl.UniqueID, error) {
	var id ccl.UniqueID
	if c.rank == 0 {
		var err error
		if id, err = c.lib.GetUniqueID(); err == nil {
			err = job.Store.Set(ctx, key, id[:])
		}
		if err != nil {
			// Publish an empty id so that the other ranks fail too.
			_ = job.Store.Set(ctx, key, nil)
			return id, fmt.Errorf("devcomm: New: rank 0 making the NCCL id: %w", err)
		}
		return id, nil
	}
	v, err := job.Store.Get(ctx, key)
	if err == nil && len(v) != len(id) {
		err = fmt.Errorf("rank 0 published no id (it failed)")
	}
	if err != nil {
		return id, fmt.Errorf("devcomm: New: rank %d reading the NCCL id at %q: %w", c.rank, key, err)
	}
	copy(id[:], v)
	return id, nil
}

// openLocal loads NCCL, opens the device, compiles the kernels and creates
// the stream and event. On error c holds what was opened (closeLocal frees it).
func (c *Comm) openLocal(localRank, localWorld int) error {
	lib, err := c.rt.CCL()
	if err != nil {
		return fmt.Errorf("devcomm: no %s: %w", c.rt.CCLName(), err)
	}
	c.lib = lib
	if err := c.rt.DriverAvailable(); err != nil {
		return fmt.Errorf("devcomm: no %s: %w", driverName(c.rt), err)
	}
	ord, err := c.ordinal(localRank, localWorld)
	if err != nil {
		return err
	}
	if c.dev, err = gpu.OpenWith(c.rt, ord); err != nil {
		return err
	}
	if c.k, err = c.dev.Kernels(); err != nil {
		return err
	}
	if c.fast, err = loadFast(c.dev); err != nil {
		return err
	}
	if c.stream, err = c.dev.NewStream(); err != nil {
		return err
	}
	if c.side, err = c.dev.NewStream(); err != nil {
		return err
	}
	return c.dev.Do(func() (err error) {
		for _, e := range []*devrt.Event{&c.joinEv, &c.evT, &c.evR} {
			if *e, err = c.rt.EventCreate(false); err != nil {
				return err
			}
		}
		return nil
	})
}

// ordinal is the GPU this rank drives: WithDevice, else its local rank, else
// the only visible GPU.
func (c *Comm) ordinal(localRank, localWorld int) (int, error) {
	if c.cfg.device >= 0 {
		return c.cfg.device, nil
	}
	n, err := c.rt.DeviceCount()
	switch {
	case err != nil:
		return 0, err
	case n == 0:
		return 0, fmt.Errorf("devcomm: the %s sees no GPU", driverName(c.rt))
	case localRank < n:
		return localRank, nil
	case n == 1:
		return 0, nil // one visible GPU per process (CUDA_VISIBLE_DEVICES per rank)
	}
	return 0, fmt.Errorf("devcomm: local rank %d of %d has no GPU of its own: %d visible, and NCCL refuses two ranks on one GPU", localRank, localWorld, n)
}

// agreeDevices tells every rank whether some rank failed to open its GPU and
// whether two ranks of one host share a GPU (NCCL would refuse).
func (c *Comm) agreeDevices(ctx context.Context, lerr error) error {
	const n = 128
	mine := make([]byte, n)
	if lerr != nil {
		mine[0] = 1
	} else {
		host, _ := os.Hostname()
		id := c.dev.Name()
		if u, err := c.dev.UUID(); err == nil {
			id = fmt.Sprintf("%x", u)
		} else if b, err := c.dev.PCIBusID(); err == nil {
			id = b
		}
		copy(mine[1:], host+"\x00"+id)
	}
	all := make([]byte, n*c.size)
	if err := c.host.AllGather(ctx, mine, all, dtype.Byte); err != nil {
		if lerr != nil {
			return lerr
		}
		return fmt.Errorf("devcomm: New: comparing devices: %w", err)
	}
	if lerr != nil {
		return lerr
	}
	for p := 0; p < c.size; p++ {
		m := all[p*n : (p+1)*n]
		if m[0] != 0 {
			return fmt.Errorf("devcomm: New: rank %d could not open its GPU", p)
		}
		if p != c.rank && bytes.Equal(m, mine) {
			return fmt.Errorf("devcomm: New: ranks %d and %d would share GPU %d of one host (NCCL refuses two ranks on one GPU): give every rank its own GPU (LOCAL_RANK or CUDA_VISIBLE_DEVICES)", min(p, c.rank), max(p, c.rank), c.dev.Ordinal())
		}
	}
	return nil
}

// closeLocal frees what a failed New made (nothing was enqueued yet).
func (c *Comm) closeLocal() {
	if c.ipc != nil {
		c.dev.Do(func() error { return c.ipc.free() })
		c.ipc = nil
	}
	if c.dev == nil {
		if c.host != nil {
			c.host.Close()
		}
		return
	}
	_ = c.dev.Do(func() error {
		if c.nc != nil {
			_ = c.nc.Abort()
		}
		_ = c.rt.EventDestroy(c.joinEv)
		_ = c.rt.EventDestroy(c.evT)
		_ = c.rt.EventDestroy(c.evR)
		if c.stream != 0 {
			_ = c.rt.StreamDestroy(c.stream)
		}
		if c.side != 0 {
			_ = c.rt.StreamDestroy(c.side)
		}
		return nil
	})
	_ = c.fast.unload()
	if c.host != nil {
		c.host.Close()
	}
	c.dev.Close()
}

// ErrAborted is the cause (wrapped) of the errors of a communicator that
// Abort ended.
var ErrAborted = errors.New("communicator aborted")

// Abort ends the communicator's device work without waiting: it makes
// every peer-memory kernel of this rank give up, aborts the NCCL
// communicator (ncclCommAbort: NCCL's kernels and a call blocked in NCCL
// return) and poisons the communicator, so that every call, including one
// blocked in another goroutine and a running Synchronize, returns an error
// wrapping ErrAborted or detcoll.ErrPoisoned. Safe to call from any
// goroutine at any time, also while another call holds the communicator;
// Close is still needed to free the rest.
func (c *Comm) Abort() error {
	c.aborted.Store(true)
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	c.ipc.abort()
	if c.nc == nil || c.dev == nil {
		return nil
	}
	// c.nc stays set (a call under c.mu may be reading it); ccl.Comm.Abort
	// makes every later NCCL call on it fail.
	return c.dev.Do(func() error { return c.nc.Abort() })
}

// Close waits (bounded by WithWaitTimeout) for the work queued on the
// streams used, destroys the NCCL communicator (aborts it if poisoned),
// frees the workspace, the streams and the events, closes the host
// sub-communicator and the device. Memory a device may still write is not
// freed but leaked and counted in Stats.LeakedBytes: the workspace when
// the streams did not drain in time, the staging buffer when the close
// handshake with the peers failed. It is idempotent; later calls fail with
// detcoll.ErrClosed.
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.poison != nil || c.aborted.Load() {
		c.ipc.abort() // no kernel of ours may keep waiting for a peer
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.waitTO)
	defer cancel()
	var errs []error
	drained := c.drain(ctx)
	if drained != nil {
		errs = append(errs, fmt.Errorf("devcomm: Close: %w", drained))
	}
	errs = append(errs, c.closeIPC(drained == nil))
	errs = append(errs, c.closeDevice(drained == nil))
	errs = append(errs, c.fast.unload())
	if c.host != nil {
		errs = append(errs, c.host.Close())
	}
	errs = append(errs, c.dev.Close())
	return errors.Join(errs...)
}

// drain waits, bounded by ctx, for the streams the communicator used. On
// timeout the communicator is aborted and poisoned. Called with c.mu held.
func (c *Comm) drain(ctx context.Context) error {
	streams := []Stream{c.stream, c.side}
	if c.haveLast && !c.lastCapt && c.lastStream != c.stream {
		streams = append(streams, c.lastStream)
	}
	for _, s := range streams {
		if err := c.waitStream(ctx, s); err != nil {
			if ierr := c.ipcError(); ierr != nil && errors.Is(err, ErrIPCMismatch) {
				err = ierr // names the calls
			}
			if c.poison == nil {
				c.poison = &detcoll.Error{Op: "Close", Rank: c.rank, Peer: -1, Err: err}
			}
			return err
		}
	}
	return nil
}

// closeDevice destroys the NCCL communicator and frees the workspace, the
// streams and the events; with drained false (a stream may still run) it
// aborts NCCL and leaks the workspace and the streams instead. Called with
// c.mu held.
func (c *Comm) closeDevice(drained bool) error {
	return c.dev.Do(func() error {
		var errs []error
		c.abortMu.Lock()
		if c.nc != nil {
			if c.poison != nil || c.aborted.Load() || !drained {
				errs = append(errs, c.nc.Abort())
			} else {
				errs = append(errs, c.nc.Destroy())
			}
		}
		c.abortMu.Unlock()
		if !drained {
			c.stats.LeakedBytes += c.wsBytes + c.retiredB
			return errors.Join(errs...)
		}
		errs = append(errs, c.freeWorkspace())
		errs = append(errs, c.rt.EventDestroy(c.joinEv), c.rt.EventDestroy(c.evT), c.rt.EventDestroy(c.evR),
			c.rt.StreamDestroy(c.stream), c.rt.StreamDestroy(c.side))
		return errors.Join(errs...)
	})
}

// waitTimeout is the bound of a host wait without a context.
func (c *Comm) waitTimeout() time.Duration { return c.cfg.waitTO }
